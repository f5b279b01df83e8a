from nnhal.proto import service_pb2 as _service_pb2
from nnhal.proto import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TokenValuePair(_message.Message):
    __slots__ = ("token", "value")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    token: int
    value: bytes
    def __init__(self, token: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...

class TimingNs(_message.Message):
    __slots__ = ("time_on_device_ns", "time_in_driver_ns")
    TIME_ON_DEVICE_NS_FIELD_NUMBER: _ClassVar[int]
    TIME_IN_DRIVER_NS_FIELD_NUMBER: _ClassVar[int]
    time_on_device_ns: int
    time_in_driver_ns: int
    def __init__(self, time_on_device_ns: _Optional[int] = ..., time_in_driver_ns: _Optional[int] = ...) -> None: ...

class AidlExecutionResult(_message.Message):
    __slots__ = ("status", "message", "output_sufficient_size", "output_shapes", "timing", "output_pools")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SUFFICIENT_SIZE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SHAPES_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_POOLS_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    output_sufficient_size: bool
    output_shapes: _containers.RepeatedCompositeFieldContainer[_types_pb2.OutputShape]
    timing: TimingNs
    output_pools: _containers.RepeatedCompositeFieldContainer[_service_pb2.PoolData]
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., output_sufficient_size: _Optional[bool] = ..., output_shapes: _Optional[_Iterable[_Union[_types_pb2.OutputShape, _Mapping]]] = ..., timing: _Optional[_Union[TimingNs, _Mapping]] = ..., output_pools: _Optional[_Iterable[_Union[_service_pb2.PoolData, _Mapping]]] = ...) -> None: ...

class ExecutionConfig(_message.Message):
    __slots__ = ("measure_timing", "loop_timeout_duration_ns", "execution_hints", "extension_name_to_prefix")
    MEASURE_TIMING_FIELD_NUMBER: _ClassVar[int]
    LOOP_TIMEOUT_DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_HINTS_FIELD_NUMBER: _ClassVar[int]
    EXTENSION_NAME_TO_PREFIX_FIELD_NUMBER: _ClassVar[int]
    measure_timing: bool
    loop_timeout_duration_ns: int
    execution_hints: _containers.RepeatedCompositeFieldContainer[TokenValuePair]
    extension_name_to_prefix: _containers.RepeatedCompositeFieldContainer[_types_pb2.ExtensionNameAndPrefix]
    def __init__(self, measure_timing: _Optional[bool] = ..., loop_timeout_duration_ns: _Optional[int] = ..., execution_hints: _Optional[_Iterable[_Union[TokenValuePair, _Mapping]]] = ..., extension_name_to_prefix: _Optional[_Iterable[_Union[_types_pb2.ExtensionNameAndPrefix, _Mapping]]] = ...) -> None: ...

class PrepareModelConfig(_message.Message):
    __slots__ = ("preference", "priority", "deadline", "model_cache", "data_cache", "cache_token", "compilation_hints", "extension_name_to_prefix", "want_cache")
    PREFERENCE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    MODEL_CACHE_FIELD_NUMBER: _ClassVar[int]
    DATA_CACHE_FIELD_NUMBER: _ClassVar[int]
    CACHE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    COMPILATION_HINTS_FIELD_NUMBER: _ClassVar[int]
    EXTENSION_NAME_TO_PREFIX_FIELD_NUMBER: _ClassVar[int]
    WANT_CACHE_FIELD_NUMBER: _ClassVar[int]
    preference: _types_pb2.ExecutionPreference
    priority: int
    deadline: _types_pb2.Deadline
    model_cache: _containers.RepeatedCompositeFieldContainer[_service_pb2.CacheFile]
    data_cache: _containers.RepeatedCompositeFieldContainer[_service_pb2.CacheFile]
    cache_token: bytes
    compilation_hints: _containers.RepeatedCompositeFieldContainer[TokenValuePair]
    extension_name_to_prefix: _containers.RepeatedCompositeFieldContainer[_types_pb2.ExtensionNameAndPrefix]
    want_cache: bool
    def __init__(self, preference: _Optional[_Union[_types_pb2.ExecutionPreference, str]] = ..., priority: _Optional[int] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ..., model_cache: _Optional[_Iterable[_Union[_service_pb2.CacheFile, _Mapping]]] = ..., data_cache: _Optional[_Iterable[_Union[_service_pb2.CacheFile, _Mapping]]] = ..., cache_token: _Optional[bytes] = ..., compilation_hints: _Optional[_Iterable[_Union[TokenValuePair, _Mapping]]] = ..., extension_name_to_prefix: _Optional[_Iterable[_Union[_types_pb2.ExtensionNameAndPrefix, _Mapping]]] = ..., want_cache: _Optional[bool] = ...) -> None: ...

class PrepareModelWithConfigRequest(_message.Message):
    __slots__ = ("session", "model", "config")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    session: str
    model: _types_pb2.Model
    config: PrepareModelConfig
    def __init__(self, session: _Optional[str] = ..., model: _Optional[_Union[_types_pb2.Model, _Mapping]] = ..., config: _Optional[_Union[PrepareModelConfig, _Mapping]] = ...) -> None: ...

class AidlBufferRole(_message.Message):
    __slots__ = ("model_index", "io_index", "probability")
    MODEL_INDEX_FIELD_NUMBER: _ClassVar[int]
    IO_INDEX_FIELD_NUMBER: _ClassVar[int]
    PROBABILITY_FIELD_NUMBER: _ClassVar[int]
    model_index: int
    io_index: int
    probability: float
    def __init__(self, model_index: _Optional[int] = ..., io_index: _Optional[int] = ..., probability: _Optional[float] = ...) -> None: ...

class AidlAllocateRequest(_message.Message):
    __slots__ = ("session", "desc", "prepared_models", "input_roles", "output_roles")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    DESC_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODELS_FIELD_NUMBER: _ClassVar[int]
    INPUT_ROLES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_ROLES_FIELD_NUMBER: _ClassVar[int]
    session: str
    desc: _types_pb2.BufferDesc
    prepared_models: _containers.RepeatedCompositeFieldContainer[_service_pb2.PreparedModelRef]
    input_roles: _containers.RepeatedCompositeFieldContainer[AidlBufferRole]
    output_roles: _containers.RepeatedCompositeFieldContainer[AidlBufferRole]
    def __init__(self, session: _Optional[str] = ..., desc: _Optional[_Union[_types_pb2.BufferDesc, _Mapping]] = ..., prepared_models: _Optional[_Iterable[_Union[_service_pb2.PreparedModelRef, _Mapping]]] = ..., input_roles: _Optional[_Iterable[_Union[AidlBufferRole, _Mapping]]] = ..., output_roles: _Optional[_Iterable[_Union[AidlBufferRole, _Mapping]]] = ...) -> None: ...

class AidlExecuteRequest(_message.Message):
    __slots__ = ("session", "prepared_model", "request", "measure_timing", "deadline", "loop_timeout_duration_ns")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    MEASURE_TIMING_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    LOOP_TIMEOUT_DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepared_model: str
    request: _types_pb2.Request
    measure_timing: bool
    deadline: _types_pb2.Deadline
    loop_timeout_duration_ns: int
    def __init__(self, session: _Optional[str] = ..., prepared_model: _Optional[str] = ..., request: _Optional[_Union[_types_pb2.Request, _Mapping]] = ..., measure_timing: _Optional[bool] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ..., loop_timeout_duration_ns: _Optional[int] = ...) -> None: ...

class ExecuteWithConfigRequest(_message.Message):
    __slots__ = ("session", "prepared_model", "request", "config", "deadline")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepared_model: str
    request: _types_pb2.Request
    config: ExecutionConfig
    deadline: _types_pb2.Deadline
    def __init__(self, session: _Optional[str] = ..., prepared_model: _Optional[str] = ..., request: _Optional[_Union[_types_pb2.Request, _Mapping]] = ..., config: _Optional[_Union[ExecutionConfig, _Mapping]] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ...) -> None: ...

class AidlFencedExecuteRequest(_message.Message):
    __slots__ = ("session", "prepared_model", "request", "wait_for", "measure_timing", "deadline", "loop_timeout_duration_ns", "duration_ns")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_FIELD_NUMBER: _ClassVar[int]
    MEASURE_TIMING_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    LOOP_TIMEOUT_DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepared_model: str
    request: _types_pb2.Request
    wait_for: _containers.RepeatedScalarFieldContainer[str]
    measure_timing: bool
    deadline: _types_pb2.Deadline
    loop_timeout_duration_ns: int
    duration_ns: int
    def __init__(self, session: _Optional[str] = ..., prepared_model: _Optional[str] = ..., request: _Optional[_Union[_types_pb2.Request, _Mapping]] = ..., wait_for: _Optional[_Iterable[str]] = ..., measure_timing: _Optional[bool] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ..., loop_timeout_duration_ns: _Optional[int] = ..., duration_ns: _Optional[int] = ...) -> None: ...

class FencedExecuteWithConfigRequest(_message.Message):
    __slots__ = ("session", "prepared_model", "request", "wait_for", "config", "deadline", "duration_ns")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepared_model: str
    request: _types_pb2.Request
    wait_for: _containers.RepeatedScalarFieldContainer[str]
    config: ExecutionConfig
    deadline: _types_pb2.Deadline
    duration_ns: int
    def __init__(self, session: _Optional[str] = ..., prepared_model: _Optional[str] = ..., request: _Optional[_Union[_types_pb2.Request, _Mapping]] = ..., wait_for: _Optional[_Iterable[str]] = ..., config: _Optional[_Union[ExecutionConfig, _Mapping]] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ..., duration_ns: _Optional[int] = ...) -> None: ...

class CreateReusableExecutionRequest(_message.Message):
    __slots__ = ("session", "prepared_model", "request", "config")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepared_model: str
    request: _types_pb2.Request
    config: ExecutionConfig
    def __init__(self, session: _Optional[str] = ..., prepared_model: _Optional[str] = ..., request: _Optional[_Union[_types_pb2.Request, _Mapping]] = ..., config: _Optional[_Union[ExecutionConfig, _Mapping]] = ...) -> None: ...

class ConfigureBurstRequest(_message.Message):
    __slots__ = ("session", "prepared_model")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepared_model: str
    def __init__(self, session: _Optional[str] = ..., prepared_model: _Optional[str] = ...) -> None: ...

class ObjectResponse(_message.Message):
    __slots__ = ("status", "message", "handle")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    handle: str
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., handle: _Optional[str] = ...) -> None: ...

class AidlFencedInfoResponse(_message.Message):
    __slots__ = ("status", "message", "timing_launched", "timing_fenced", "signalled", "output_pools")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TIMING_LAUNCHED_FIELD_NUMBER: _ClassVar[int]
    TIMING_FENCED_FIELD_NUMBER: _ClassVar[int]
    SIGNALLED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_POOLS_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    timing_launched: TimingNs
    timing_fenced: TimingNs
    signalled: bool
    output_pools: _containers.RepeatedCompositeFieldContainer[_service_pb2.PoolData]
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., timing_launched: _Optional[_Union[TimingNs, _Mapping]] = ..., timing_fenced: _Optional[_Union[TimingNs, _Mapping]] = ..., signalled: _Optional[bool] = ..., output_pools: _Optional[_Iterable[_Union[_service_pb2.PoolData, _Mapping]]] = ...) -> None: ...

class ExecutionRunRequest(_message.Message):
    __slots__ = ("session", "execution", "deadline")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    session: str
    execution: str
    deadline: _types_pb2.Deadline
    def __init__(self, session: _Optional[str] = ..., execution: _Optional[str] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ...) -> None: ...

class ExecutionFencedRequest(_message.Message):
    __slots__ = ("session", "execution", "wait_for", "deadline", "duration_ns")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    session: str
    execution: str
    wait_for: _containers.RepeatedScalarFieldContainer[str]
    deadline: _types_pb2.Deadline
    duration_ns: int
    def __init__(self, session: _Optional[str] = ..., execution: _Optional[str] = ..., wait_for: _Optional[_Iterable[str]] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ..., duration_ns: _Optional[int] = ...) -> None: ...

class BurstExecuteRequest(_message.Message):
    __slots__ = ("session", "burst", "request", "memory_identifier_tokens", "measure_timing", "deadline", "loop_timeout_duration_ns")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    MEMORY_IDENTIFIER_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MEASURE_TIMING_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    LOOP_TIMEOUT_DURATION_NS_FIELD_NUMBER: _ClassVar[int]
    session: str
    burst: str
    request: _types_pb2.Request
    memory_identifier_tokens: _containers.RepeatedScalarFieldContainer[int]
    measure_timing: bool
    deadline: _types_pb2.Deadline
    loop_timeout_duration_ns: int
    def __init__(self, session: _Optional[str] = ..., burst: _Optional[str] = ..., request: _Optional[_Union[_types_pb2.Request, _Mapping]] = ..., memory_identifier_tokens: _Optional[_Iterable[int]] = ..., measure_timing: _Optional[bool] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ..., loop_timeout_duration_ns: _Optional[int] = ...) -> None: ...

class BurstExecuteWithConfigRequest(_message.Message):
    __slots__ = ("session", "burst", "request", "memory_identifier_tokens", "config", "deadline")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    MEMORY_IDENTIFIER_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    session: str
    burst: str
    request: _types_pb2.Request
    memory_identifier_tokens: _containers.RepeatedScalarFieldContainer[int]
    config: ExecutionConfig
    deadline: _types_pb2.Deadline
    def __init__(self, session: _Optional[str] = ..., burst: _Optional[str] = ..., request: _Optional[_Union[_types_pb2.Request, _Mapping]] = ..., memory_identifier_tokens: _Optional[_Iterable[int]] = ..., config: _Optional[_Union[ExecutionConfig, _Mapping]] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ...) -> None: ...

class ReleaseMemoryRequest(_message.Message):
    __slots__ = ("session", "burst", "memory_identifier_token")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    BURST_FIELD_NUMBER: _ClassVar[int]
    MEMORY_IDENTIFIER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session: str
    burst: str
    memory_identifier_token: int
    def __init__(self, session: _Optional[str] = ..., burst: _Optional[str] = ..., memory_identifier_token: _Optional[int] = ...) -> None: ...

from nnhal.proto import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpenSessionRequest(_message.Message):
    __slots__ = ("client_name", "protocol_version")
    CLIENT_NAME_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    client_name: str
    protocol_version: int
    def __init__(self, client_name: _Optional[str] = ..., protocol_version: _Optional[int] = ...) -> None: ...

class ServerCapabilities(_message.Message):
    __slots__ = ("fast_path", "streamed_execution", "close_session", "devices", "max_message_bytes")
    FAST_PATH_FIELD_NUMBER: _ClassVar[int]
    STREAMED_EXECUTION_FIELD_NUMBER: _ClassVar[int]
    CLOSE_SESSION_FIELD_NUMBER: _ClassVar[int]
    DEVICES_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    fast_path: bool
    streamed_execution: bool
    close_session: bool
    devices: _containers.RepeatedScalarFieldContainer[str]
    max_message_bytes: int
    def __init__(self, fast_path: _Optional[bool] = ..., streamed_execution: _Optional[bool] = ..., close_session: _Optional[bool] = ..., devices: _Optional[_Iterable[str]] = ..., max_message_bytes: _Optional[int] = ...) -> None: ...

class SessionEvent(_message.Message):
    __slots__ = ("session", "device_name", "feature_level", "shm_dir", "shm_prefix", "draining", "status", "message", "protocol_version", "min_protocol_version", "max_protocol_version", "capabilities", "shm_memfd")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    DEVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    FEATURE_LEVEL_FIELD_NUMBER: _ClassVar[int]
    SHM_DIR_FIELD_NUMBER: _ClassVar[int]
    SHM_PREFIX_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    MIN_PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    SHM_MEMFD_FIELD_NUMBER: _ClassVar[int]
    session: str
    device_name: str
    feature_level: int
    shm_dir: str
    shm_prefix: str
    draining: bool
    status: _types_pb2.ErrorStatus
    message: str
    protocol_version: int
    min_protocol_version: int
    max_protocol_version: int
    capabilities: ServerCapabilities
    shm_memfd: str
    def __init__(self, session: _Optional[str] = ..., device_name: _Optional[str] = ..., feature_level: _Optional[int] = ..., shm_dir: _Optional[str] = ..., shm_prefix: _Optional[str] = ..., draining: _Optional[bool] = ..., status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., protocol_version: _Optional[int] = ..., min_protocol_version: _Optional[int] = ..., max_protocol_version: _Optional[int] = ..., capabilities: _Optional[_Union[ServerCapabilities, _Mapping]] = ..., shm_memfd: _Optional[str] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: str
    def __init__(self, session: _Optional[str] = ...) -> None: ...

class DeviceRequest(_message.Message):
    __slots__ = ("session",)
    SESSION_FIELD_NUMBER: _ClassVar[int]
    session: str
    def __init__(self, session: _Optional[str] = ...) -> None: ...

class StatusMessage(_message.Message):
    __slots__ = ("status", "message")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ...) -> None: ...

class CapabilitiesResponse(_message.Message):
    __slots__ = ("status", "message", "capabilities")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    capabilities: _types_pb2.Capabilities
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., capabilities: _Optional[_Union[_types_pb2.Capabilities, _Mapping]] = ...) -> None: ...

class VersionStringResponse(_message.Message):
    __slots__ = ("status", "message", "version")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    version: str
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class TypeResponse(_message.Message):
    __slots__ = ("status", "message", "type")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    type: _types_pb2.DeviceType
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., type: _Optional[_Union[_types_pb2.DeviceType, str]] = ...) -> None: ...

class ExtensionsResponse(_message.Message):
    __slots__ = ("status", "message", "extensions")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXTENSIONS_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    extensions: _containers.RepeatedCompositeFieldContainer[_types_pb2.Extension]
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., extensions: _Optional[_Iterable[_Union[_types_pb2.Extension, _Mapping]]] = ...) -> None: ...

class SupportedOperationsRequest(_message.Message):
    __slots__ = ("session", "model")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    session: str
    model: _types_pb2.Model
    def __init__(self, session: _Optional[str] = ..., model: _Optional[_Union[_types_pb2.Model, _Mapping]] = ...) -> None: ...

class SupportedOperationsResponse(_message.Message):
    __slots__ = ("status", "message", "supported", "reasons")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    REASONS_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    supported: _containers.RepeatedScalarFieldContainer[bool]
    reasons: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., supported: _Optional[_Iterable[bool]] = ..., reasons: _Optional[_Iterable[str]] = ...) -> None: ...

class CacheFilesResponse(_message.Message):
    __slots__ = ("status", "message", "num_model_cache", "num_data_cache")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NUM_MODEL_CACHE_FIELD_NUMBER: _ClassVar[int]
    NUM_DATA_CACHE_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    num_model_cache: int
    num_data_cache: int
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., num_model_cache: _Optional[int] = ..., num_data_cache: _Optional[int] = ...) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.DeviceStatus
    def __init__(self, status: _Optional[_Union[_types_pb2.DeviceStatus, str]] = ...) -> None: ...

class CacheFile(_message.Message):
    __slots__ = ("data", "held")
    DATA_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    held: HeldFile
    def __init__(self, data: _Optional[bytes] = ..., held: _Optional[_Union[HeldFile, _Mapping]] = ...) -> None: ...

class HeldFile(_message.Message):
    __slots__ = ("pid", "fd", "dev", "ino", "size")
    PID_FIELD_NUMBER: _ClassVar[int]
    FD_FIELD_NUMBER: _ClassVar[int]
    DEV_FIELD_NUMBER: _ClassVar[int]
    INO_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    pid: int
    fd: int
    dev: int
    ino: int
    size: int
    def __init__(self, pid: _Optional[int] = ..., fd: _Optional[int] = ..., dev: _Optional[int] = ..., ino: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class PrepareModelRequest(_message.Message):
    __slots__ = ("session", "model", "preference", "priority", "deadline", "model_cache", "data_cache", "token", "want_cache")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PREFERENCE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    MODEL_CACHE_FIELD_NUMBER: _ClassVar[int]
    DATA_CACHE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    WANT_CACHE_FIELD_NUMBER: _ClassVar[int]
    session: str
    model: _types_pb2.Model
    preference: _types_pb2.ExecutionPreference
    priority: int
    deadline: _types_pb2.Deadline
    model_cache: _containers.RepeatedCompositeFieldContainer[CacheFile]
    data_cache: _containers.RepeatedCompositeFieldContainer[CacheFile]
    token: bytes
    want_cache: bool
    def __init__(self, session: _Optional[str] = ..., model: _Optional[_Union[_types_pb2.Model, _Mapping]] = ..., preference: _Optional[_Union[_types_pb2.ExecutionPreference, str]] = ..., priority: _Optional[int] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ..., model_cache: _Optional[_Iterable[_Union[CacheFile, _Mapping]]] = ..., data_cache: _Optional[_Iterable[_Union[CacheFile, _Mapping]]] = ..., token: _Optional[bytes] = ..., want_cache: _Optional[bool] = ...) -> None: ...

class PrepareModelFromCacheRequest(_message.Message):
    __slots__ = ("session", "deadline", "model_cache", "data_cache", "token")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    MODEL_CACHE_FIELD_NUMBER: _ClassVar[int]
    DATA_CACHE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    session: str
    deadline: _types_pb2.Deadline
    model_cache: _containers.RepeatedCompositeFieldContainer[CacheFile]
    data_cache: _containers.RepeatedCompositeFieldContainer[CacheFile]
    token: bytes
    def __init__(self, session: _Optional[str] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ..., model_cache: _Optional[_Iterable[_Union[CacheFile, _Mapping]]] = ..., data_cache: _Optional[_Iterable[_Union[CacheFile, _Mapping]]] = ..., token: _Optional[bytes] = ...) -> None: ...

class PreparedModelRef(_message.Message):
    __slots__ = ("handle",)
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    handle: str
    def __init__(self, handle: _Optional[str] = ...) -> None: ...

class PrepareModelEvent(_message.Message):
    __slots__ = ("launch", "notify")
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_FIELD_NUMBER: _ClassVar[int]
    launch: StatusMessage
    notify: PrepareModelNotify
    def __init__(self, launch: _Optional[_Union[StatusMessage, _Mapping]] = ..., notify: _Optional[_Union[PrepareModelNotify, _Mapping]] = ...) -> None: ...

class PrepareModelNotify(_message.Message):
    __slots__ = ("status", "message", "prepared_model", "model_cache", "data_cache")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    MODEL_CACHE_FIELD_NUMBER: _ClassVar[int]
    DATA_CACHE_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    prepared_model: PreparedModelRef
    model_cache: _containers.RepeatedCompositeFieldContainer[CacheFile]
    data_cache: _containers.RepeatedCompositeFieldContainer[CacheFile]
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., prepared_model: _Optional[_Union[PreparedModelRef, _Mapping]] = ..., model_cache: _Optional[_Iterable[_Union[CacheFile, _Mapping]]] = ..., data_cache: _Optional[_Iterable[_Union[CacheFile, _Mapping]]] = ...) -> None: ...

class AllocateRequest(_message.Message):
    __slots__ = ("session", "desc", "prepared_models", "input_roles", "output_roles")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    DESC_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODELS_FIELD_NUMBER: _ClassVar[int]
    INPUT_ROLES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_ROLES_FIELD_NUMBER: _ClassVar[int]
    session: str
    desc: _types_pb2.BufferDesc
    prepared_models: _containers.RepeatedCompositeFieldContainer[PreparedModelRef]
    input_roles: _containers.RepeatedCompositeFieldContainer[_types_pb2.BufferRole]
    output_roles: _containers.RepeatedCompositeFieldContainer[_types_pb2.BufferRole]
    def __init__(self, session: _Optional[str] = ..., desc: _Optional[_Union[_types_pb2.BufferDesc, _Mapping]] = ..., prepared_models: _Optional[_Iterable[_Union[PreparedModelRef, _Mapping]]] = ..., input_roles: _Optional[_Iterable[_Union[_types_pb2.BufferRole, _Mapping]]] = ..., output_roles: _Optional[_Iterable[_Union[_types_pb2.BufferRole, _Mapping]]] = ...) -> None: ...

class AllocateResponse(_message.Message):
    __slots__ = ("status", "message", "buffer", "token")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    buffer: str
    token: int
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., buffer: _Optional[str] = ..., token: _Optional[int] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("sessions", "prepared_models", "buffers", "executions", "bytes_in_use", "queue_depth", "fences", "limits", "long_calls", "identity", "prepared_models_by_priority", "executions_by_transport", "operations_on_backend", "operations_on_fallback")
    class LimitsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class PreparedModelsByPriorityEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ExecutionsByTransportEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class OperationsOnBackendEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class OperationsOnFallbackEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODELS_FIELD_NUMBER: _ClassVar[int]
    BUFFERS_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_FIELD_NUMBER: _ClassVar[int]
    BYTES_IN_USE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_DEPTH_FIELD_NUMBER: _ClassVar[int]
    FENCES_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    LONG_CALLS_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODELS_BY_PRIORITY_FIELD_NUMBER: _ClassVar[int]
    EXECUTIONS_BY_TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_ON_BACKEND_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_ON_FALLBACK_FIELD_NUMBER: _ClassVar[int]
    sessions: int
    prepared_models: int
    buffers: int
    executions: int
    bytes_in_use: int
    queue_depth: int
    fences: int
    limits: _containers.ScalarMap[str, int]
    long_calls: int
    identity: str
    prepared_models_by_priority: _containers.ScalarMap[str, int]
    executions_by_transport: _containers.ScalarMap[str, int]
    operations_on_backend: _containers.ScalarMap[str, int]
    operations_on_fallback: _containers.ScalarMap[str, int]
    def __init__(self, sessions: _Optional[int] = ..., prepared_models: _Optional[int] = ..., buffers: _Optional[int] = ..., executions: _Optional[int] = ..., bytes_in_use: _Optional[int] = ..., queue_depth: _Optional[int] = ..., fences: _Optional[int] = ..., limits: _Optional[_Mapping[str, int]] = ..., long_calls: _Optional[int] = ..., identity: _Optional[str] = ..., prepared_models_by_priority: _Optional[_Mapping[str, int]] = ..., executions_by_transport: _Optional[_Mapping[str, int]] = ..., operations_on_backend: _Optional[_Mapping[str, int]] = ..., operations_on_fallback: _Optional[_Mapping[str, int]] = ...) -> None: ...

class FaultRequest(_message.Message):
    __slots__ = ("session", "prepare_delay_ms", "execute_delay_ms", "faults", "clear")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARE_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    FAULTS_FIELD_NUMBER: _ClassVar[int]
    CLEAR_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepare_delay_ms: int
    execute_delay_ms: int
    faults: _containers.RepeatedCompositeFieldContainer[InjectedFault]
    clear: bool
    def __init__(self, session: _Optional[str] = ..., prepare_delay_ms: _Optional[int] = ..., execute_delay_ms: _Optional[int] = ..., faults: _Optional[_Iterable[_Union[InjectedFault, _Mapping]]] = ..., clear: _Optional[bool] = ...) -> None: ...

class InjectedFault(_message.Message):
    __slots__ = ("method", "kind", "count", "status", "message", "grpc_code", "after_messages", "stall_ms", "point", "exit_code")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[InjectedFault.Kind]
        ERROR: _ClassVar[InjectedFault.Kind]
        ABORT: _ClassVar[InjectedFault.Kind]
        STALL: _ClassVar[InjectedFault.Kind]
        EXIT: _ClassVar[InjectedFault.Kind]
    KIND_UNSPECIFIED: InjectedFault.Kind
    ERROR: InjectedFault.Kind
    ABORT: InjectedFault.Kind
    STALL: InjectedFault.Kind
    EXIT: InjectedFault.Kind
    class Point(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        POINT_UNSPECIFIED: _ClassVar[InjectedFault.Point]
        START: _ClassVar[InjectedFault.Point]
        AFTER_LAUNCH: _ClassVar[InjectedFault.Point]
        BEFORE_REPLY: _ClassVar[InjectedFault.Point]
    POINT_UNSPECIFIED: InjectedFault.Point
    START: InjectedFault.Point
    AFTER_LAUNCH: InjectedFault.Point
    BEFORE_REPLY: InjectedFault.Point
    METHOD_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    GRPC_CODE_FIELD_NUMBER: _ClassVar[int]
    AFTER_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    STALL_MS_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    method: str
    kind: InjectedFault.Kind
    count: int
    status: _types_pb2.ErrorStatus
    message: str
    grpc_code: int
    after_messages: int
    stall_ms: int
    point: InjectedFault.Point
    exit_code: int
    def __init__(self, method: _Optional[str] = ..., kind: _Optional[_Union[InjectedFault.Kind, str]] = ..., count: _Optional[int] = ..., status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., grpc_code: _Optional[int] = ..., after_messages: _Optional[int] = ..., stall_ms: _Optional[int] = ..., point: _Optional[_Union[InjectedFault.Point, str]] = ..., exit_code: _Optional[int] = ...) -> None: ...

class ExecuteRequest(_message.Message):
    __slots__ = ("session", "prepared_model", "request", "measure", "deadline", "loop_timeout_ns", "profile")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    MEASURE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    LOOP_TIMEOUT_NS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepared_model: str
    request: _types_pb2.Request
    measure: _types_pb2.MeasureTiming
    deadline: _types_pb2.Deadline
    loop_timeout_ns: int
    profile: bool
    def __init__(self, session: _Optional[str] = ..., prepared_model: _Optional[str] = ..., request: _Optional[_Union[_types_pb2.Request, _Mapping]] = ..., measure: _Optional[_Union[_types_pb2.MeasureTiming, str]] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ..., loop_timeout_ns: _Optional[int] = ..., profile: _Optional[bool] = ...) -> None: ...

class OperationProfile(_message.Message):
    __slots__ = ("operation", "count", "total_us")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_US_FIELD_NUMBER: _ClassVar[int]
    operation: str
    count: int
    total_us: int
    def __init__(self, operation: _Optional[str] = ..., count: _Optional[int] = ..., total_us: _Optional[int] = ...) -> None: ...

class OperationTiming(_message.Message):
    __slots__ = ("index", "operation", "subgraph", "start_us", "duration_us")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    SUBGRAPH_FIELD_NUMBER: _ClassVar[int]
    START_US_FIELD_NUMBER: _ClassVar[int]
    DURATION_US_FIELD_NUMBER: _ClassVar[int]
    index: int
    operation: str
    subgraph: int
    start_us: int
    duration_us: int
    def __init__(self, index: _Optional[int] = ..., operation: _Optional[str] = ..., subgraph: _Optional[int] = ..., start_us: _Optional[int] = ..., duration_us: _Optional[int] = ...) -> None: ...

class PoolData(_message.Message):
    __slots__ = ("pool_index", "data")
    POOL_INDEX_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    pool_index: int
    data: bytes
    def __init__(self, pool_index: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class ExecuteResult(_message.Message):
    __slots__ = ("status", "message", "output_shapes", "timing", "output_pools", "profile", "timeline")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SHAPES_FIELD_NUMBER: _ClassVar[int]
    TIMING_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_POOLS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    TIMELINE_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    output_shapes: _containers.RepeatedCompositeFieldContainer[_types_pb2.OutputShape]
    timing: _types_pb2.Timing
    output_pools: _containers.RepeatedCompositeFieldContainer[PoolData]
    profile: _containers.RepeatedCompositeFieldContainer[OperationProfile]
    timeline: _containers.RepeatedCompositeFieldContainer[OperationTiming]
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., output_shapes: _Optional[_Iterable[_Union[_types_pb2.OutputShape, _Mapping]]] = ..., timing: _Optional[_Union[_types_pb2.Timing, _Mapping]] = ..., output_pools: _Optional[_Iterable[_Union[PoolData, _Mapping]]] = ..., profile: _Optional[_Iterable[_Union[OperationProfile, _Mapping]]] = ..., timeline: _Optional[_Iterable[_Union[OperationTiming, _Mapping]]] = ...) -> None: ...

class ExecuteEvent(_message.Message):
    __slots__ = ("launch", "notify")
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_FIELD_NUMBER: _ClassVar[int]
    launch: StatusMessage
    notify: ExecuteResult
    def __init__(self, launch: _Optional[_Union[StatusMessage, _Mapping]] = ..., notify: _Optional[_Union[ExecuteResult, _Mapping]] = ...) -> None: ...

class FencedExecuteRequest(_message.Message):
    __slots__ = ("session", "prepared_model", "request", "wait_for", "measure", "deadline", "loop_timeout_ns", "timeout_after_fence_ns")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    WAIT_FOR_FIELD_NUMBER: _ClassVar[int]
    MEASURE_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    LOOP_TIMEOUT_NS_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_AFTER_FENCE_NS_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepared_model: str
    request: _types_pb2.Request
    wait_for: _containers.RepeatedScalarFieldContainer[str]
    measure: _types_pb2.MeasureTiming
    deadline: _types_pb2.Deadline
    loop_timeout_ns: int
    timeout_after_fence_ns: int
    def __init__(self, session: _Optional[str] = ..., prepared_model: _Optional[str] = ..., request: _Optional[_Union[_types_pb2.Request, _Mapping]] = ..., wait_for: _Optional[_Iterable[str]] = ..., measure: _Optional[_Union[_types_pb2.MeasureTiming, str]] = ..., deadline: _Optional[_Union[_types_pb2.Deadline, _Mapping]] = ..., loop_timeout_ns: _Optional[int] = ..., timeout_after_fence_ns: _Optional[int] = ...) -> None: ...

class FencedExecuteResponse(_message.Message):
    __slots__ = ("status", "message", "sync_fence", "callback")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SYNC_FENCE_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    sync_fence: str
    callback: str
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., sync_fence: _Optional[str] = ..., callback: _Optional[str] = ...) -> None: ...

class FencedInfoRequest(_message.Message):
    __slots__ = ("session", "callback", "wait")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    CALLBACK_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    session: str
    callback: str
    wait: bool
    def __init__(self, session: _Optional[str] = ..., callback: _Optional[str] = ..., wait: _Optional[bool] = ...) -> None: ...

class FencedInfoResponse(_message.Message):
    __slots__ = ("status", "message", "timing_launched", "timing_fenced", "signalled", "output_pools")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TIMING_LAUNCHED_FIELD_NUMBER: _ClassVar[int]
    TIMING_FENCED_FIELD_NUMBER: _ClassVar[int]
    SIGNALLED_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_POOLS_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    timing_launched: _types_pb2.Timing
    timing_fenced: _types_pb2.Timing
    signalled: bool
    output_pools: _containers.RepeatedCompositeFieldContainer[PoolData]
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., timing_launched: _Optional[_Union[_types_pb2.Timing, _Mapping]] = ..., timing_fenced: _Optional[_Union[_types_pb2.Timing, _Mapping]] = ..., signalled: _Optional[bool] = ..., output_pools: _Optional[_Iterable[_Union[PoolData, _Mapping]]] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("session", "handle")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    session: str
    handle: str
    def __init__(self, session: _Optional[str] = ..., handle: _Optional[str] = ...) -> None: ...

class BurstRequest(_message.Message):
    __slots__ = ("session", "prepared_model", "execute", "free_slots")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_FIELD_NUMBER: _ClassVar[int]
    FREE_SLOTS_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepared_model: str
    execute: ExecuteRequest
    free_slots: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, session: _Optional[str] = ..., prepared_model: _Optional[str] = ..., execute: _Optional[_Union[ExecuteRequest, _Mapping]] = ..., free_slots: _Optional[_Iterable[int]] = ...) -> None: ...

class BurstResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: ExecuteResult
    def __init__(self, result: _Optional[_Union[ExecuteResult, _Mapping]] = ...) -> None: ...

class CopyToRequest(_message.Message):
    __slots__ = ("session", "buffer", "dst")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    DST_FIELD_NUMBER: _ClassVar[int]
    session: str
    buffer: str
    dst: _types_pb2.MemoryPool
    def __init__(self, session: _Optional[str] = ..., buffer: _Optional[str] = ..., dst: _Optional[_Union[_types_pb2.MemoryPool, _Mapping]] = ...) -> None: ...

class CopyToResponse(_message.Message):
    __slots__ = ("status", "message", "data")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    data: bytes
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class CopyFromRequest(_message.Message):
    __slots__ = ("session", "buffer", "src", "dimensions")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    SRC_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    session: str
    buffer: str
    src: _types_pb2.MemoryPool
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, session: _Optional[str] = ..., buffer: _Optional[str] = ..., src: _Optional[_Union[_types_pb2.MemoryPool, _Mapping]] = ..., dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class EchoMessage(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

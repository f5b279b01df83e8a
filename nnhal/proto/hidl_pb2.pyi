from nnhal.proto import service_pb2 as _service_pb2
from nnhal.proto import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HidlMemory(_message.Message):
    __slots__ = ("inline", "shared")
    INLINE_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    inline: _types_pb2.InlineMemory
    shared: _types_pb2.SharedMemory
    def __init__(self, inline: _Optional[_Union[_types_pb2.InlineMemory, _Mapping]] = ..., shared: _Optional[_Union[_types_pb2.SharedMemory, _Mapping]] = ...) -> None: ...

class OperandV1_0(_message.Message):
    __slots__ = ("type", "dimensions", "number_of_consumers", "scale", "zero_point", "lifetime", "location")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    NUMBER_OF_CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    ZERO_POINT_FIELD_NUMBER: _ClassVar[int]
    LIFETIME_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    type: int
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    number_of_consumers: int
    scale: float
    zero_point: int
    lifetime: int
    location: _types_pb2.DataLocation
    def __init__(self, type: _Optional[int] = ..., dimensions: _Optional[_Iterable[int]] = ..., number_of_consumers: _Optional[int] = ..., scale: _Optional[float] = ..., zero_point: _Optional[int] = ..., lifetime: _Optional[int] = ..., location: _Optional[_Union[_types_pb2.DataLocation, _Mapping]] = ...) -> None: ...

class ModelV1_0(_message.Message):
    __slots__ = ("operands", "operations", "input_indexes", "output_indexes", "operand_values", "pools")
    OPERANDS_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    INPUT_INDEXES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_INDEXES_FIELD_NUMBER: _ClassVar[int]
    OPERAND_VALUES_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    operands: _containers.RepeatedCompositeFieldContainer[OperandV1_0]
    operations: _containers.RepeatedCompositeFieldContainer[_types_pb2.Operation]
    input_indexes: _containers.RepeatedScalarFieldContainer[int]
    output_indexes: _containers.RepeatedScalarFieldContainer[int]
    operand_values: bytes
    pools: _containers.RepeatedCompositeFieldContainer[HidlMemory]
    def __init__(self, operands: _Optional[_Iterable[_Union[OperandV1_0, _Mapping]]] = ..., operations: _Optional[_Iterable[_Union[_types_pb2.Operation, _Mapping]]] = ..., input_indexes: _Optional[_Iterable[int]] = ..., output_indexes: _Optional[_Iterable[int]] = ..., operand_values: _Optional[bytes] = ..., pools: _Optional[_Iterable[_Union[HidlMemory, _Mapping]]] = ...) -> None: ...

class ModelV1_1(_message.Message):
    __slots__ = ("operands", "operations", "input_indexes", "output_indexes", "operand_values", "pools", "relax_computation_float32_to_float16")
    OPERANDS_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    INPUT_INDEXES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_INDEXES_FIELD_NUMBER: _ClassVar[int]
    OPERAND_VALUES_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    RELAX_COMPUTATION_FLOAT32_TO_FLOAT16_FIELD_NUMBER: _ClassVar[int]
    operands: _containers.RepeatedCompositeFieldContainer[OperandV1_0]
    operations: _containers.RepeatedCompositeFieldContainer[_types_pb2.Operation]
    input_indexes: _containers.RepeatedScalarFieldContainer[int]
    output_indexes: _containers.RepeatedScalarFieldContainer[int]
    operand_values: bytes
    pools: _containers.RepeatedCompositeFieldContainer[HidlMemory]
    relax_computation_float32_to_float16: bool
    def __init__(self, operands: _Optional[_Iterable[_Union[OperandV1_0, _Mapping]]] = ..., operations: _Optional[_Iterable[_Union[_types_pb2.Operation, _Mapping]]] = ..., input_indexes: _Optional[_Iterable[int]] = ..., output_indexes: _Optional[_Iterable[int]] = ..., operand_values: _Optional[bytes] = ..., pools: _Optional[_Iterable[_Union[HidlMemory, _Mapping]]] = ..., relax_computation_float32_to_float16: _Optional[bool] = ...) -> None: ...

class ModelV1_2(_message.Message):
    __slots__ = ("operands", "operations", "input_indexes", "output_indexes", "operand_values", "pools", "relax_computation_float32_to_float16", "extension_name_to_prefix")
    OPERANDS_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    INPUT_INDEXES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_INDEXES_FIELD_NUMBER: _ClassVar[int]
    OPERAND_VALUES_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    RELAX_COMPUTATION_FLOAT32_TO_FLOAT16_FIELD_NUMBER: _ClassVar[int]
    EXTENSION_NAME_TO_PREFIX_FIELD_NUMBER: _ClassVar[int]
    operands: _containers.RepeatedCompositeFieldContainer[_types_pb2.Operand]
    operations: _containers.RepeatedCompositeFieldContainer[_types_pb2.Operation]
    input_indexes: _containers.RepeatedScalarFieldContainer[int]
    output_indexes: _containers.RepeatedScalarFieldContainer[int]
    operand_values: bytes
    pools: _containers.RepeatedCompositeFieldContainer[HidlMemory]
    relax_computation_float32_to_float16: bool
    extension_name_to_prefix: _containers.RepeatedCompositeFieldContainer[_types_pb2.ExtensionNameAndPrefix]
    def __init__(self, operands: _Optional[_Iterable[_Union[_types_pb2.Operand, _Mapping]]] = ..., operations: _Optional[_Iterable[_Union[_types_pb2.Operation, _Mapping]]] = ..., input_indexes: _Optional[_Iterable[int]] = ..., output_indexes: _Optional[_Iterable[int]] = ..., operand_values: _Optional[bytes] = ..., pools: _Optional[_Iterable[_Union[HidlMemory, _Mapping]]] = ..., relax_computation_float32_to_float16: _Optional[bool] = ..., extension_name_to_prefix: _Optional[_Iterable[_Union[_types_pb2.ExtensionNameAndPrefix, _Mapping]]] = ...) -> None: ...

class RequestV1_0(_message.Message):
    __slots__ = ("inputs", "outputs", "pools")
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    inputs: _containers.RepeatedCompositeFieldContainer[_types_pb2.RequestArgument]
    outputs: _containers.RepeatedCompositeFieldContainer[_types_pb2.RequestArgument]
    pools: _containers.RepeatedCompositeFieldContainer[HidlMemory]
    def __init__(self, inputs: _Optional[_Iterable[_Union[_types_pb2.RequestArgument, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[_types_pb2.RequestArgument, _Mapping]]] = ..., pools: _Optional[_Iterable[_Union[HidlMemory, _Mapping]]] = ...) -> None: ...

class CapabilitiesV1_0(_message.Message):
    __slots__ = ("float32_performance", "quantized8_performance")
    FLOAT32_PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    QUANTIZED8_PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    float32_performance: _types_pb2.PerformanceInfo
    quantized8_performance: _types_pb2.PerformanceInfo
    def __init__(self, float32_performance: _Optional[_Union[_types_pb2.PerformanceInfo, _Mapping]] = ..., quantized8_performance: _Optional[_Union[_types_pb2.PerformanceInfo, _Mapping]] = ...) -> None: ...

class CapabilitiesV1_1(_message.Message):
    __slots__ = ("float32_performance", "quantized8_performance", "relaxed_float32_to_float16_performance")
    FLOAT32_PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    QUANTIZED8_PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    RELAXED_FLOAT32_TO_FLOAT16_PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    float32_performance: _types_pb2.PerformanceInfo
    quantized8_performance: _types_pb2.PerformanceInfo
    relaxed_float32_to_float16_performance: _types_pb2.PerformanceInfo
    def __init__(self, float32_performance: _Optional[_Union[_types_pb2.PerformanceInfo, _Mapping]] = ..., quantized8_performance: _Optional[_Union[_types_pb2.PerformanceInfo, _Mapping]] = ..., relaxed_float32_to_float16_performance: _Optional[_Union[_types_pb2.PerformanceInfo, _Mapping]] = ...) -> None: ...

class CapabilitiesV1_2(_message.Message):
    __slots__ = ("relaxed_float32_to_float16_performance_scalar", "relaxed_float32_to_float16_performance_tensor", "operand_performance")
    RELAXED_FLOAT32_TO_FLOAT16_PERFORMANCE_SCALAR_FIELD_NUMBER: _ClassVar[int]
    RELAXED_FLOAT32_TO_FLOAT16_PERFORMANCE_TENSOR_FIELD_NUMBER: _ClassVar[int]
    OPERAND_PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    relaxed_float32_to_float16_performance_scalar: _types_pb2.PerformanceInfo
    relaxed_float32_to_float16_performance_tensor: _types_pb2.PerformanceInfo
    operand_performance: _containers.RepeatedCompositeFieldContainer[_types_pb2.OperandPerformance]
    def __init__(self, relaxed_float32_to_float16_performance_scalar: _Optional[_Union[_types_pb2.PerformanceInfo, _Mapping]] = ..., relaxed_float32_to_float16_performance_tensor: _Optional[_Union[_types_pb2.PerformanceInfo, _Mapping]] = ..., operand_performance: _Optional[_Iterable[_Union[_types_pb2.OperandPerformance, _Mapping]]] = ...) -> None: ...

class CapabilitiesV1_0Response(_message.Message):
    __slots__ = ("status", "message", "capabilities")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    capabilities: CapabilitiesV1_0
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., capabilities: _Optional[_Union[CapabilitiesV1_0, _Mapping]] = ...) -> None: ...

class CapabilitiesV1_1Response(_message.Message):
    __slots__ = ("status", "message", "capabilities")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    capabilities: CapabilitiesV1_1
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., capabilities: _Optional[_Union[CapabilitiesV1_1, _Mapping]] = ...) -> None: ...

class CapabilitiesV1_2Response(_message.Message):
    __slots__ = ("status", "message", "capabilities")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    capabilities: CapabilitiesV1_2
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., capabilities: _Optional[_Union[CapabilitiesV1_2, _Mapping]] = ...) -> None: ...

class SupportedOperationsV1_0Request(_message.Message):
    __slots__ = ("session", "model")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    session: str
    model: ModelV1_0
    def __init__(self, session: _Optional[str] = ..., model: _Optional[_Union[ModelV1_0, _Mapping]] = ...) -> None: ...

class SupportedOperationsV1_1Request(_message.Message):
    __slots__ = ("session", "model")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    session: str
    model: ModelV1_1
    def __init__(self, session: _Optional[str] = ..., model: _Optional[_Union[ModelV1_1, _Mapping]] = ...) -> None: ...

class SupportedOperationsV1_2Request(_message.Message):
    __slots__ = ("session", "model")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    session: str
    model: ModelV1_2
    def __init__(self, session: _Optional[str] = ..., model: _Optional[_Union[ModelV1_2, _Mapping]] = ...) -> None: ...

class PrepareModelV1_0Request(_message.Message):
    __slots__ = ("session", "model")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    session: str
    model: ModelV1_0
    def __init__(self, session: _Optional[str] = ..., model: _Optional[_Union[ModelV1_0, _Mapping]] = ...) -> None: ...

class PrepareModelV1_1Request(_message.Message):
    __slots__ = ("session", "model", "preference")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PREFERENCE_FIELD_NUMBER: _ClassVar[int]
    session: str
    model: ModelV1_1
    preference: _types_pb2.ExecutionPreference
    def __init__(self, session: _Optional[str] = ..., model: _Optional[_Union[ModelV1_1, _Mapping]] = ..., preference: _Optional[_Union[_types_pb2.ExecutionPreference, str]] = ...) -> None: ...

class PrepareModelV1_2Request(_message.Message):
    __slots__ = ("session", "model", "preference", "model_cache", "data_cache", "token", "want_cache")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PREFERENCE_FIELD_NUMBER: _ClassVar[int]
    MODEL_CACHE_FIELD_NUMBER: _ClassVar[int]
    DATA_CACHE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    WANT_CACHE_FIELD_NUMBER: _ClassVar[int]
    session: str
    model: ModelV1_2
    preference: _types_pb2.ExecutionPreference
    model_cache: _containers.RepeatedCompositeFieldContainer[_service_pb2.CacheFile]
    data_cache: _containers.RepeatedCompositeFieldContainer[_service_pb2.CacheFile]
    token: bytes
    want_cache: bool
    def __init__(self, session: _Optional[str] = ..., model: _Optional[_Union[ModelV1_2, _Mapping]] = ..., preference: _Optional[_Union[_types_pb2.ExecutionPreference, str]] = ..., model_cache: _Optional[_Iterable[_Union[_service_pb2.CacheFile, _Mapping]]] = ..., data_cache: _Optional[_Iterable[_Union[_service_pb2.CacheFile, _Mapping]]] = ..., token: _Optional[bytes] = ..., want_cache: _Optional[bool] = ...) -> None: ...

class PrepareModelFromCacheV1_2Request(_message.Message):
    __slots__ = ("session", "model_cache", "data_cache", "token")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_CACHE_FIELD_NUMBER: _ClassVar[int]
    DATA_CACHE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    session: str
    model_cache: _containers.RepeatedCompositeFieldContainer[_service_pb2.CacheFile]
    data_cache: _containers.RepeatedCompositeFieldContainer[_service_pb2.CacheFile]
    token: bytes
    def __init__(self, session: _Optional[str] = ..., model_cache: _Optional[_Iterable[_Union[_service_pb2.CacheFile, _Mapping]]] = ..., data_cache: _Optional[_Iterable[_Union[_service_pb2.CacheFile, _Mapping]]] = ..., token: _Optional[bytes] = ...) -> None: ...

class ExecuteV1_0Request(_message.Message):
    __slots__ = ("session", "prepared_model", "request")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepared_model: str
    request: RequestV1_0
    def __init__(self, session: _Optional[str] = ..., prepared_model: _Optional[str] = ..., request: _Optional[_Union[RequestV1_0, _Mapping]] = ...) -> None: ...

class ExecuteV1_2Request(_message.Message):
    __slots__ = ("session", "prepared_model", "request", "measure")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    PREPARED_MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    MEASURE_FIELD_NUMBER: _ClassVar[int]
    session: str
    prepared_model: str
    request: RequestV1_0
    measure: _types_pb2.MeasureTiming
    def __init__(self, session: _Optional[str] = ..., prepared_model: _Optional[str] = ..., request: _Optional[_Union[RequestV1_0, _Mapping]] = ..., measure: _Optional[_Union[_types_pb2.MeasureTiming, str]] = ...) -> None: ...

class ExecuteResultV1_0(_message.Message):
    __slots__ = ("status", "message", "output_pools")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_POOLS_FIELD_NUMBER: _ClassVar[int]
    status: _types_pb2.ErrorStatus
    message: str
    output_pools: _containers.RepeatedCompositeFieldContainer[_service_pb2.PoolData]
    def __init__(self, status: _Optional[_Union[_types_pb2.ErrorStatus, str]] = ..., message: _Optional[str] = ..., output_pools: _Optional[_Iterable[_Union[_service_pb2.PoolData, _Mapping]]] = ...) -> None: ...

class ExecuteV1_0Event(_message.Message):
    __slots__ = ("launch", "notify")
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    NOTIFY_FIELD_NUMBER: _ClassVar[int]
    launch: _service_pb2.StatusMessage
    notify: ExecuteResultV1_0
    def __init__(self, launch: _Optional[_Union[_service_pb2.StatusMessage, _Mapping]] = ..., notify: _Optional[_Union[ExecuteResultV1_0, _Mapping]] = ...) -> None: ...

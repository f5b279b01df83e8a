from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OperandType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FLOAT32: _ClassVar[OperandType]
    INT32: _ClassVar[OperandType]
    UINT32: _ClassVar[OperandType]
    TENSOR_FLOAT32: _ClassVar[OperandType]
    TENSOR_INT32: _ClassVar[OperandType]
    TENSOR_QUANT8_ASYMM: _ClassVar[OperandType]
    BOOL: _ClassVar[OperandType]
    TENSOR_QUANT16_SYMM: _ClassVar[OperandType]
    TENSOR_FLOAT16: _ClassVar[OperandType]
    TENSOR_BOOL8: _ClassVar[OperandType]
    FLOAT16: _ClassVar[OperandType]
    TENSOR_QUANT8_SYMM_PER_CHANNEL: _ClassVar[OperandType]
    TENSOR_QUANT16_ASYMM: _ClassVar[OperandType]
    TENSOR_QUANT8_SYMM: _ClassVar[OperandType]
    TENSOR_QUANT8_ASYMM_SIGNED: _ClassVar[OperandType]
    SUBGRAPH: _ClassVar[OperandType]
    OEM: _ClassVar[OperandType]
    TENSOR_OEM_BYTE: _ClassVar[OperandType]

class OperationType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ADD: _ClassVar[OperationType]
    AVERAGE_POOL_2D: _ClassVar[OperationType]
    CONCATENATION: _ClassVar[OperationType]
    CONV_2D: _ClassVar[OperationType]
    DEPTHWISE_CONV_2D: _ClassVar[OperationType]
    DEPTH_TO_SPACE: _ClassVar[OperationType]
    DEQUANTIZE: _ClassVar[OperationType]
    EMBEDDING_LOOKUP: _ClassVar[OperationType]
    FLOOR: _ClassVar[OperationType]
    FULLY_CONNECTED: _ClassVar[OperationType]
    HASHTABLE_LOOKUP: _ClassVar[OperationType]
    L2_NORMALIZATION: _ClassVar[OperationType]
    L2_POOL_2D: _ClassVar[OperationType]
    LOCAL_RESPONSE_NORMALIZATION: _ClassVar[OperationType]
    LOGISTIC: _ClassVar[OperationType]
    LSH_PROJECTION: _ClassVar[OperationType]
    LSTM: _ClassVar[OperationType]
    MAX_POOL_2D: _ClassVar[OperationType]
    MUL: _ClassVar[OperationType]
    RELU: _ClassVar[OperationType]
    RELU1: _ClassVar[OperationType]
    RELU6: _ClassVar[OperationType]
    RESHAPE: _ClassVar[OperationType]
    RESIZE_BILINEAR: _ClassVar[OperationType]
    RNN: _ClassVar[OperationType]
    SOFTMAX: _ClassVar[OperationType]
    SPACE_TO_DEPTH: _ClassVar[OperationType]
    SVDF: _ClassVar[OperationType]
    TANH: _ClassVar[OperationType]
    BATCH_TO_SPACE_ND: _ClassVar[OperationType]
    DIV: _ClassVar[OperationType]
    MEAN: _ClassVar[OperationType]
    PAD: _ClassVar[OperationType]
    SPACE_TO_BATCH_ND: _ClassVar[OperationType]
    SQUEEZE: _ClassVar[OperationType]
    STRIDED_SLICE: _ClassVar[OperationType]
    SUB: _ClassVar[OperationType]
    TRANSPOSE: _ClassVar[OperationType]
    ABS: _ClassVar[OperationType]
    ARGMAX: _ClassVar[OperationType]
    ARGMIN: _ClassVar[OperationType]
    AXIS_ALIGNED_BBOX_TRANSFORM: _ClassVar[OperationType]
    BIDIRECTIONAL_SEQUENCE_LSTM: _ClassVar[OperationType]
    BIDIRECTIONAL_SEQUENCE_RNN: _ClassVar[OperationType]
    BOX_WITH_NMS_LIMIT: _ClassVar[OperationType]
    CAST: _ClassVar[OperationType]
    CHANNEL_SHUFFLE: _ClassVar[OperationType]
    DETECTION_POSTPROCESSING: _ClassVar[OperationType]
    EQUAL: _ClassVar[OperationType]
    EXP: _ClassVar[OperationType]
    EXPAND_DIMS: _ClassVar[OperationType]
    GATHER: _ClassVar[OperationType]
    GENERATE_PROPOSALS: _ClassVar[OperationType]
    GREATER: _ClassVar[OperationType]
    GREATER_EQUAL: _ClassVar[OperationType]
    GROUPED_CONV_2D: _ClassVar[OperationType]
    HEATMAP_MAX_KEYPOINT: _ClassVar[OperationType]
    INSTANCE_NORMALIZATION: _ClassVar[OperationType]
    LESS: _ClassVar[OperationType]
    LESS_EQUAL: _ClassVar[OperationType]
    LOG: _ClassVar[OperationType]
    LOGICAL_AND: _ClassVar[OperationType]
    LOGICAL_NOT: _ClassVar[OperationType]
    LOGICAL_OR: _ClassVar[OperationType]
    LOG_SOFTMAX: _ClassVar[OperationType]
    MAXIMUM: _ClassVar[OperationType]
    MINIMUM: _ClassVar[OperationType]
    NEG: _ClassVar[OperationType]
    NOT_EQUAL: _ClassVar[OperationType]
    PAD_V2: _ClassVar[OperationType]
    POW: _ClassVar[OperationType]
    PRELU: _ClassVar[OperationType]
    QUANTIZE: _ClassVar[OperationType]
    QUANTIZED_16BIT_LSTM: _ClassVar[OperationType]
    RANDOM_MULTINOMIAL: _ClassVar[OperationType]
    REDUCE_ALL: _ClassVar[OperationType]
    REDUCE_ANY: _ClassVar[OperationType]
    REDUCE_MAX: _ClassVar[OperationType]
    REDUCE_MIN: _ClassVar[OperationType]
    REDUCE_PROD: _ClassVar[OperationType]
    REDUCE_SUM: _ClassVar[OperationType]
    ROI_ALIGN: _ClassVar[OperationType]
    ROI_POOLING: _ClassVar[OperationType]
    RSQRT: _ClassVar[OperationType]
    SELECT: _ClassVar[OperationType]
    SIN: _ClassVar[OperationType]
    SLICE: _ClassVar[OperationType]
    SPLIT: _ClassVar[OperationType]
    SQRT: _ClassVar[OperationType]
    TILE: _ClassVar[OperationType]
    TOPK_V2: _ClassVar[OperationType]
    TRANSPOSE_CONV_2D: _ClassVar[OperationType]
    UNIDIRECTIONAL_SEQUENCE_LSTM: _ClassVar[OperationType]
    UNIDIRECTIONAL_SEQUENCE_RNN: _ClassVar[OperationType]
    RESIZE_NEAREST_NEIGHBOR: _ClassVar[OperationType]
    QUANTIZED_LSTM: _ClassVar[OperationType]
    IF: _ClassVar[OperationType]
    WHILE: _ClassVar[OperationType]
    ELU: _ClassVar[OperationType]
    HARD_SWISH: _ClassVar[OperationType]
    FILL: _ClassVar[OperationType]
    RANK: _ClassVar[OperationType]
    BATCH_MATMUL: _ClassVar[OperationType]
    PACK: _ClassVar[OperationType]
    MIRROR_PAD: _ClassVar[OperationType]
    REVERSE: _ClassVar[OperationType]
    OEM_OPERATION: _ClassVar[OperationType]

class OperandLifeTime(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LIFETIME_TEMPORARY_VARIABLE: _ClassVar[OperandLifeTime]
    LIFETIME_SUBGRAPH_INPUT: _ClassVar[OperandLifeTime]
    LIFETIME_SUBGRAPH_OUTPUT: _ClassVar[OperandLifeTime]
    LIFETIME_CONSTANT_COPY: _ClassVar[OperandLifeTime]
    LIFETIME_CONSTANT_REFERENCE: _ClassVar[OperandLifeTime]
    LIFETIME_NO_VALUE: _ClassVar[OperandLifeTime]
    LIFETIME_SUBGRAPH: _ClassVar[OperandLifeTime]

class ErrorStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NONE: _ClassVar[ErrorStatus]
    DEVICE_UNAVAILABLE: _ClassVar[ErrorStatus]
    GENERAL_FAILURE: _ClassVar[ErrorStatus]
    OUTPUT_INSUFFICIENT_SIZE: _ClassVar[ErrorStatus]
    INVALID_ARGUMENT: _ClassVar[ErrorStatus]
    MISSED_DEADLINE_TRANSIENT: _ClassVar[ErrorStatus]
    MISSED_DEADLINE_PERSISTENT: _ClassVar[ErrorStatus]
    RESOURCE_EXHAUSTED_TRANSIENT: _ClassVar[ErrorStatus]
    RESOURCE_EXHAUSTED_PERSISTENT: _ClassVar[ErrorStatus]

class Priority(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOW: _ClassVar[Priority]
    MEDIUM: _ClassVar[Priority]
    HIGH: _ClassVar[Priority]

class ExecutionPreference(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOW_POWER: _ClassVar[ExecutionPreference]
    FAST_SINGLE_ANSWER: _ClassVar[ExecutionPreference]
    SUSTAINED_SPEED: _ClassVar[ExecutionPreference]

class MeasureTiming(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NO: _ClassVar[MeasureTiming]
    YES: _ClassVar[MeasureTiming]

class DeviceStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AVAILABLE: _ClassVar[DeviceStatus]
    BUSY: _ClassVar[DeviceStatus]
    OFFLINE: _ClassVar[DeviceStatus]
    UNKNOWN: _ClassVar[DeviceStatus]

class DeviceType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEVICE_TYPE_UNSPECIFIED: _ClassVar[DeviceType]
    OTHER: _ClassVar[DeviceType]
    CPU: _ClassVar[DeviceType]
    GPU: _ClassVar[DeviceType]
    ACCELERATOR: _ClassVar[DeviceType]
FLOAT32: OperandType
INT32: OperandType
UINT32: OperandType
TENSOR_FLOAT32: OperandType
TENSOR_INT32: OperandType
TENSOR_QUANT8_ASYMM: OperandType
BOOL: OperandType
TENSOR_QUANT16_SYMM: OperandType
TENSOR_FLOAT16: OperandType
TENSOR_BOOL8: OperandType
FLOAT16: OperandType
TENSOR_QUANT8_SYMM_PER_CHANNEL: OperandType
TENSOR_QUANT16_ASYMM: OperandType
TENSOR_QUANT8_SYMM: OperandType
TENSOR_QUANT8_ASYMM_SIGNED: OperandType
SUBGRAPH: OperandType
OEM: OperandType
TENSOR_OEM_BYTE: OperandType
ADD: OperationType
AVERAGE_POOL_2D: OperationType
CONCATENATION: OperationType
CONV_2D: OperationType
DEPTHWISE_CONV_2D: OperationType
DEPTH_TO_SPACE: OperationType
DEQUANTIZE: OperationType
EMBEDDING_LOOKUP: OperationType
FLOOR: OperationType
FULLY_CONNECTED: OperationType
HASHTABLE_LOOKUP: OperationType
L2_NORMALIZATION: OperationType
L2_POOL_2D: OperationType
LOCAL_RESPONSE_NORMALIZATION: OperationType
LOGISTIC: OperationType
LSH_PROJECTION: OperationType
LSTM: OperationType
MAX_POOL_2D: OperationType
MUL: OperationType
RELU: OperationType
RELU1: OperationType
RELU6: OperationType
RESHAPE: OperationType
RESIZE_BILINEAR: OperationType
RNN: OperationType
SOFTMAX: OperationType
SPACE_TO_DEPTH: OperationType
SVDF: OperationType
TANH: OperationType
BATCH_TO_SPACE_ND: OperationType
DIV: OperationType
MEAN: OperationType
PAD: OperationType
SPACE_TO_BATCH_ND: OperationType
SQUEEZE: OperationType
STRIDED_SLICE: OperationType
SUB: OperationType
TRANSPOSE: OperationType
ABS: OperationType
ARGMAX: OperationType
ARGMIN: OperationType
AXIS_ALIGNED_BBOX_TRANSFORM: OperationType
BIDIRECTIONAL_SEQUENCE_LSTM: OperationType
BIDIRECTIONAL_SEQUENCE_RNN: OperationType
BOX_WITH_NMS_LIMIT: OperationType
CAST: OperationType
CHANNEL_SHUFFLE: OperationType
DETECTION_POSTPROCESSING: OperationType
EQUAL: OperationType
EXP: OperationType
EXPAND_DIMS: OperationType
GATHER: OperationType
GENERATE_PROPOSALS: OperationType
GREATER: OperationType
GREATER_EQUAL: OperationType
GROUPED_CONV_2D: OperationType
HEATMAP_MAX_KEYPOINT: OperationType
INSTANCE_NORMALIZATION: OperationType
LESS: OperationType
LESS_EQUAL: OperationType
LOG: OperationType
LOGICAL_AND: OperationType
LOGICAL_NOT: OperationType
LOGICAL_OR: OperationType
LOG_SOFTMAX: OperationType
MAXIMUM: OperationType
MINIMUM: OperationType
NEG: OperationType
NOT_EQUAL: OperationType
PAD_V2: OperationType
POW: OperationType
PRELU: OperationType
QUANTIZE: OperationType
QUANTIZED_16BIT_LSTM: OperationType
RANDOM_MULTINOMIAL: OperationType
REDUCE_ALL: OperationType
REDUCE_ANY: OperationType
REDUCE_MAX: OperationType
REDUCE_MIN: OperationType
REDUCE_PROD: OperationType
REDUCE_SUM: OperationType
ROI_ALIGN: OperationType
ROI_POOLING: OperationType
RSQRT: OperationType
SELECT: OperationType
SIN: OperationType
SLICE: OperationType
SPLIT: OperationType
SQRT: OperationType
TILE: OperationType
TOPK_V2: OperationType
TRANSPOSE_CONV_2D: OperationType
UNIDIRECTIONAL_SEQUENCE_LSTM: OperationType
UNIDIRECTIONAL_SEQUENCE_RNN: OperationType
RESIZE_NEAREST_NEIGHBOR: OperationType
QUANTIZED_LSTM: OperationType
IF: OperationType
WHILE: OperationType
ELU: OperationType
HARD_SWISH: OperationType
FILL: OperationType
RANK: OperationType
BATCH_MATMUL: OperationType
PACK: OperationType
MIRROR_PAD: OperationType
REVERSE: OperationType
OEM_OPERATION: OperationType
LIFETIME_TEMPORARY_VARIABLE: OperandLifeTime
LIFETIME_SUBGRAPH_INPUT: OperandLifeTime
LIFETIME_SUBGRAPH_OUTPUT: OperandLifeTime
LIFETIME_CONSTANT_COPY: OperandLifeTime
LIFETIME_CONSTANT_REFERENCE: OperandLifeTime
LIFETIME_NO_VALUE: OperandLifeTime
LIFETIME_SUBGRAPH: OperandLifeTime
NONE: ErrorStatus
DEVICE_UNAVAILABLE: ErrorStatus
GENERAL_FAILURE: ErrorStatus
OUTPUT_INSUFFICIENT_SIZE: ErrorStatus
INVALID_ARGUMENT: ErrorStatus
MISSED_DEADLINE_TRANSIENT: ErrorStatus
MISSED_DEADLINE_PERSISTENT: ErrorStatus
RESOURCE_EXHAUSTED_TRANSIENT: ErrorStatus
RESOURCE_EXHAUSTED_PERSISTENT: ErrorStatus
LOW: Priority
MEDIUM: Priority
HIGH: Priority
LOW_POWER: ExecutionPreference
FAST_SINGLE_ANSWER: ExecutionPreference
SUSTAINED_SPEED: ExecutionPreference
NO: MeasureTiming
YES: MeasureTiming
AVAILABLE: DeviceStatus
BUSY: DeviceStatus
OFFLINE: DeviceStatus
UNKNOWN: DeviceStatus
DEVICE_TYPE_UNSPECIFIED: DeviceType
OTHER: DeviceType
CPU: DeviceType
GPU: DeviceType
ACCELERATOR: DeviceType

class DataLocation(_message.Message):
    __slots__ = ("pool_index", "offset", "length")
    POOL_INDEX_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    pool_index: int
    offset: int
    length: int
    def __init__(self, pool_index: _Optional[int] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class SymmPerChannelQuantParams(_message.Message):
    __slots__ = ("scales", "channel_dim")
    SCALES_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_DIM_FIELD_NUMBER: _ClassVar[int]
    scales: _containers.RepeatedScalarFieldContainer[float]
    channel_dim: int
    def __init__(self, scales: _Optional[_Iterable[float]] = ..., channel_dim: _Optional[int] = ...) -> None: ...

class ExtraParams(_message.Message):
    __slots__ = ("channel_quant", "extension")
    CHANNEL_QUANT_FIELD_NUMBER: _ClassVar[int]
    EXTENSION_FIELD_NUMBER: _ClassVar[int]
    channel_quant: SymmPerChannelQuantParams
    extension: bytes
    def __init__(self, channel_quant: _Optional[_Union[SymmPerChannelQuantParams, _Mapping]] = ..., extension: _Optional[bytes] = ...) -> None: ...

class Operand(_message.Message):
    __slots__ = ("type", "dimensions", "number_of_consumers", "scale", "zero_point", "lifetime", "location", "extra_params")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    NUMBER_OF_CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    ZERO_POINT_FIELD_NUMBER: _ClassVar[int]
    LIFETIME_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    EXTRA_PARAMS_FIELD_NUMBER: _ClassVar[int]
    type: int
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    number_of_consumers: int
    scale: float
    zero_point: int
    lifetime: int
    location: DataLocation
    extra_params: ExtraParams
    def __init__(self, type: _Optional[int] = ..., dimensions: _Optional[_Iterable[int]] = ..., number_of_consumers: _Optional[int] = ..., scale: _Optional[float] = ..., zero_point: _Optional[int] = ..., lifetime: _Optional[int] = ..., location: _Optional[_Union[DataLocation, _Mapping]] = ..., extra_params: _Optional[_Union[ExtraParams, _Mapping]] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("type", "inputs", "outputs")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    type: int
    inputs: _containers.RepeatedScalarFieldContainer[int]
    outputs: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, type: _Optional[int] = ..., inputs: _Optional[_Iterable[int]] = ..., outputs: _Optional[_Iterable[int]] = ...) -> None: ...

class Subgraph(_message.Message):
    __slots__ = ("operands", "operations", "input_indexes", "output_indexes")
    OPERANDS_FIELD_NUMBER: _ClassVar[int]
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    INPUT_INDEXES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_INDEXES_FIELD_NUMBER: _ClassVar[int]
    operands: _containers.RepeatedCompositeFieldContainer[Operand]
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    input_indexes: _containers.RepeatedScalarFieldContainer[int]
    output_indexes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, operands: _Optional[_Iterable[_Union[Operand, _Mapping]]] = ..., operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., input_indexes: _Optional[_Iterable[int]] = ..., output_indexes: _Optional[_Iterable[int]] = ...) -> None: ...

class SharedMemory(_message.Message):
    __slots__ = ("kind", "name", "offset", "size")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    offset: int
    size: int
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., offset: _Optional[int] = ..., size: _Optional[int] = ...) -> None: ...

class InlineMemory(_message.Message):
    __slots__ = ("data", "size")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    size: int
    def __init__(self, data: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...

class MemoryPool(_message.Message):
    __slots__ = ("inline", "shared", "token")
    INLINE_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    inline: InlineMemory
    shared: SharedMemory
    token: int
    def __init__(self, inline: _Optional[_Union[InlineMemory, _Mapping]] = ..., shared: _Optional[_Union[SharedMemory, _Mapping]] = ..., token: _Optional[int] = ...) -> None: ...

class ExtensionNameAndPrefix(_message.Message):
    __slots__ = ("name", "prefix")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    name: str
    prefix: int
    def __init__(self, name: _Optional[str] = ..., prefix: _Optional[int] = ...) -> None: ...

class Model(_message.Message):
    __slots__ = ("main", "referenced", "operand_values", "pools", "relax_computation_float32_to_float16", "extension_name_to_prefix")
    MAIN_FIELD_NUMBER: _ClassVar[int]
    REFERENCED_FIELD_NUMBER: _ClassVar[int]
    OPERAND_VALUES_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    RELAX_COMPUTATION_FLOAT32_TO_FLOAT16_FIELD_NUMBER: _ClassVar[int]
    EXTENSION_NAME_TO_PREFIX_FIELD_NUMBER: _ClassVar[int]
    main: Subgraph
    referenced: _containers.RepeatedCompositeFieldContainer[Subgraph]
    operand_values: bytes
    pools: _containers.RepeatedCompositeFieldContainer[MemoryPool]
    relax_computation_float32_to_float16: bool
    extension_name_to_prefix: _containers.RepeatedCompositeFieldContainer[ExtensionNameAndPrefix]
    def __init__(self, main: _Optional[_Union[Subgraph, _Mapping]] = ..., referenced: _Optional[_Iterable[_Union[Subgraph, _Mapping]]] = ..., operand_values: _Optional[bytes] = ..., pools: _Optional[_Iterable[_Union[MemoryPool, _Mapping]]] = ..., relax_computation_float32_to_float16: _Optional[bool] = ..., extension_name_to_prefix: _Optional[_Iterable[_Union[ExtensionNameAndPrefix, _Mapping]]] = ...) -> None: ...

class RequestArgument(_message.Message):
    __slots__ = ("has_no_value", "location", "dimensions")
    HAS_NO_VALUE_FIELD_NUMBER: _ClassVar[int]
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    has_no_value: bool
    location: DataLocation
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, has_no_value: _Optional[bool] = ..., location: _Optional[_Union[DataLocation, _Mapping]] = ..., dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class Request(_message.Message):
    __slots__ = ("inputs", "outputs", "pools")
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    POOLS_FIELD_NUMBER: _ClassVar[int]
    inputs: _containers.RepeatedCompositeFieldContainer[RequestArgument]
    outputs: _containers.RepeatedCompositeFieldContainer[RequestArgument]
    pools: _containers.RepeatedCompositeFieldContainer[MemoryPool]
    def __init__(self, inputs: _Optional[_Iterable[_Union[RequestArgument, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[RequestArgument, _Mapping]]] = ..., pools: _Optional[_Iterable[_Union[MemoryPool, _Mapping]]] = ...) -> None: ...

class OutputShape(_message.Message):
    __slots__ = ("dimensions", "is_sufficient")
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    IS_SUFFICIENT_FIELD_NUMBER: _ClassVar[int]
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    is_sufficient: bool
    def __init__(self, dimensions: _Optional[_Iterable[int]] = ..., is_sufficient: _Optional[bool] = ...) -> None: ...

class Timing(_message.Message):
    __slots__ = ("time_on_device", "time_in_driver")
    TIME_ON_DEVICE_FIELD_NUMBER: _ClassVar[int]
    TIME_IN_DRIVER_FIELD_NUMBER: _ClassVar[int]
    time_on_device: int
    time_in_driver: int
    def __init__(self, time_on_device: _Optional[int] = ..., time_in_driver: _Optional[int] = ...) -> None: ...

class PerformanceInfo(_message.Message):
    __slots__ = ("exec_time", "power_usage")
    EXEC_TIME_FIELD_NUMBER: _ClassVar[int]
    POWER_USAGE_FIELD_NUMBER: _ClassVar[int]
    exec_time: float
    power_usage: float
    def __init__(self, exec_time: _Optional[float] = ..., power_usage: _Optional[float] = ...) -> None: ...

class OperandPerformance(_message.Message):
    __slots__ = ("type", "info")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    type: int
    info: PerformanceInfo
    def __init__(self, type: _Optional[int] = ..., info: _Optional[_Union[PerformanceInfo, _Mapping]] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("relaxed_float32_to_float16_performance_scalar", "relaxed_float32_to_float16_performance_tensor", "operand_performance", "if_performance", "while_performance")
    RELAXED_FLOAT32_TO_FLOAT16_PERFORMANCE_SCALAR_FIELD_NUMBER: _ClassVar[int]
    RELAXED_FLOAT32_TO_FLOAT16_PERFORMANCE_TENSOR_FIELD_NUMBER: _ClassVar[int]
    OPERAND_PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    IF_PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    WHILE_PERFORMANCE_FIELD_NUMBER: _ClassVar[int]
    relaxed_float32_to_float16_performance_scalar: PerformanceInfo
    relaxed_float32_to_float16_performance_tensor: PerformanceInfo
    operand_performance: _containers.RepeatedCompositeFieldContainer[OperandPerformance]
    if_performance: PerformanceInfo
    while_performance: PerformanceInfo
    def __init__(self, relaxed_float32_to_float16_performance_scalar: _Optional[_Union[PerformanceInfo, _Mapping]] = ..., relaxed_float32_to_float16_performance_tensor: _Optional[_Union[PerformanceInfo, _Mapping]] = ..., operand_performance: _Optional[_Iterable[_Union[OperandPerformance, _Mapping]]] = ..., if_performance: _Optional[_Union[PerformanceInfo, _Mapping]] = ..., while_performance: _Optional[_Union[PerformanceInfo, _Mapping]] = ...) -> None: ...

class BufferDesc(_message.Message):
    __slots__ = ("dimensions",)
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    dimensions: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, dimensions: _Optional[_Iterable[int]] = ...) -> None: ...

class BufferRole(_message.Message):
    __slots__ = ("model_index", "io_index", "frequency")
    MODEL_INDEX_FIELD_NUMBER: _ClassVar[int]
    IO_INDEX_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_FIELD_NUMBER: _ClassVar[int]
    model_index: int
    io_index: int
    frequency: float
    def __init__(self, model_index: _Optional[int] = ..., io_index: _Optional[int] = ..., frequency: _Optional[float] = ...) -> None: ...

class ExtensionOperandTypeInformation(_message.Message):
    __slots__ = ("type", "is_tensor", "byte_size")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    IS_TENSOR_FIELD_NUMBER: _ClassVar[int]
    BYTE_SIZE_FIELD_NUMBER: _ClassVar[int]
    type: int
    is_tensor: bool
    byte_size: int
    def __init__(self, type: _Optional[int] = ..., is_tensor: _Optional[bool] = ..., byte_size: _Optional[int] = ...) -> None: ...

class Extension(_message.Message):
    __slots__ = ("name", "operand_types")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPERAND_TYPES_FIELD_NUMBER: _ClassVar[int]
    name: str
    operand_types: _containers.RepeatedCompositeFieldContainer[ExtensionOperandTypeInformation]
    def __init__(self, name: _Optional[str] = ..., operand_types: _Optional[_Iterable[_Union[ExtensionOperandTypeInformation, _Mapping]]] = ...) -> None: ...

class Deadline(_message.Message):
    __slots__ = ("has_deadline", "remaining_ns")
    HAS_DEADLINE_FIELD_NUMBER: _ClassVar[int]
    REMAINING_NS_FIELD_NUMBER: _ClassVar[int]
    has_deadline: bool
    remaining_ns: int
    def __init__(self, has_deadline: _Optional[bool] = ..., remaining_ns: _Optional[int] = ...) -> None: ...

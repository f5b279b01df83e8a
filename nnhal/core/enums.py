"""Canonical NN HAL enumerations, numbered exactly as in ``types.hal`` (1.0-1.3) and
the AIDL ``android.hardware.neuralnetworks`` V1-V4 (feature levels 5-8), which only
added values.

These are the values every layer speaks; the wire module maps them to the
protobuf enums (same numbers) and the versioned module to V1_0..V1_3.
"""

from __future__ import annotations

import enum
from typing import Any

#: Extension type encoding: high 16 bits are the prefix, low 16 bits the type.
EXTENSION_TYPE_LOW_BITS = 16
_MAX_EXTENSION_TYPE = (1 << 2 * EXTENSION_TYPE_LOW_BITS) - 1


def _extension_member(cls: type[enum.IntEnum], value: Any) -> Any:
    """A pseudo-member for an extension type (prefix << 16 | type, prefix >= 1): the HAL's
    OperandType / OperationType fields carry them, so the canonical enums do too. They are
    not listed when iterating the enum and equal (and hash as) their number."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if not (1 << EXTENSION_TYPE_LOW_BITS) <= value <= _MAX_EXTENSION_TYPE:
        return None
    member = int.__new__(cls, value)
    prefix, low = value >> EXTENSION_TYPE_LOW_BITS, value & ((1 << EXTENSION_TYPE_LOW_BITS) - 1)
    member._name_ = f"EXTENSION_{prefix}_{low}"
    member._value_ = value
    return member


def is_extension_type(value: int) -> bool:
    """Whether an OperandType / OperationType number is an extension's (a non-zero prefix)."""
    return value >> EXTENSION_TYPE_LOW_BITS != 0


def extension_prefix(value: int) -> int:
    return value >> EXTENSION_TYPE_LOW_BITS


def extension_type(prefix: int, low: int) -> int:
    """The encoded type: ``prefix << 16 | low`` (the HAL's extension type numbering)."""
    return prefix << EXTENSION_TYPE_LOW_BITS | low


class HalVersion(enum.IntEnum):
    """A HAL feature level; ordering is meaningful (V1_0 < V1_3 < AIDL_V1 < AIDL_V4).

    The HIDL versions are numbered major*10+minor; the AIDL versions by their NNAPI
    feature level (AIDL V1 is feature level 5, … V4 is 8) times 10, so one integer
    orders every level a device can serve and travels in ``SessionEvent.feature_level``.
    """

    V1_0 = 10
    V1_1 = 11
    V1_2 = 12
    V1_3 = 13
    AIDL_V1 = 50
    AIDL_V2 = 60
    AIDL_V3 = 70
    AIDL_V4 = 80

    @property
    def is_aidl(self) -> bool:
        return self.value >= HalVersion.AIDL_V1.value

    @property
    def label(self) -> str:
        if self.is_aidl:
            return f"AIDL V{self.value // 10 - 4} (feature level {self.value // 10})"
        return f"{self.value // 10}.{self.value % 10}"


class OperandType(enum.IntEnum):
    FLOAT32 = 0
    INT32 = 1
    UINT32 = 2
    TENSOR_FLOAT32 = 3
    TENSOR_INT32 = 4
    TENSOR_QUANT8_ASYMM = 5
    BOOL = 6
    TENSOR_QUANT16_SYMM = 7
    TENSOR_FLOAT16 = 8
    TENSOR_BOOL8 = 9
    FLOAT16 = 10
    TENSOR_QUANT8_SYMM_PER_CHANNEL = 11
    TENSOR_QUANT16_ASYMM = 12
    TENSOR_QUANT8_SYMM = 13
    TENSOR_QUANT8_ASYMM_SIGNED = 14
    SUBGRAPH = 15
    OEM = 10000
    TENSOR_OEM_BYTE = 10001

    @classmethod
    def _missing_(cls, value: object) -> Any:
        return _extension_member(cls, value)


class OperationType(enum.IntEnum):
    ADD = 0
    AVERAGE_POOL_2D = 1
    CONCATENATION = 2
    CONV_2D = 3
    DEPTHWISE_CONV_2D = 4
    DEPTH_TO_SPACE = 5
    DEQUANTIZE = 6
    EMBEDDING_LOOKUP = 7
    FLOOR = 8
    FULLY_CONNECTED = 9
    HASHTABLE_LOOKUP = 10
    L2_NORMALIZATION = 11
    L2_POOL_2D = 12
    LOCAL_RESPONSE_NORMALIZATION = 13
    LOGISTIC = 14
    LSH_PROJECTION = 15
    LSTM = 16
    MAX_POOL_2D = 17
    MUL = 18
    RELU = 19
    RELU1 = 20
    RELU6 = 21
    RESHAPE = 22
    RESIZE_BILINEAR = 23
    RNN = 24
    SOFTMAX = 25
    SPACE_TO_DEPTH = 26
    SVDF = 27
    TANH = 28
    BATCH_TO_SPACE_ND = 29
    DIV = 30
    MEAN = 31
    PAD = 32
    SPACE_TO_BATCH_ND = 33
    SQUEEZE = 34
    STRIDED_SLICE = 35
    SUB = 36
    TRANSPOSE = 37
    ABS = 38
    ARGMAX = 39
    ARGMIN = 40
    AXIS_ALIGNED_BBOX_TRANSFORM = 41
    BIDIRECTIONAL_SEQUENCE_LSTM = 42
    BIDIRECTIONAL_SEQUENCE_RNN = 43
    BOX_WITH_NMS_LIMIT = 44
    CAST = 45
    CHANNEL_SHUFFLE = 46
    DETECTION_POSTPROCESSING = 47
    EQUAL = 48
    EXP = 49
    EXPAND_DIMS = 50
    GATHER = 51
    GENERATE_PROPOSALS = 52
    GREATER = 53
    GREATER_EQUAL = 54
    GROUPED_CONV_2D = 55
    HEATMAP_MAX_KEYPOINT = 56
    INSTANCE_NORMALIZATION = 57
    LESS = 58
    LESS_EQUAL = 59
    LOG = 60
    LOGICAL_AND = 61
    LOGICAL_NOT = 62
    LOGICAL_OR = 63
    LOG_SOFTMAX = 64
    MAXIMUM = 65
    MINIMUM = 66
    NEG = 67
    NOT_EQUAL = 68
    PAD_V2 = 69
    POW = 70
    PRELU = 71
    QUANTIZE = 72
    QUANTIZED_16BIT_LSTM = 73
    RANDOM_MULTINOMIAL = 74
    REDUCE_ALL = 75
    REDUCE_ANY = 76
    REDUCE_MAX = 77
    REDUCE_MIN = 78
    REDUCE_PROD = 79
    REDUCE_SUM = 80
    ROI_ALIGN = 81
    ROI_POOLING = 82
    RSQRT = 83
    SELECT = 84
    SIN = 85
    SLICE = 86
    SPLIT = 87
    SQRT = 88
    TILE = 89
    TOPK_V2 = 90
    TRANSPOSE_CONV_2D = 91
    UNIDIRECTIONAL_SEQUENCE_LSTM = 92
    UNIDIRECTIONAL_SEQUENCE_RNN = 93
    RESIZE_NEAREST_NEIGHBOR = 94
    QUANTIZED_LSTM = 95
    IF = 96
    WHILE = 97
    ELU = 98
    HARD_SWISH = 99
    FILL = 100
    RANK = 101
    # AIDL android.hardware.neuralnetworks V2 (NNAPI feature level 6).
    BATCH_MATMUL = 102
    PACK = 103
    # AIDL V3 (feature level 7).
    MIRROR_PAD = 104
    REVERSE = 105
    OEM_OPERATION = 10000

    @classmethod
    def _missing_(cls, value: object) -> Any:
        return _extension_member(cls, value)


#: The last operation type of each level, in order (types.hal sections, AIDL OperationType.aidl).
_LAST_OPERATION_OF: tuple[tuple[int, HalVersion], ...] = (
    (28, HalVersion.V1_0),
    (37, HalVersion.V1_1),
    (94, HalVersion.V1_2),
    (101, HalVersion.V1_3),
    (103, HalVersion.AIDL_V2),
    (105, HalVersion.AIDL_V3),
)

#: The HAL version (feature level) that introduced each operation type. AIDL V1 and
#: V4 added none: V1 re-expressed 1.3 in AIDL, V4 added only methods and fields.
OPERATION_INTRODUCED: dict[OperationType, HalVersion] = {
    op: HalVersion.V1_0
    if op is OperationType.OEM_OPERATION
    else next(level for last, level in _LAST_OPERATION_OF if op.value <= last)
    for op in OperationType
}

#: The HAL version that introduced each operand type (no AIDL level added one).
OPERAND_TYPE_INTRODUCED: dict[OperandType, HalVersion] = {
    t: (HalVersion.V1_0 if t.value <= 5 or t.value >= 10000 else HalVersion.V1_2 if t.value <= 13 else HalVersion.V1_3)
    for t in OperandType
}


class OperandLifeTime(enum.IntEnum):
    TEMPORARY_VARIABLE = 0
    SUBGRAPH_INPUT = 1
    SUBGRAPH_OUTPUT = 2
    CONSTANT_COPY = 3
    CONSTANT_REFERENCE = 4
    NO_VALUE = 5
    SUBGRAPH = 6


class ErrorStatus(enum.IntEnum):
    """HAL 1.3 ErrorStatus plus the canonical DEAD_OBJECT (a binder/transport death)."""

    NONE = 0
    DEVICE_UNAVAILABLE = 1
    GENERAL_FAILURE = 2
    OUTPUT_INSUFFICIENT_SIZE = 3
    INVALID_ARGUMENT = 4
    MISSED_DEADLINE_TRANSIENT = 5
    MISSED_DEADLINE_PERSISTENT = 6
    RESOURCE_EXHAUSTED_TRANSIENT = 7
    RESOURCE_EXHAUSTED_PERSISTENT = 8
    DEAD_OBJECT = 10000


class Priority(enum.IntEnum):
    LOW = 0
    MEDIUM = 1
    HIGH = 2


class ExecutionPreference(enum.IntEnum):
    LOW_POWER = 0
    FAST_SINGLE_ANSWER = 1
    SUSTAINED_SPEED = 2


class MeasureTiming(enum.IntEnum):
    NO = 0
    YES = 1


class DeviceStatus(enum.IntEnum):
    AVAILABLE = 0
    BUSY = 1
    OFFLINE = 2
    UNKNOWN = 3


class DeviceType(enum.IntEnum):
    OTHER = 1
    CPU = 2
    GPU = 3
    ACCELERATOR = 4


class FusedActivationFunc(enum.IntEnum):
    NONE = 0
    RELU = 1
    RELU1 = 2
    RELU6 = 3


#: LoopTimeoutDurationNs of types.hal.
LOOP_TIMEOUT_DEFAULT_NS = 2_000_000_000
LOOP_TIMEOUT_MAXIMUM_NS = 15_000_000_000
#: Constant::BYTE_SIZE_OF_CACHE_TOKEN / MAX_NUMBER_OF_CACHE_FILES of types.hal 1.2.
BYTE_SIZE_OF_CACHE_TOKEN = 32
MAX_NUMBER_OF_CACHE_FILES = 32

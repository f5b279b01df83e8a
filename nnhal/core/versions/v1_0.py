"""NN HAL 1.0 types (``neuralnetworks/1.0/types.hal``) as they differ from canonical.

- OperandType: FLOAT32..TENSOR_QUANT8_ASYMM (0-5) and the OEM types;
  OperationType: ADD..TANH (0-28) and OEM_OPERATION.
- OperandLifeTime says MODEL_INPUT / MODEL_OUTPUT (1.3 renamed them SUBGRAPH_*)
  and has no SUBGRAPH.
- ErrorStatus: NONE..INVALID_ARGUMENT only.
- Capabilities: one PerformanceInfo for float32 and one for quantized8.
- Model: one flat graph (operands, operations, inputIndexes, outputIndexes), no
  referenced subgraphs, no relaxed computation, no extensions; operands carry
  no extra params.
- Request: pools are hidl_memory only (here: inline or shared memory), no tokens.

There is no ExecutionPreference, Priority, DeviceType, MeasureTiming, Timing or
OutputShape in 1.0.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nnhal.core import enums as _c
from nnhal.core.enums import HalVersion
from nnhal.core.types import InlinePool, SharedMemoryPool
from nnhal.core.versions._base import subset_enum

VERSION = HalVersion.V1_0

OperandType = subset_enum("OperandType", _c.OperandType, _c.OPERAND_TYPE_INTRODUCED, VERSION, __name__)
OperationType = subset_enum("OperationType", _c.OperationType, _c.OPERATION_INTRODUCED, VERSION, __name__)


class OperandLifeTime(enum.IntEnum):
    TEMPORARY_VARIABLE = 0
    MODEL_INPUT = 1
    MODEL_OUTPUT = 2
    CONSTANT_COPY = 3
    CONSTANT_REFERENCE = 4
    NO_VALUE = 5


class ErrorStatus(enum.IntEnum):
    NONE = 0
    DEVICE_UNAVAILABLE = 1
    GENERAL_FAILURE = 2
    OUTPUT_INSUFFICIENT_SIZE = 3
    INVALID_ARGUMENT = 4


class DeviceStatus(enum.IntEnum):
    AVAILABLE = 0
    BUSY = 1
    OFFLINE = 2
    UNKNOWN = 3


#: hidl_memory: the pool forms nnhal emulates (inline bytes, named shared memory).
Memory = InlinePool | SharedMemoryPool


@dataclass(frozen=True, slots=True)
class PerformanceInfo:
    exec_time: float
    power_usage: float


@dataclass(frozen=True, slots=True)
class Capabilities:
    float32_performance: PerformanceInfo
    quantized8_performance: PerformanceInfo


@dataclass(frozen=True, slots=True)
class DataLocation:
    pool_index: int = 0
    offset: int = 0
    length: int = 0


@dataclass(frozen=True, slots=True)
class Operand:
    type: enum.IntEnum  # OperandType of this version
    dimensions: tuple[int, ...]
    number_of_consumers: int
    scale: float
    zero_point: int
    lifetime: enum.IntEnum  # OperandLifeTime of this version
    location: DataLocation


@dataclass(frozen=True, slots=True)
class Operation:
    type: enum.IntEnum  # OperationType of this version
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Model:
    operands: tuple[Operand, ...]
    operations: tuple[Operation, ...]
    input_indexes: tuple[int, ...]
    output_indexes: tuple[int, ...]
    operand_values: bytes
    pools: tuple[Memory, ...]


@dataclass(frozen=True, slots=True)
class RequestArgument:
    has_no_value: bool
    location: DataLocation
    dimensions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Request:
    inputs: tuple[RequestArgument, ...]
    outputs: tuple[RequestArgument, ...]
    pools: tuple[Memory, ...]

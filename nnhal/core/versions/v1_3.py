"""NN HAL 1.3 types (``neuralnetworks/1.3/types.hal``) as they differ from 1.2.

- OperandType adds TENSOR_QUANT8_ASYMM_SIGNED and SUBGRAPH (14, 15);
  OperationType adds QUANTIZED_LSTM..RANK (95-101), IF and WHILE among them.
- OperandLifeTime renames MODEL_INPUT/MODEL_OUTPUT to SUBGRAPH_INPUT/SUBGRAPH_OUTPUT
  and adds SUBGRAPH.
- ErrorStatus adds MISSED_DEADLINE_* and RESOURCE_EXHAUSTED_*.
- Model is a main Subgraph plus referenced subgraphs.
- Capabilities adds ifPerformance and whilePerformance.
- Request pools are a union: hidl_memory or a driver-managed buffer token.
- Priority appears (and deadlines, carried by the wire as time remaining).

DeviceStatus, DeviceType, ExecutionPreference, MeasureTiming, Timing and
OutputShape are the older versions'.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nnhal.core import enums as _c
from nnhal.core.enums import HalVersion
from nnhal.core.types import BufferTokenPool, ExtensionNameAndPrefix, InlinePool, SharedMemoryPool
from nnhal.core.versions._base import subset_enum
from nnhal.core.versions.v1_0 import DataLocation, DeviceStatus, Memory, PerformanceInfo, RequestArgument
from nnhal.core.versions.v1_1 import ExecutionPreference
from nnhal.core.versions.v1_2 import (
    DeviceType,
    ExtraParams,
    MeasureTiming,
    OutputShape,
    SymmPerChannelQuantParams,
    Timing,
)

__all__ = [
    "VERSION",
    "BufferTokenPool",
    "Capabilities",
    "DataLocation",
    "DeviceStatus",
    "DeviceType",
    "ErrorStatus",
    "ExecutionPreference",
    "ExtensionNameAndPrefix",
    "ExtraParams",
    "MeasureTiming",
    "Memory",
    "MemoryPool",
    "Model",
    "Operand",
    "OperandLifeTime",
    "OperandPerformance",
    "OperandType",
    "Operation",
    "OperationType",
    "OutputShape",
    "PerformanceInfo",
    "Priority",
    "Request",
    "RequestArgument",
    "Subgraph",
    "SymmPerChannelQuantParams",
    "Timing",
]

VERSION = HalVersion.V1_3

OperandType = subset_enum("OperandType", _c.OperandType, _c.OPERAND_TYPE_INTRODUCED, VERSION, __name__)
OperationType = subset_enum("OperationType", _c.OperationType, _c.OPERATION_INTRODUCED, VERSION, __name__)


class OperandLifeTime(enum.IntEnum):
    TEMPORARY_VARIABLE = 0
    SUBGRAPH_INPUT = 1
    SUBGRAPH_OUTPUT = 2
    CONSTANT_COPY = 3
    CONSTANT_REFERENCE = 4
    NO_VALUE = 5
    SUBGRAPH = 6


class ErrorStatus(enum.IntEnum):
    NONE = 0
    DEVICE_UNAVAILABLE = 1
    GENERAL_FAILURE = 2
    OUTPUT_INSUFFICIENT_SIZE = 3
    INVALID_ARGUMENT = 4
    MISSED_DEADLINE_TRANSIENT = 5
    MISSED_DEADLINE_PERSISTENT = 6
    RESOURCE_EXHAUSTED_TRANSIENT = 7
    RESOURCE_EXHAUSTED_PERSISTENT = 8


class Priority(enum.IntEnum):
    LOW = 0
    MEDIUM = 1
    HIGH = 2


#: Request::MemoryPool safe_union: hidl_memory or a driver-managed buffer token.
MemoryPool = InlinePool | SharedMemoryPool | BufferTokenPool


@dataclass(frozen=True, slots=True)
class Operand:
    type: enum.IntEnum  # OperandType of this version
    dimensions: tuple[int, ...]
    number_of_consumers: int
    scale: float
    zero_point: int
    lifetime: enum.IntEnum  # OperandLifeTime of this version
    location: DataLocation
    extra_params: ExtraParams = None


@dataclass(frozen=True, slots=True)
class Operation:
    type: enum.IntEnum  # OperationType of this version
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Subgraph:
    operands: tuple[Operand, ...]
    operations: tuple[Operation, ...]
    input_indexes: tuple[int, ...]
    output_indexes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Model:
    main: Subgraph
    referenced: tuple[Subgraph, ...]
    operand_values: bytes
    pools: tuple[Memory, ...]
    relax_computation_float32_to_float16: bool
    extension_name_to_prefix: tuple[ExtensionNameAndPrefix, ...] = ()


@dataclass(frozen=True, slots=True)
class OperandPerformance:
    type: enum.IntEnum  # OperandType of this version
    info: PerformanceInfo


@dataclass(frozen=True, slots=True)
class Capabilities:
    relaxed_float32_to_float16_performance_scalar: PerformanceInfo
    relaxed_float32_to_float16_performance_tensor: PerformanceInfo
    operand_performance: tuple[OperandPerformance, ...]
    if_performance: PerformanceInfo
    while_performance: PerformanceInfo


@dataclass(frozen=True, slots=True)
class Request:
    inputs: tuple[RequestArgument, ...]
    outputs: tuple[RequestArgument, ...]
    pools: tuple[MemoryPool, ...]

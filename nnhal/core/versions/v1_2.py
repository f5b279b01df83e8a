"""NN HAL 1.2 types (``neuralnetworks/1.2/types.hal``) as they differ from 1.1.

- OperandType adds BOOL..TENSOR_QUANT8_SYMM (6-13); OperationType adds
  ABS..RESIZE_NEAREST_NEIGHBOR (38-94).
- Operand adds extraParams (per-channel quantization or extension bytes).
- Model adds extensionNameToPrefix.
- Capabilities: relaxed performance for scalars and tensors, and a per-OperandType
  performance table (sorted by type).
- DeviceType, MeasureTiming, Timing and OutputShape appear.

ErrorStatus, OperandLifeTime, Request and ExecutionPreference are 1.0's / 1.1's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nnhal.core import enums as _c
from nnhal.core.enums import HalVersion
from nnhal.core.types import ExtensionNameAndPrefix
from nnhal.core.versions._base import subset_enum
from nnhal.core.versions.v1_0 import (
    DataLocation,
    DeviceStatus,
    ErrorStatus,
    Memory,
    OperandLifeTime,
    PerformanceInfo,
    Request,
    RequestArgument,
)
from nnhal.core.versions.v1_1 import ExecutionPreference

__all__ = [
    "VERSION",
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
    "Model",
    "Operand",
    "OperandLifeTime",
    "OperandPerformance",
    "OperandType",
    "Operation",
    "OperationType",
    "OutputShape",
    "PerformanceInfo",
    "Request",
    "RequestArgument",
    "SymmPerChannelQuantParams",
    "Timing",
]

VERSION = HalVersion.V1_2

OperandType = subset_enum("OperandType", _c.OperandType, _c.OPERAND_TYPE_INTRODUCED, VERSION, __name__)
OperationType = subset_enum("OperationType", _c.OperationType, _c.OPERATION_INTRODUCED, VERSION, __name__)


class DeviceType(enum.IntEnum):
    OTHER = 1
    CPU = 2
    GPU = 3
    ACCELERATOR = 4


class MeasureTiming(enum.IntEnum):
    NO = 0
    YES = 1


@dataclass(frozen=True, slots=True)
class SymmPerChannelQuantParams:
    scales: tuple[float, ...]
    channel_dim: int


#: Operand.ExtraParams safe_union: none, channelQuant or extension bytes.
ExtraParams = SymmPerChannelQuantParams | bytes | None


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
class Model:
    operands: tuple[Operand, ...]
    operations: tuple[Operation, ...]
    input_indexes: tuple[int, ...]
    output_indexes: tuple[int, ...]
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


@dataclass(frozen=True, slots=True)
class OutputShape:
    dimensions: tuple[int, ...]
    is_sufficient: bool


@dataclass(frozen=True, slots=True)
class Timing:
    """Microseconds; UINT64_MAX when not measured."""

    time_on_device: int
    time_in_driver: int

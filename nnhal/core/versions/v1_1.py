"""NN HAL 1.1 types (``neuralnetworks/1.1/types.hal``) as they differ from 1.0.

- OperationType adds BATCH_TO_SPACE_ND..TRANSPOSE (29-37).
- Capabilities adds relaxedFloat32toFloat16Performance.
- Model adds relaxComputationFloat32toFloat16.
- ExecutionPreference appears (prepareModel_1_1).

Operand, Request, ErrorStatus, OperandType and OperandLifeTime are 1.0's.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nnhal.core import enums as _c
from nnhal.core.enums import HalVersion
from nnhal.core.versions._base import subset_enum
from nnhal.core.versions.v1_0 import (
    DataLocation,
    DeviceStatus,
    ErrorStatus,
    Memory,
    Operand,
    OperandLifeTime,
    OperandType,
    PerformanceInfo,
    Request,
    RequestArgument,
)

__all__ = [
    "VERSION",
    "Capabilities",
    "DataLocation",
    "DeviceStatus",
    "ErrorStatus",
    "ExecutionPreference",
    "Memory",
    "Model",
    "Operand",
    "OperandLifeTime",
    "OperandType",
    "Operation",
    "OperationType",
    "PerformanceInfo",
    "Request",
    "RequestArgument",
]

VERSION = HalVersion.V1_1

OperationType = subset_enum("OperationType", _c.OperationType, _c.OPERATION_INTRODUCED, VERSION, __name__)


class ExecutionPreference(enum.IntEnum):
    LOW_POWER = 0
    FAST_SINGLE_ANSWER = 1
    SUSTAINED_SPEED = 2


@dataclass(frozen=True, slots=True)
class Capabilities:
    float32_performance: PerformanceInfo
    quantized8_performance: PerformanceInfo
    relaxed_float32_to_float16_performance: PerformanceInfo


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

"""The tables every versioned conversion reads: the version modules, each version's
enums and their canonical twins, the lossy fallbacks, the version that introduced each
Model / Request feature, and the error a failed conversion raises."""

from __future__ import annotations

import enum
from types import ModuleType

from nnhal.core import enums as c, types as ct
from nnhal.core.enums import HalVersion
from nnhal.core.errors import GeneralFailure
from nnhal.core.versions import v1_0, v1_1, v1_2, v1_3

V = HalVersion


class ConversionError(GeneralFailure):
    """A value has no representation in the target version, or is invalid.

    Status GENERAL_FAILURE: the AOSP utils report conversion failures with
    ``NN_ERROR()``, whose default code is GENERAL_FAILURE."""


MODULES: dict[HalVersion, ModuleType] = {V.V1_0: v1_0, V.V1_1: v1_1, V.V1_2: v1_2, V.V1_3: v1_3}

#: Canonical enum -> the version's enum, per version. A missing entry: the version has no such type.
ENUMS: dict[HalVersion, dict[type[enum.IntEnum], type[enum.IntEnum]]] = {
    V.V1_0: {
        c.OperandType: v1_0.OperandType,
        c.OperationType: v1_0.OperationType,
        c.OperandLifeTime: v1_0.OperandLifeTime,
        c.ErrorStatus: v1_0.ErrorStatus,
        c.DeviceStatus: v1_0.DeviceStatus,
    },
    V.V1_1: {
        c.OperandType: v1_1.OperandType,
        c.OperationType: v1_1.OperationType,
        c.OperandLifeTime: v1_1.OperandLifeTime,
        c.ErrorStatus: v1_1.ErrorStatus,
        c.DeviceStatus: v1_1.DeviceStatus,
        c.ExecutionPreference: v1_1.ExecutionPreference,
    },
    V.V1_2: {
        c.OperandType: v1_2.OperandType,
        c.OperationType: v1_2.OperationType,
        c.OperandLifeTime: v1_2.OperandLifeTime,
        c.ErrorStatus: v1_2.ErrorStatus,
        c.DeviceStatus: v1_2.DeviceStatus,
        c.ExecutionPreference: v1_2.ExecutionPreference,
        c.DeviceType: v1_2.DeviceType,
        c.MeasureTiming: v1_2.MeasureTiming,
    },
    V.V1_3: {
        c.OperandType: v1_3.OperandType,
        c.OperationType: v1_3.OperationType,
        c.OperandLifeTime: v1_3.OperandLifeTime,
        c.ErrorStatus: v1_3.ErrorStatus,
        c.DeviceStatus: v1_3.DeviceStatus,
        c.ExecutionPreference: v1_3.ExecutionPreference,
        c.DeviceType: v1_3.DeviceType,
        c.MeasureTiming: v1_3.MeasureTiming,
        c.Priority: v1_3.Priority,
    },
}

#: Versioned enum -> canonical enum (the inverse of ENUMS; several versions share classes).
CANONICAL_ENUM: dict[type[enum.IntEnum], type[enum.IntEnum]] = {
    versioned: canonical for table in ENUMS.values() for canonical, versioned in table.items()
}

#: Canonical enums whose values a version lacks still convert, to this member's name
#: (ErrorStatus: what the utils' ``default: return GENERAL_FAILURE`` does).
LOSSY_FALLBACK: dict[type[enum.IntEnum], str] = {c.ErrorStatus: "GENERAL_FAILURE"}

#: Model and Request features, and the version that introduced each.
_SINCE: dict[str, tuple[HalVersion, str]] = {
    "relax": (V.V1_1, "relaxComputationFloat32toFloat16"),
    "extra_params": (V.V1_2, "operand extraParams (per-channel quantization, extension params)"),
    "extensions": (V.V1_2, "extensionNameToPrefix"),
    "referenced": (V.V1_3, "referenced subgraphs"),
    "token_pools": (V.V1_3, "driver-managed buffer (token) pools"),
}

#: FLT_MAX: the canonical "no performance information" (the utils' kNoPerformanceInfo).
_FLT_MAX = 3.4028234663852886e38
NO_PERFORMANCE = ct.PerformanceInfo(_FLT_MAX, _FLT_MAX)


def need(feature: str, used: bool, to: HalVersion) -> None:
    since, what = _SINCE[feature]
    if used and to < since:
        raise ConversionError(f"{what} need NN HAL {since.label}; NN HAL {to.label} cannot represent them")

"""Canonical <-> versioned (V1_0..V1_3) conversions, following the AOSP NN HAL utils
(``shared/seeds/002``): ``convert`` to an older version fails when a value has no
representation there; error codes convert lossily; versioned -> canonical ->
versioned is lossless.

Dispatch is by tables: enum class -> versioned enum class per version, value type
-> converter function. Field differences between versions are a table of the
version that introduced each feature (``_SINCE``).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from nnhal.core import enums as c
from nnhal.core import types as ct
from nnhal.core.enums import HalVersion
from nnhal.core.errors import GeneralFailure, HalError
from nnhal.core.validation import OperationValidator, validate_model
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


def _need(feature: str, used: bool, to: HalVersion) -> None:
    since, what = _SINCE[feature]
    if used and to < since:
        raise ConversionError(f"{what} need NN HAL {since.label}; NN HAL {to.label} cannot represent them")


# ---------------------------------------------------------------- canonical -> versioned


def _enum_to(value: enum.IntEnum, to: HalVersion) -> enum.IntEnum:
    cls = ENUMS[to].get(type(value))
    if cls is None:
        raise ConversionError(f"NN HAL {to.label} has no {type(value).__name__}")
    try:
        return cls(int(value))
    except ValueError:
        fallback = LOSSY_FALLBACK.get(type(value))
        if fallback is not None:
            return cls[fallback]
        raise ConversionError(
            f"{type(value).__name__}.{value.name} has no representation in NN HAL {to.label}"
        ) from None


def _perf_to(p: ct.PerformanceInfo, to: HalVersion) -> v1_0.PerformanceInfo:
    return v1_0.PerformanceInfo(p.exec_time, p.power_usage)


def _lookup(caps: ct.Capabilities, t: c.OperandType) -> ct.PerformanceInfo:
    return next((op.info for op in caps.operand_performance if op.type == t), NO_PERFORMANCE)


def _capabilities_to(caps: ct.Capabilities, to: HalVersion) -> Any:
    m = MODULES[to]
    f32 = _perf_to(_lookup(caps, c.OperandType.TENSOR_FLOAT32), to)
    q8 = _perf_to(_lookup(caps, c.OperandType.TENSOR_QUANT8_ASYMM), to)
    scalar = _perf_to(caps.relaxed_float32_to_float16_performance_scalar, to)
    tensor = _perf_to(caps.relaxed_float32_to_float16_performance_tensor, to)
    if to == V.V1_0:
        return m.Capabilities(f32, q8)
    if to == V.V1_1:
        return m.Capabilities(f32, q8, tensor)
    # 1.2+: the table keeps only the operand types the version has (as the utils filter).
    table = tuple(
        m.OperandPerformance(ENUMS[to][c.OperandType](int(op.type)), _perf_to(op.info, to))
        for op in sorted(caps.operand_performance, key=lambda op: int(op.type))
        if int(op.type) in set(ENUMS[to][c.OperandType])
    )
    if to == V.V1_2:
        return m.Capabilities(scalar, tensor, table)
    return m.Capabilities(
        scalar, tensor, table, _perf_to(caps.if_performance, to), _perf_to(caps.while_performance, to)
    )


def _location_to(loc: ct.DataLocation, to: HalVersion) -> v1_0.DataLocation:
    return v1_0.DataLocation(loc.pool_index, loc.offset, loc.length)


def _operand_to(op: ct.Operand, to: HalVersion) -> Any:
    m = MODULES[to]
    has_extra = op.channel_quant is not None or op.extension_params is not None
    _need("extra_params", has_extra, to)
    if op.channel_quant is not None and op.extension_params is not None:
        raise ConversionError("an operand carries both channel quantization and extension params")
    fields: dict[str, Any] = {
        "type": _enum_to(op.type, to),
        "dimensions": tuple(op.dimensions),
        "number_of_consumers": op.number_of_consumers,
        "scale": op.scale,
        "zero_point": op.zero_point,
        "lifetime": _enum_to(op.lifetime, to),
        "location": _location_to(op.location, to),
    }
    if to >= V.V1_2:
        cq = op.channel_quant
        fields["extra_params"] = (
            v1_2.SymmPerChannelQuantParams(tuple(cq.scales), cq.channel_dim) if cq is not None else op.extension_params
        )
    return m.Operand(**fields)


def _operation_to(op: ct.Operation, to: HalVersion) -> Any:
    return MODULES[to].Operation(_enum_to(op.type, to), tuple(op.inputs), tuple(op.outputs))


def _memory_to(pool: ct.MemoryPool, to: HalVersion, where: str) -> Any:
    if isinstance(pool, ct.BufferTokenPool):
        if where == "Model":
            raise ConversionError("a Model pool cannot be a driver-managed buffer token (in any version)")
        _need("token_pools", True, to)
    return pool


def _subgraph_parts(sg: ct.Subgraph, to: HalVersion) -> dict[str, Any]:
    return {
        "operands": tuple(_operand_to(o, to) for o in sg.operands),
        "operations": tuple(_operation_to(o, to) for o in sg.operations),
        "input_indexes": tuple(sg.input_indexes),
        "output_indexes": tuple(sg.output_indexes),
    }


def _model_to(model: ct.Model, to: HalVersion) -> Any:
    m = MODULES[to]
    _need("referenced", bool(model.referenced), to)
    _need("relax", model.relax_computation_float32_to_float16, to)
    _need("extensions", bool(model.extension_name_to_prefix), to)
    pools = tuple(_memory_to(p, to, "Model") for p in model.pools)
    if to == V.V1_3:
        return m.Model(
            main=m.Subgraph(**_subgraph_parts(model.main, to)),
            referenced=tuple(m.Subgraph(**_subgraph_parts(sg, to)) for sg in model.referenced),
            operand_values=model.operand_values,
            pools=pools,
            relax_computation_float32_to_float16=model.relax_computation_float32_to_float16,
            extension_name_to_prefix=tuple(model.extension_name_to_prefix),
        )
    fields = _subgraph_parts(model.main, to) | {"operand_values": model.operand_values, "pools": pools}
    if to >= V.V1_1:
        fields["relax_computation_float32_to_float16"] = model.relax_computation_float32_to_float16
    if to >= V.V1_2:
        fields["extension_name_to_prefix"] = tuple(model.extension_name_to_prefix)
    return m.Model(**fields)


def _argument_to(arg: ct.RequestArgument, to: HalVersion) -> v1_0.RequestArgument:
    return v1_0.RequestArgument(arg.has_no_value, _location_to(arg.location, to), tuple(arg.dimensions))


def _request_to(req: ct.Request, to: HalVersion) -> Any:
    m = MODULES[to]
    return m.Request(
        tuple(_argument_to(a, to) for a in req.inputs),
        tuple(_argument_to(a, to) for a in req.outputs),
        tuple(_memory_to(p, to, "Request") for p in req.pools),
    )


def _since_1_2(fn: Callable[[Any, HalVersion], Any], what: str) -> Callable[[Any, HalVersion], Any]:
    def convert(value: Any, to: HalVersion) -> Any:
        if to < V.V1_2:
            raise ConversionError(f"NN HAL {to.label} has no {what}")
        return fn(value, to)

    return convert


_TO_VERSIONED: dict[type, Callable[[Any, HalVersion], Any]] = {
    ct.PerformanceInfo: _perf_to,
    ct.Capabilities: _capabilities_to,
    ct.DataLocation: _location_to,
    ct.Operand: _operand_to,
    ct.Operation: _operation_to,
    ct.Model: _model_to,
    ct.RequestArgument: _argument_to,
    ct.Request: _request_to,
    ct.InlinePool: lambda p, to: _memory_to(p, to, "Request"),
    ct.SharedMemoryPool: lambda p, to: _memory_to(p, to, "Request"),
    ct.BufferTokenPool: lambda p, to: _memory_to(p, to, "Request"),
    ct.OutputShape: _since_1_2(lambda s, to: v1_2.OutputShape(tuple(s.dimensions), s.is_sufficient), "OutputShape"),
    ct.Timing: _since_1_2(lambda t, to: v1_2.Timing(t.time_on_device, t.time_in_driver), "Timing"),
}


# ---------------------------------------------------------------- versioned -> canonical


def _expect(value: Any, cls: Any, where: str) -> None:
    if not isinstance(value, cls):
        raise ConversionError(f"{where}: expected {getattr(cls, '__qualname__', cls)}, got {type(value).__qualname__}")


def _enum_from(value: enum.IntEnum) -> enum.IntEnum:
    cls = CANONICAL_ENUM.get(type(value))
    if cls is None:
        raise ConversionError(f"{type(value).__qualname__} is not a versioned NN HAL enum")
    return cls(int(value))


def _perf_from(p: v1_0.PerformanceInfo) -> ct.PerformanceInfo:
    return ct.PerformanceInfo(p.exec_time, p.power_usage)


def _p_table(f32: ct.PerformanceInfo, q8: ct.PerformanceInfo) -> tuple[ct.OperandPerformance, ...]:
    """The utils' makeQuantized8PerformanceConsistentWithP: 1.0/1.1 capabilities as a table."""
    per_type = {
        c.OperandType.FLOAT32: f32,
        c.OperandType.INT32: q8,
        c.OperandType.UINT32: q8,
        c.OperandType.TENSOR_FLOAT32: f32,
        c.OperandType.TENSOR_INT32: q8,
        c.OperandType.TENSOR_QUANT8_ASYMM: q8,
        c.OperandType.OEM: q8,
        c.OperandType.TENSOR_OEM_BYTE: q8,
    }
    return tuple(ct.OperandPerformance(t, info) for t, info in per_type.items())


def _caps_1_0_from(caps: v1_0.Capabilities) -> ct.Capabilities:
    f32 = _perf_from(caps.float32_performance)
    return ct.Capabilities(
        f32, f32, _p_table(f32, _perf_from(caps.quantized8_performance)), NO_PERFORMANCE, NO_PERFORMANCE
    )


def _caps_1_1_from(caps: v1_1.Capabilities) -> ct.Capabilities:
    relaxed = _perf_from(caps.relaxed_float32_to_float16_performance)
    table = _p_table(_perf_from(caps.float32_performance), _perf_from(caps.quantized8_performance))
    return ct.Capabilities(relaxed, relaxed, table, NO_PERFORMANCE, NO_PERFORMANCE)


def _table_from(table: Sequence[Any], version: HalVersion) -> tuple[ct.OperandPerformance, ...]:
    for k, op in enumerate(table):
        _expect(op.type, ENUMS[version][c.OperandType], f"operandPerformance[{k}].type")
    types = [int(op.type) for op in table]
    if types != sorted(set(types)):
        raise ConversionError("Capabilities.operandPerformance must be sorted by type without duplicates")
    return tuple(ct.OperandPerformance(c.OperandType(int(op.type)), _perf_from(op.info)) for op in table)


def _caps_1_2_from(caps: v1_2.Capabilities) -> ct.Capabilities:
    return ct.Capabilities(
        _perf_from(caps.relaxed_float32_to_float16_performance_scalar),
        _perf_from(caps.relaxed_float32_to_float16_performance_tensor),
        _table_from(caps.operand_performance, V.V1_2),
        NO_PERFORMANCE,
        NO_PERFORMANCE,
    )


def _caps_1_3_from(caps: v1_3.Capabilities) -> ct.Capabilities:
    return ct.Capabilities(
        _perf_from(caps.relaxed_float32_to_float16_performance_scalar),
        _perf_from(caps.relaxed_float32_to_float16_performance_tensor),
        _table_from(caps.operand_performance, V.V1_3),
        _perf_from(caps.if_performance),
        _perf_from(caps.while_performance),
    )


def _location_from(loc: v1_0.DataLocation) -> ct.DataLocation:
    return ct.DataLocation(loc.pool_index, loc.offset, loc.length)


def _operand_from(op: Any, version: HalVersion, where: str) -> ct.Operand:
    _expect(op.type, ENUMS[version][c.OperandType], f"{where} type")
    _expect(op.lifetime, ENUMS[version][c.OperandLifeTime], f"{where} lifetime")
    extra = getattr(op, "extra_params", None)
    cq = None
    if isinstance(extra, v1_2.SymmPerChannelQuantParams):
        cq = ct.SymmPerChannelQuantParams(tuple(extra.scales), extra.channel_dim)
    elif extra is not None and not isinstance(extra, bytes):
        raise ConversionError(f"{where} extraParams: expected channel quantization or bytes, got {type(extra)}")
    return ct.Operand(
        type=c.OperandType(int(op.type)),
        dimensions=tuple(op.dimensions),
        number_of_consumers=op.number_of_consumers,
        scale=op.scale,
        zero_point=op.zero_point,
        lifetime=c.OperandLifeTime(int(op.lifetime)),
        location=_location_from(op.location),
        channel_quant=cq,
        extension_params=extra if isinstance(extra, bytes) else None,
    )


def _operation_from(op: Any, version: HalVersion, where: str) -> ct.Operation:
    _expect(op.type, ENUMS[version][c.OperationType], f"{where} type")
    return ct.Operation(c.OperationType(int(op.type)), tuple(op.inputs), tuple(op.outputs))


def _subgraph_from(sg: Any, version: HalVersion, where: str) -> ct.Subgraph:
    return ct.Subgraph(
        tuple(_operand_from(o, version, f"{where} operand {i}") for i, o in enumerate(sg.operands)),
        tuple(_operation_from(o, version, f"{where} operation {i}") for i, o in enumerate(sg.operations)),
        tuple(sg.input_indexes),
        tuple(sg.output_indexes),
    )


def _pools_from(pools: Sequence[Any], allowed: Any, where: str) -> tuple[ct.MemoryPool, ...]:
    for k, p in enumerate(pools):
        _expect(p, allowed, f"{where} pool {k}")
    return tuple(pools)


def _model_from(model: Any, version: HalVersion) -> ct.Model:
    if version == V.V1_3:
        main = _subgraph_from(model.main, version, "main")
        referenced = tuple(_subgraph_from(sg, version, f"referenced[{i}]") for i, sg in enumerate(model.referenced))
    else:
        main = _subgraph_from(model, version, "main")
        referenced = ()
    return ct.Model(
        main=main,
        referenced=referenced,
        operand_values=bytes(model.operand_values),
        pools=_pools_from(model.pools, (ct.InlinePool, ct.SharedMemoryPool), "Model"),
        relax_computation_float32_to_float16=getattr(model, "relax_computation_float32_to_float16", False),
        extension_name_to_prefix=tuple(getattr(model, "extension_name_to_prefix", ())),
    )


def _argument_from(arg: v1_0.RequestArgument) -> ct.RequestArgument:
    return ct.RequestArgument(arg.has_no_value, _location_from(arg.location), tuple(arg.dimensions))


def _request_from(req: Any, allowed: Any) -> ct.Request:
    return ct.Request(
        tuple(_argument_from(a) for a in req.inputs),
        tuple(_argument_from(a) for a in req.outputs),
        _pools_from(req.pools, allowed, "Request"),
    )


_MEMORY = (ct.InlinePool, ct.SharedMemoryPool)
_MEMORY_OR_TOKEN = (ct.InlinePool, ct.SharedMemoryPool, ct.BufferTokenPool)

_TO_CANONICAL: dict[type, Callable[[Any], Any]] = {
    v1_0.PerformanceInfo: _perf_from,
    v1_0.Capabilities: _caps_1_0_from,
    v1_1.Capabilities: _caps_1_1_from,
    v1_2.Capabilities: _caps_1_2_from,
    v1_3.Capabilities: _caps_1_3_from,
    v1_0.DataLocation: _location_from,
    v1_0.Operand: lambda op: _operand_from(op, V.V1_0, "operand"),
    v1_2.Operand: lambda op: _operand_from(op, V.V1_2, "operand"),
    v1_3.Operand: lambda op: _operand_from(op, V.V1_3, "operand"),
    v1_0.Operation: lambda op: _operation_from(op, V.V1_0, "operation"),
    v1_1.Operation: lambda op: _operation_from(op, V.V1_1, "operation"),
    v1_2.Operation: lambda op: _operation_from(op, V.V1_2, "operation"),
    v1_3.Operation: lambda op: _operation_from(op, V.V1_3, "operation"),
    v1_3.Subgraph: lambda sg: _subgraph_from(sg, V.V1_3, "subgraph"),
    v1_0.Model: lambda m: _model_from(m, V.V1_0),
    v1_1.Model: lambda m: _model_from(m, V.V1_1),
    v1_2.Model: lambda m: _model_from(m, V.V1_2),
    v1_3.Model: lambda m: _model_from(m, V.V1_3),
    v1_0.RequestArgument: _argument_from,
    v1_0.Request: lambda r: _request_from(r, _MEMORY),
    v1_3.Request: lambda r: _request_from(r, _MEMORY_OR_TOKEN),
    v1_2.OutputShape: lambda s: ct.OutputShape(tuple(s.dimensions), s.is_sufficient),
    v1_2.Timing: lambda t: ct.Timing(t.time_on_device, t.time_in_driver),
}


# ---------------------------------------------------------------- validation


def _pool_sizes(model: ct.Model) -> list[int | None]:
    return [p.size if isinstance(p, (ct.InlinePool, ct.SharedMemoryPool)) else None for p in model.pools]


def validate(value: Any, operation_validator: OperationValidator | None = None) -> HalVersion:
    """Validate a canonical value (models structurally, with the optional per-operation
    validator); returns the minimum version its content needs. Raises ConversionError."""
    if not isinstance(value, ct.Model):
        return V.V1_0
    try:
        return validate_model(value, _pool_sizes(value), operation_validator)
    except HalError as err:
        raise ConversionError(f"invalid Model: {err.message}") from err


# ---------------------------------------------------------------- public entry points


def version_of(to: HalVersion | ModuleType) -> HalVersion:
    """``HalVersion`` of ``to`` (a HalVersion or one of the V1_x modules)."""
    if isinstance(to, HalVersion):
        return to
    version = getattr(to, "VERSION", None)
    if not isinstance(version, HalVersion):
        raise TypeError(f"{to!r} is not an NN HAL version")
    return version


def unvalidated_convert(value: Any, to: HalVersion | ModuleType) -> Any:
    """Canonical -> version ``to`` without validating the value first.

    Still raises ConversionError when a field has no representation in ``to``."""
    version = version_of(to)
    if isinstance(value, enum.IntEnum):
        return _enum_to(value, version)
    if isinstance(value, (tuple, list)):
        return tuple(unvalidated_convert(v, version) for v in value)
    fn = _TO_VERSIONED.get(type(value))
    if fn is None:
        raise ConversionError(f"{type(value).__qualname__} is not a canonical NN HAL type")
    return fn(value, version)


def convert(value: Any, to: HalVersion | ModuleType, *, operation_validator: OperationValidator | None = None) -> Any:
    """Canonical ``value`` -> the same value in version ``to`` (``V1_0`` .. ``V1_3``).

    Validates first (models: structure, plus ``operation_validator`` when given, whose
    minimum versions must not exceed ``to``). Raises ConversionError (GENERAL_FAILURE)
    when the value is invalid or has no representation in ``to``. ErrorStatus converts
    lossily (codes a version lacks become GENERAL_FAILURE)."""
    version = version_of(to)
    needed = validate(value, operation_validator)
    result = unvalidated_convert(value, version)  # names the field without a representation, if any
    if needed > version:
        raise ConversionError(f"the value needs NN HAL {needed.label}; cannot convert to NN HAL {version.label}")
    return result


def to_canonical(value: Any, *, validate_result: bool = True) -> Any:
    """Versioned ``value`` (any V1_x type) -> canonical. Lossless: converting the result
    back to the value's version gives ``value``. Raises ConversionError when the value
    is invalid (e.g. a 1.3 enum inside a V1_0 Model, a token pool in a V1_0 Request)."""
    if isinstance(value, enum.IntEnum):
        return _enum_from(value)
    if isinstance(value, (tuple, list)):
        return tuple(to_canonical(v, validate_result=validate_result) for v in value)
    fn = _TO_CANONICAL.get(type(value))
    if fn is None:
        raise ConversionError(f"{type(value).__qualname__} is not a versioned NN HAL type")
    result = fn(value)
    if validate_result:
        validate(result)
    return result


def min_version(value: Any, operation_validator: OperationValidator | None = None) -> HalVersion:
    """The oldest version that can represent canonical ``value``; ConversionError if none."""
    needed = validate(value, operation_validator)
    errors: list[str] = []
    for version in V:
        if version < needed:
            continue
        try:
            unvalidated_convert(value, version)
        except ConversionError as err:
            errors.append(err.message)
            continue
        return version
    raise ConversionError(errors[-1] if errors else "no NN HAL version can represent the value")

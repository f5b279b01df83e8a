"""Canonical -> versioned (V1_0..V1_3): each converter builds the target version's value
or raises ConversionError naming what the version cannot represent (a newer enum
value, referenced subgraphs before 1.3, a token pool before 1.3...). ErrorStatus is
the one lossy enum (LOSSY_FALLBACK). ``TO_VERSIONED`` dispatches by canonical type."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from nnhal.core import enums as c, types as ct
from nnhal.core.enums import HalVersion
from nnhal.core.versions import v1_0, v1_2
from nnhal.core.versions._tables import ENUMS, LOSSY_FALLBACK, MODULES, NO_PERFORMANCE, ConversionError, V, need


def enum_to(value: enum.IntEnum, to: HalVersion) -> enum.IntEnum:
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
    need("extra_params", has_extra, to)
    if op.channel_quant is not None and op.extension_params is not None:
        raise ConversionError("an operand carries both channel quantization and extension params")
    fields: dict[str, Any] = {
        "type": enum_to(op.type, to),
        "dimensions": tuple(op.dimensions),
        "number_of_consumers": op.number_of_consumers,
        "scale": op.scale,
        "zero_point": op.zero_point,
        "lifetime": enum_to(op.lifetime, to),
        "location": _location_to(op.location, to),
    }
    if to >= V.V1_2:
        cq = op.channel_quant
        fields["extra_params"] = (
            v1_2.SymmPerChannelQuantParams(tuple(cq.scales), cq.channel_dim) if cq is not None else op.extension_params
        )
    return m.Operand(**fields)


def _operation_to(op: ct.Operation, to: HalVersion) -> Any:
    return MODULES[to].Operation(enum_to(op.type, to), tuple(op.inputs), tuple(op.outputs))


def _memory_to(pool: ct.MemoryPool, to: HalVersion, where: str) -> Any:
    if isinstance(pool, ct.BufferTokenPool):
        if where == "Model":
            raise ConversionError("a Model pool cannot be a driver-managed buffer token (in any version)")
        need("token_pools", True, to)
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
    need("referenced", bool(model.referenced), to)
    need("relax", model.relax_computation_float32_to_float16, to)
    need("extensions", bool(model.extension_name_to_prefix), to)
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


TO_VERSIONED: dict[type, Callable[[Any, HalVersion], Any]] = {
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

"""Versioned (V1_0..V1_3) -> canonical: lossless, and strict about what a version's
value may hold (a 1.3 enum inside a V1_0 Model, a token pool in a V1_0 Request are
ConversionError). ``TO_CANONICAL`` dispatches by versioned type."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

from nnhal.core import enums as c, types as ct
from nnhal.core.enums import HalVersion
from nnhal.core.versions import v1_0, v1_1, v1_2, v1_3
from nnhal.core.versions._tables import CANONICAL_ENUM, ENUMS, NO_PERFORMANCE, ConversionError, V


def _expect(value: Any, cls: Any, where: str) -> None:
    if not isinstance(value, cls):
        raise ConversionError(f"{where}: expected {getattr(cls, '__qualname__', cls)}, got {type(value).__qualname__}")


def enum_from(value: enum.IntEnum) -> enum.IntEnum:
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


def _caps_table_from(caps: v1_2.Capabilities | v1_3.Capabilities, version: HalVersion) -> ct.Capabilities:
    """1.2 and 1.3 capabilities: a per-type table; IF / WHILE performance since 1.3."""
    if_while = (
        (_perf_from(caps.if_performance), _perf_from(caps.while_performance))
        if isinstance(caps, v1_3.Capabilities)
        else (NO_PERFORMANCE, NO_PERFORMANCE)
    )
    return ct.Capabilities(
        _perf_from(caps.relaxed_float32_to_float16_performance_scalar),
        _perf_from(caps.relaxed_float32_to_float16_performance_tensor),
        _table_from(caps.operand_performance, version),
        *if_while,
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

TO_CANONICAL: dict[type, Callable[[Any], Any]] = {
    v1_0.PerformanceInfo: _perf_from,
    v1_0.Capabilities: _caps_1_0_from,
    v1_1.Capabilities: _caps_1_1_from,
    v1_2.Capabilities: lambda caps: _caps_table_from(caps, V.V1_2),
    v1_3.Capabilities: lambda caps: _caps_table_from(caps, V.V1_3),
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

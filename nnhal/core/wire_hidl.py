"""Protobuf (``hidl.proto``) <-> the versioned NN HAL 1.0-1.2 types of ``nnhal.core.versions``.

The HIDL 1.0-1.2 method forms carry their own version's types on the wire. These
functions move them between the messages and the versioned dataclasses (``V1_0.Model``,
``V1_1.Capabilities`` ...); ``nnhal.core.versions`` then converts those to and from
canonical. ``*_from`` raise InvalidArgument naming the field when a wire value has no
meaning in the version (an operand type 1.0 lacks, a pool with no content); the
versioned values they return hold the version's own enum members, so
``versions.to_canonical`` accepts them. Stateless; safe from any thread.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import Any

from nnhal.core import enums as c, wire_model, wire_pool
from nnhal.core.enums import ErrorStatus, HalVersion
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import ExtensionNameAndPrefix, InlinePool, SharedMemoryPool
from nnhal.core.versions import ENUMS, V1_0, V1_1, V1_2, unvalidated_convert
from nnhal.proto import hidl_pb2 as hpb, types_pb2 as pb

V = HalVersion
HidlModel = hpb.ModelV1_0 | hpb.ModelV1_1 | hpb.ModelV1_2


def _member(version: HalVersion, canonical: type[enum.IntEnum], value: int, what: str) -> enum.IntEnum:
    cls = ENUMS[version][canonical]
    try:
        return cls(value)
    except ValueError:
        raise InvalidArgument(f"{what}: {value} is not an NN HAL {version.label} {canonical.__name__}") from None


# -- memory ---------------------------------------------------------------------------
def memory_to(pool: Any, msg: hpb.HidlMemory) -> None:
    if not isinstance(pool, InlinePool | SharedMemoryPool):
        raise InvalidArgument(f"hidl_memory cannot hold {type(pool).__name__} (a driver-managed token needs 1.3)")
    wire_pool.memory_to(pool, msg)


def memory_from(msg: hpb.HidlMemory, where: str) -> InlinePool | SharedMemoryPool:
    which = msg.WhichOneof("pool")
    if which == "inline":
        return InlinePool(msg.inline.data, max(msg.inline.size, len(msg.inline.data)))
    if which == "shared":
        s = msg.shared
        return SharedMemoryPool(s.kind, s.name, s.offset, s.size)
    raise InvalidArgument(f"{where}: memory pool has no content")


# -- model ---------------------------------------------------------------------------
def _operand_to(op: Any, msg: Any) -> None:
    wire_model.operand_fields_to(op, msg)
    extra = getattr(op, "extra_params", None)
    if isinstance(extra, V1_2.SymmPerChannelQuantParams):
        msg.extra_params.channel_quant.scales.extend(extra.scales)
        msg.extra_params.channel_quant.channel_dim = extra.channel_dim
    elif isinstance(extra, bytes):
        msg.extra_params.extension = extra


def model_to(model: Any) -> HidlModel:
    """A ``V1_0`` / ``V1_1`` / ``V1_2`` Model as its message."""
    cls = {V1_0.Model: hpb.ModelV1_0, V1_1.Model: hpb.ModelV1_1, V1_2.Model: hpb.ModelV1_2}[type(model)]
    msg: HidlModel = cls()
    for op in model.operands:
        _operand_to(op, msg.operands.add())
    for o in model.operations:
        msg.operations.add(type=int(o.type), inputs=o.inputs, outputs=o.outputs)
    msg.input_indexes.extend(model.input_indexes)
    msg.output_indexes.extend(model.output_indexes)
    msg.operand_values = model.operand_values
    for p in model.pools:
        memory_to(p, msg.pools.add())
    if not isinstance(msg, hpb.ModelV1_0):
        msg.relax_computation_float32_to_float16 = model.relax_computation_float32_to_float16
    if isinstance(msg, hpb.ModelV1_2):
        for e in model.extension_name_to_prefix:
            msg.extension_name_to_prefix.add(name=e.name, prefix=e.prefix)
    return msg


def _location_from(msg: pb.DataLocation) -> V1_0.DataLocation:
    return V1_0.DataLocation(msg.pool_index, msg.offset, msg.length)


def _operand_from(msg: Any, version: HalVersion, where: str) -> Any:
    fields: dict[str, Any] = {
        "type": _member(version, c.OperandType, msg.type, f"{where} type"),
        "dimensions": tuple(msg.dimensions),
        "number_of_consumers": msg.number_of_consumers,
        "scale": msg.scale,
        "zero_point": msg.zero_point,
        "lifetime": _member(version, c.OperandLifeTime, msg.lifetime, f"{where} lifetime"),
        "location": _location_from(msg.location),
    }
    if version < V.V1_2:
        return V1_0.Operand(**fields)
    which = msg.extra_params.WhichOneof("params") if msg.HasField("extra_params") else None
    if which == "channel_quant":
        cq = msg.extra_params.channel_quant
        fields["extra_params"] = V1_2.SymmPerChannelQuantParams(tuple(cq.scales), cq.channel_dim)
    elif which == "extension":
        fields["extra_params"] = bytes(msg.extra_params.extension)
    return V1_2.Operand(**fields)


def model_from(msg: HidlModel) -> Any:
    """The message's versioned Model (its version is the message's)."""
    version = {hpb.ModelV1_0: V.V1_0, hpb.ModelV1_1: V.V1_1, hpb.ModelV1_2: V.V1_2}[type(msg)]
    module = {V.V1_0: V1_0, V.V1_1: V1_1, V.V1_2: V1_2}[version]
    fields: dict[str, Any] = {
        "operands": tuple(_operand_from(o, version, f"operand {i}") for i, o in enumerate(msg.operands)),
        "operations": tuple(
            module.Operation(
                _member(version, c.OperationType, o.type, f"operation {i} type"), tuple(o.inputs), tuple(o.outputs)
            )
            for i, o in enumerate(msg.operations)
        ),
        "input_indexes": tuple(msg.input_indexes),
        "output_indexes": tuple(msg.output_indexes),
        "operand_values": bytes(msg.operand_values),
        "pools": tuple(memory_from(p, f"model pool {i}") for i, p in enumerate(msg.pools)),
    }
    if version >= V.V1_1:
        fields["relax_computation_float32_to_float16"] = msg.relax_computation_float32_to_float16  # type: ignore[union-attr]
    if version >= V.V1_2:
        fields["extension_name_to_prefix"] = tuple(
            ExtensionNameAndPrefix(e.name, e.prefix)
            for e in msg.extension_name_to_prefix  # type: ignore[union-attr]
        )
    return module.Model(**fields)


# -- request ---------------------------------------------------------------------------
def _args_to(args: Iterable[Any], out: Any) -> None:
    for a in args:
        m = out.add(has_no_value=a.has_no_value, dimensions=a.dimensions)
        wire_model.location_to(a.location, m.location)


def request_to(request: V1_0.Request, msg: hpb.RequestV1_0) -> hpb.RequestV1_0:
    _args_to(request.inputs, msg.inputs)
    _args_to(request.outputs, msg.outputs)
    for p in request.pools:
        memory_to(p, msg.pools.add())
    return msg


def _args_from(args: Sequence[pb.RequestArgument]) -> tuple[V1_0.RequestArgument, ...]:
    return tuple(V1_0.RequestArgument(a.has_no_value, _location_from(a.location), tuple(a.dimensions)) for a in args)


def request_from(msg: hpb.RequestV1_0) -> V1_0.Request:
    return V1_0.Request(
        _args_from(msg.inputs),
        _args_from(msg.outputs),
        tuple(memory_from(p, f"request pool {i}") for i, p in enumerate(msg.pools)),
    )


# -- capabilities ----------------------------------------------------------------------
def _perf_to(p: V1_0.PerformanceInfo, msg: pb.PerformanceInfo) -> None:
    msg.exec_time, msg.power_usage = p.exec_time, p.power_usage


def _perf_from(msg: pb.PerformanceInfo) -> V1_0.PerformanceInfo:
    return V1_0.PerformanceInfo(msg.exec_time, msg.power_usage)


def capabilities_to(caps: Any, msg: Any) -> None:
    """A ``V1_0`` / ``V1_1`` / ``V1_2`` Capabilities into its message."""
    if isinstance(caps, V1_2.Capabilities):
        _perf_to(caps.relaxed_float32_to_float16_performance_scalar, msg.relaxed_float32_to_float16_performance_scalar)
        _perf_to(caps.relaxed_float32_to_float16_performance_tensor, msg.relaxed_float32_to_float16_performance_tensor)
        for op in caps.operand_performance:
            m = msg.operand_performance.add(type=int(op.type))
            _perf_to(op.info, m.info)
        return
    _perf_to(caps.float32_performance, msg.float32_performance)
    _perf_to(caps.quantized8_performance, msg.quantized8_performance)
    if isinstance(caps, V1_1.Capabilities):
        _perf_to(caps.relaxed_float32_to_float16_performance, msg.relaxed_float32_to_float16_performance)


def capabilities_from(msg: Any) -> Any:
    """The message's versioned Capabilities."""
    if isinstance(msg, hpb.CapabilitiesV1_2):
        table = tuple(
            V1_2.OperandPerformance(
                _member(V.V1_2, c.OperandType, m.type, "operand performance type"), _perf_from(m.info)
            )
            for m in msg.operand_performance
        )
        return V1_2.Capabilities(
            _perf_from(msg.relaxed_float32_to_float16_performance_scalar),
            _perf_from(msg.relaxed_float32_to_float16_performance_tensor),
            table,
        )
    f32, q8 = _perf_from(msg.float32_performance), _perf_from(msg.quantized8_performance)
    if isinstance(msg, hpb.CapabilitiesV1_1):
        return V1_1.Capabilities(f32, q8, _perf_from(msg.relaxed_float32_to_float16_performance))
    return V1_0.Capabilities(f32, q8)


# -- statuses --------------------------------------------------------------------------
def status_for(status: ErrorStatus, version: HalVersion) -> ErrorStatus:
    """``status`` as a method of ``version`` reports it: codes the version lacks (the 1.3
    deadline and resource codes, DEAD_OBJECT) become GENERAL_FAILURE, as the utils convert."""
    return ErrorStatus(int(unvalidated_convert(status, version)))

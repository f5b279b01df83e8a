"""Validating conversion between protobuf messages and canonical types.

The only core module that touches generated code. ``*_to`` functions fill (or
build) protobuf messages; ``*_from`` functions build canonical values and raise
InvalidArgument naming the field when a wire value has no canonical meaning
(an unknown enum number, an extension type this driver does not know, a pool with
no content or token 0). Canonical -> wire -> canonical gives back an equal value
(tests/core/test_wire.py), with three documented exceptions: statuses never carry
DEAD_OBJECT out (GENERAL_FAILURE) and read unknown numbers as GENERAL_FAILURE;
device types and states read unknown numbers as OTHER / UNKNOWN; deadlines travel
as the time remaining and come back on this host's monotonic clock. Every function
is safe from any thread; the only state is bounded caches of values already converted
(request arguments and output shapes), whose lost races cost a conversion, never a value.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from enum import IntEnum
from typing import Any, TypeVar

from google.protobuf.message import DecodeError

from nnhal.core.enums import (
    EXTENSION_TYPE_LOW_BITS,
    ErrorStatus,
    OperandLifeTime,
    OperandType,
    OperationType,
    Priority,
)
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import (
    BufferTokenPool,
    DataLocation,
    ExecutionResult,
    ExtensionNameAndPrefix,
    FencedExecutionInfo,
    InlinePool,
    MemoryPool,
    Model,
    Operand,
    Operation,
    OperationProfile,
    OperationTiming,
    OutputShape,
    PoolData,
    Request,
    RequestArgument,
    SharedMemoryPool,
    Subgraph,
    SymmPerChannelQuantParams,
    Timing,
)

# The device facts' conversions (re-exported: every caller reaches them as wire.*).
from nnhal.core.wire_device import (
    buffer_desc_from as buffer_desc_from,
    buffer_desc_to as buffer_desc_to,
    buffer_role_from as buffer_role_from,
    buffer_role_to as buffer_role_to,
    capabilities_from as capabilities_from,
    capabilities_to as capabilities_to,
    device_status_from as device_status_from,
    device_type_from as device_type_from,
    extension_from as extension_from,
    extension_to as extension_to,
)
from nnhal.proto import service_pb2 as spb, types_pb2 as pb

#: Messages up to 1 GiB each way: inline pools carry tensors (the 64 MiB benchmark and
#: more). Inline pools of one request are held to it too: their contents travel in one.
MAX_MESSAGE_BYTES = 1 << 30
#: Room a response keeps beside inline pool contents (status, message, shapes, timing, profile).
ENVELOPE_BYTES = 1 << 20


def max_inline_bytes() -> int:
    """Bytes of inline pool contents that fit one message with its envelope, either way
    (read at call time, so a test may lower MAX_MESSAGE_BYTES)."""
    return MAX_MESSAGE_BYTES - ENVELOPE_BYTES


_UINT64_MAX = (1 << 64) - 1

E = TypeVar("E", bound=IntEnum)

_OPERAND_TYPES = {int(t): t for t in OperandType}
_OPERATION_TYPES = {int(t): t for t in OperationType}
_LIFETIMES = {int(t): t for t in OperandLifeTime}


def _enum(table: dict[int, E], value: int, what: str) -> E:
    try:
        return table[value]
    except KeyError:
        raise InvalidArgument(f"{what}: unknown value {value}") from None


def _type(cls: type[E], table: dict[int, E], value: int, what: str) -> E:
    """An OperandType / OperationType number: a HAL value, or an extension's (prefix << 16 |
    type, whose meaning the model's extensionNameToPrefix gives; validation checks it)."""
    if value >> EXTENSION_TYPE_LOW_BITS:
        return cls(value)
    return _enum(table, value, what)


def priority_from_wire(value: int) -> Priority:
    if value not in (0, 1, 2):
        raise InvalidArgument(f"priority {value} is not one of LOW (0), MEDIUM (1), HIGH (2)")
    return Priority(value)


# -- model ----------------------------------------------------------------------
def location_to(loc: Any, msg: pb.DataLocation) -> None:
    """A DataLocation (canonical or of any HAL version: the same fields), left unset when all zero."""
    if loc.pool_index or loc.offset or loc.length:
        msg.pool_index = loc.pool_index
        msg.offset = loc.offset
        msg.length = loc.length


def operand_fields_to(op: Any, msg: Any) -> None:
    """The fields every version's Operand shares (type, dimensions, consumers, scale, zero
    point, lifetime, location) into an Operand message of ``types.proto`` or ``hidl.proto``;
    the extra parameters are each caller's (they differ by version)."""
    msg.type = int(op.type)
    msg.dimensions.extend(op.dimensions)
    msg.number_of_consumers = op.number_of_consumers
    msg.scale = op.scale
    msg.zero_point = op.zero_point
    msg.lifetime = int(op.lifetime)
    location_to(op.location, msg.location)


def operand_to(op: Operand, msg: pb.Operand) -> None:
    operand_fields_to(op, msg)
    if op.channel_quant is not None:
        msg.extra_params.channel_quant.scales.extend(op.channel_quant.scales)
        msg.extra_params.channel_quant.channel_dim = op.channel_quant.channel_dim
    elif op.extension_params is not None:
        msg.extra_params.extension = op.extension_params


def subgraph_to(sg: Subgraph, msg: pb.Subgraph) -> None:
    for op in sg.operands:
        operand_to(op, msg.operands.add())
    for o in sg.operations:
        m = msg.operations.add()
        m.type = int(o.type)
        m.inputs.extend(o.inputs)
        m.outputs.extend(o.outputs)
    msg.input_indexes.extend(sg.input_indexes)
    msg.output_indexes.extend(sg.output_indexes)


def pool_to(pool: MemoryPool, msg: pb.MemoryPool) -> None:
    if isinstance(pool, BufferTokenPool):
        msg.token = pool.token
    else:
        memory_to(pool, msg)


def memory_to(pool: InlinePool | SharedMemoryPool, msg: Any) -> None:
    """An inline or shared-memory pool into ``msg``: a MemoryPool of ``types.proto`` or a
    HIDL memory of ``hidl.proto`` (the same ``inline`` / ``shared`` fields)."""
    if isinstance(pool, InlinePool):
        inline = msg.inline
        inline.data = pool.data if isinstance(pool.data, bytes) else bytes(pool.data)
        inline.size = pool.size
    else:
        shared = msg.shared
        shared.kind = pool.kind
        shared.name = pool.name
        shared.offset = pool.offset
        shared.size = pool.size


def model_to(model: Model, msg: pb.Model | None = None) -> pb.Model:
    msg = msg if msg is not None else pb.Model()
    subgraph_to(model.main, msg.main)
    for sg in model.referenced:
        subgraph_to(sg, msg.referenced.add())
    msg.operand_values = model.operand_values
    for p in model.pools:
        pool_to(p, msg.pools.add())
    msg.relax_computation_float32_to_float16 = model.relax_computation_float32_to_float16
    for e in model.extension_name_to_prefix:
        msg.extension_name_to_prefix.add(name=e.name, prefix=e.prefix)
    return msg


def _loc_from(msg: pb.DataLocation) -> DataLocation:
    return DataLocation(msg.pool_index, msg.offset, msg.length)


def operand_from(msg: pb.Operand, where: str) -> Operand:
    t = _type(OperandType, _OPERAND_TYPES, msg.type, f"{where} type")
    lifetime = _enum(_LIFETIMES, msg.lifetime, f"{where} lifetime")
    channel_quant = None
    extension = None
    which = msg.extra_params.WhichOneof("params") if msg.HasField("extra_params") else None
    if which == "channel_quant":
        cq = msg.extra_params.channel_quant
        channel_quant = SymmPerChannelQuantParams(tuple(cq.scales), cq.channel_dim)
    elif which == "extension":
        extension = bytes(msg.extra_params.extension)
    return Operand(
        type=t,
        dimensions=tuple(msg.dimensions),
        number_of_consumers=msg.number_of_consumers,
        scale=msg.scale,
        zero_point=msg.zero_point,
        lifetime=lifetime,
        location=_loc_from(msg.location),
        channel_quant=channel_quant,
        extension_params=extension,
    )


def subgraph_from(msg: pb.Subgraph, name: str) -> Subgraph:
    operands = tuple(operand_from(o, f"{name} operand {i}") for i, o in enumerate(msg.operands))
    operations = tuple(
        Operation(
            _type(OperationType, _OPERATION_TYPES, o.type, f"{name} operation {i} type"),
            tuple(o.inputs),
            tuple(o.outputs),
        )
        for i, o in enumerate(msg.operations)
    )
    return Subgraph(operands, operations, tuple(msg.input_indexes), tuple(msg.output_indexes))


def pool_from(msg: pb.MemoryPool, where: str) -> MemoryPool:
    which = msg.WhichOneof("pool")
    if which == "inline":
        data = msg.inline.data
        size = max(msg.inline.size, len(data))
        return InlinePool(data, size)
    if which == "shared":
        s = msg.shared
        return SharedMemoryPool(s.kind, s.name, s.offset, s.size)
    if which == "token":
        if msg.token == 0:
            raise InvalidArgument(f"{where}: buffer token must be positive")
        return BufferTokenPool(msg.token)
    raise InvalidArgument(f"{where}: memory pool has no content")


def model_from(msg: pb.Model) -> Model:
    return Model(
        main=subgraph_from(msg.main, "main"),
        referenced=tuple(subgraph_from(sg, f"referenced[{i}]") for i, sg in enumerate(msg.referenced)),
        operand_values=msg.operand_values,
        pools=tuple(pool_from(p, f"model pool {i}") for i, p in enumerate(msg.pools)),
        relax_computation_float32_to_float16=msg.relax_computation_float32_to_float16,
        extension_name_to_prefix=tuple(ExtensionNameAndPrefix(e.name, e.prefix) for e in msg.extension_name_to_prefix),
    )


# -- request ----------------------------------------------------------------------
def _args_to(args: Iterable[RequestArgument], out: object) -> None:
    for a in args:
        m = out.add()  # type: ignore[attr-defined]
        if a.has_no_value:
            m.has_no_value = True
        location_to(a.location, m.location)
        if a.dimensions:
            m.dimensions.extend(a.dimensions)


#: The arguments of requests sent lately, by the identity of their tuples: a client
#: executing the same plan again (``nnhal.client.numpy_io`` reuses its argument tuples)
#: merges their serialized bytes instead of building every argument field by field. Bytes
#: are kept from a tuple's second use on, so a caller building fresh arguments for every
#: request pays nothing extra. The tuples are held, so an id is never another's. Bounded:
#: cleared when full.
_ARGS_SENT: dict[tuple[int, int], tuple[object, object, bytes | None]] = {}
_ARGS_SENT_MAX = 64


def request_to(request: Request, msg: pb.Request | None = None) -> pb.Request:
    msg = msg if msg is not None else pb.Request()
    inputs, outputs = request.inputs, request.outputs
    key = (id(inputs), id(outputs))
    seen = _ARGS_SENT.get(key)
    if seen is not None and seen[0] is inputs and seen[1] is outputs:
        data = seen[2]
        if data is None:
            args = pb.Request()
            _args_to(inputs, args.inputs)
            _args_to(outputs, args.outputs)
            data = args.SerializeToString()
            _ARGS_SENT[key] = (inputs, outputs, data)
        msg.MergeFromString(data)
    else:
        _args_to(inputs, msg.inputs)
        _args_to(outputs, msg.outputs)
        if len(_ARGS_SENT) >= _ARGS_SENT_MAX:
            _ARGS_SENT.clear()
        _ARGS_SENT[key] = (inputs, outputs, None)
    for p in request.pools:
        pool_to(p, msg.pools.add())
    return msg


#: Canonical arguments by their wire bytes: a burst or a loop of executions sends the same
#: few arguments again and again, and one ``SerializeToString`` + lookup costs a fraction of
#: reading every field into new frozen dataclasses. Equal bytes are an equal argument, so a
#: hit returns exactly what a conversion would. Bounded: cleared when full.
_ARGS_SEEN: dict[bytes, RequestArgument] = {}
_ARGS_SEEN_MAX = 4096


#: Only arguments (and argument lists) serialized to at most this many bytes are remembered:
#: the caches hold their keys, and a peer's message may carry long dimension lists.
_SEEN_KEY_MAX = 1024


def _arg_from(a: pb.RequestArgument) -> RequestArgument:
    key = a.SerializeToString()
    arg = _ARGS_SEEN.get(key)
    if arg is None:
        loc = a.location
        arg = RequestArgument(a.has_no_value, DataLocation(loc.pool_index, loc.offset, loc.length), tuple(a.dimensions))
        if len(key) <= _SEEN_KEY_MAX:
            if len(_ARGS_SEEN) >= _ARGS_SEEN_MAX:
                _ARGS_SEEN.clear()
            _ARGS_SEEN[key] = arg
    return arg


#: Argument tuples by their arguments' wire bytes: a repeated layout gets back the very tuple
#: it got before, so that the prepared model's plan cache finds its plan by identity
#: (``request_plan.PlanCache``) instead of hashing every argument. Bounded as ``_ARGS_SEEN``.
_LISTS_SEEN: dict[tuple[bytes, ...], tuple[RequestArgument, ...]] = {}
_LISTS_SEEN_MAX = 256
_serialized = pb.RequestArgument.SerializeToString


def args_from(args: Sequence[pb.RequestArgument]) -> tuple[RequestArgument, ...]:
    """A request's inputs or outputs (a repeated layout's very tuple of the last time)."""
    key = tuple(map(_serialized, args))
    seen = _LISTS_SEEN.get(key)
    if seen is None:
        seen = tuple(map(_arg_from, args))
        if sum(map(len, key)) <= _SEEN_KEY_MAX:
            if len(_LISTS_SEEN) >= _LISTS_SEEN_MAX:
                _LISTS_SEEN.clear()
            _LISTS_SEEN[key] = seen
    return seen


def request_from(msg: pb.Request) -> Request:
    return Request(args_from(msg.inputs), args_from(msg.outputs), _request_pools_from(msg.pools))


def _inline_part(inline: pb.InlineMemory) -> tuple[bytes, int]:
    """An inline pool's bytes and size: the size it declares, at least its bytes' length."""
    data = inline.data
    size = inline.size
    return data, size if size > len(data) else len(data)


def _request_pools_from(msgs: Sequence[pb.MemoryPool]) -> tuple[MemoryPool, ...]:
    pools: list[MemoryPool] = []
    for i, p in enumerate(msgs):
        if p.HasField("inline"):  # the common case first, with no message formatted
            pools.append(InlinePool(*_inline_part(p.inline)))
        else:
            pools.append(pool_from(p, f"request pool {i}"))
    return tuple(pools)


def inline_pools_from(msgs: Sequence[pb.MemoryPool]) -> list[tuple[bytes, int]] | None:
    """Each pool's bytes and size (``request_from`` makes an ``InlinePool`` of them) when every
    pool of ``msgs`` is inline; None when one is not."""
    # A loop, not a comprehension: on every execution's path.
    parts: list[tuple[bytes, int]] = []
    for p in msgs:
        if not p.HasField("inline"):
            return None
        parts.append(_inline_part(p.inline))
    return parts


# -- results ---------------------------------------------------------------------
def output_shapes_to(shapes: Iterable[OutputShape], out: object) -> None:
    for s in shapes:
        m = out.add()  # type: ignore[attr-defined]
        m.dimensions.extend(s.dimensions)
        m.is_sufficient = s.is_sufficient


#: Output shapes by their wire bytes (as ``_ARGS_SEEN``): an execution loop gets the same few back.
_SHAPES_SEEN: dict[bytes, OutputShape] = {}


def _shape_from(m: pb.OutputShape) -> OutputShape:
    key = m.SerializeToString()
    shape = _SHAPES_SEEN.get(key)
    if shape is None:
        shape = OutputShape(tuple(m.dimensions), m.is_sufficient)
        if len(_SHAPES_SEEN) >= _ARGS_SEEN_MAX:
            _SHAPES_SEEN.clear()
        _SHAPES_SEEN[key] = shape
    return shape


def output_shapes_from(msgs: Iterable[pb.OutputShape]) -> tuple[OutputShape, ...]:
    return tuple(map(_shape_from, msgs))


def timing_to(t: Timing, msg: pb.Timing) -> None:
    msg.time_on_device = t.time_on_device
    msg.time_in_driver = t.time_in_driver


_NOT_MEASURED = Timing()
_NO_TIME = _NOT_MEASURED.time_on_device  # either field's when not measured


def timing_from(msg: pb.Timing) -> Timing:
    on_device, in_driver = msg.time_on_device, msg.time_in_driver
    if on_device == _NOT_MEASURED.time_on_device and in_driver == _NOT_MEASURED.time_in_driver:
        return _NOT_MEASURED  # the common answer, one shared value
    return Timing(on_device, in_driver)


_STATUSES = {int(s): s for s in ErrorStatus if s != ErrorStatus.DEAD_OBJECT}


def error_status_from(value: int) -> ErrorStatus:
    """An unknown status number reads as GENERAL_FAILURE (a newer peer's code), and so does
    DEAD_OBJECT: it is the client's own verdict on a vanished server, never a peer's answer."""
    return _STATUSES.get(value, ErrorStatus.GENERAL_FAILURE)


def error_status_to(status: ErrorStatus) -> int:
    """DEAD_OBJECT is the client's verdict on a vanished server; a server that answers is
    not dead, so it never sends that code (GENERAL_FAILURE instead)."""
    return int(ErrorStatus.GENERAL_FAILURE if status == ErrorStatus.DEAD_OBJECT else status)


def status_to(msg: Any, status: ErrorStatus, message: str) -> Any:
    """Fill the ``status`` + ``message`` pair every response carries; returns ``msg``."""
    msg.status = error_status_to(status)
    msg.message = message
    return msg


def status_from(msg: Any) -> tuple[ErrorStatus, str]:
    return error_status_from(msg.status), str(msg.message)


def _output_pools_to(pools: dict[int, PoolData], out: Any) -> None:
    for index, data in sorted(pools.items()):
        out.add(pool_index=index, data=bytes(data))


#: A result's output shapes encoded as an ``ExecuteResult``'s part, by the identity of their
#: tuple (a layout's plan hands back the very tuple while its shapes stay: ``RequestPlan.write_outputs``):
#: (the tuple, kept so that its id stays its own; the part with an unmeasured timing; the part alone).
_SHAPES_PARTS: dict[int, tuple[tuple[OutputShape, ...], bytes, bytes]] = {}


def _shapes_parts(shapes: tuple[OutputShape, ...]) -> tuple[tuple[OutputShape, ...], bytes, bytes]:
    """``shapes``' entry of ``_SHAPES_PARTS``, encoded and kept when it has none."""
    msg = spb.ExecuteResult()
    output_shapes_to(shapes, msg.output_shapes)
    alone = msg.SerializeToString()
    timing_to(_NOT_MEASURED, msg.timing)
    parts = (shapes, msg.SerializeToString(), alone)
    if len(_SHAPES_PARTS) >= _ARGS_SEEN_MAX:
        _SHAPES_PARTS.clear()
    _SHAPES_PARTS[id(shapes)] = parts
    return parts


def execution_result_to(result: ExecutionResult, msg: spb.ExecuteResult | None = None) -> spb.ExecuteResult:
    msg = spb.ExecuteResult() if msg is None else msg
    if result.status or result.message:  # a success leaves both at their defaults
        status_to(msg, result.status, result.message)
    # The output shapes (and an unmeasured timing) merged from their encoded part, made once
    # per shapes tuple: one parse of a few bytes instead of a sub-message built per shape.
    shapes, timing = result.output_shapes, result.timing
    parts = _SHAPES_PARTS.get(id(shapes))
    if parts is None or parts[0] is not shapes:
        parts = _shapes_parts(shapes)
    if timing.time_on_device == _NO_TIME and timing.time_in_driver == _NO_TIME:
        msg.MergeFromString(parts[1])
    else:
        msg.MergeFromString(parts[2])
        timing_to(timing, msg.timing)
    pools = result.output_pools
    if len(pools) == 1:  # the common case: one output pool, nothing to sort
        for index, data in pools.items():
            msg.output_pools.add(pool_index=index, data=bytes(data))
    else:
        _output_pools_to(pools, msg.output_pools)
    for p in result.profile:
        msg.profile.add(operation=p.operation, count=p.count, total_us=p.total_us)
    for t in result.timeline:
        msg.timeline.add(
            index=t.index, operation=t.operation, subgraph=t.subgraph, start_us=t.start_us, duration_us=t.duration_us
        )
    return msg


def execution_result_from(msg: spb.ExecuteResult) -> ExecutionResult:
    profile, timeline = msg.profile, msg.timeline  # most answers have neither: no tuples built
    return ExecutionResult(
        error_status_from(msg.status),
        msg.message,
        output_shapes_from(msg.output_shapes),
        timing_from(msg.timing),
        {p.pool_index: p.data for p in msg.output_pools},
        tuple(OperationProfile(p.operation, p.count, p.total_us) for p in profile) if profile else (),
        tuple(OperationTiming(t.index, t.operation, t.subgraph, t.start_us, t.duration_us) for t in timeline)
        if timeline
        else (),
    )


def fenced_info_to(info: FencedExecutionInfo, msg: spb.FencedInfoResponse | None = None) -> spb.FencedInfoResponse:
    msg = spb.FencedInfoResponse() if msg is None else msg
    status_to(msg, info.status, info.message)
    msg.signalled = info.signalled
    timing_to(info.timing_launched, msg.timing_launched)
    timing_to(info.timing_fenced, msg.timing_fenced)
    _output_pools_to(info.output_pools, msg.output_pools)
    return msg


def fenced_info_from(msg: spb.FencedInfoResponse) -> FencedExecutionInfo:
    return FencedExecutionInfo(
        signalled=msg.signalled,
        status=error_status_from(msg.status),
        message=msg.message,
        timing_launched=timing_from(msg.timing_launched),
        timing_fenced=timing_from(msg.timing_fenced),
        output_pools={p.pool_index: p.data for p in msg.output_pools},
    )


# -- deadlines -------------------------------------------------------------------
def deadline_to(remaining_s: float | None, msg: pb.Deadline) -> None:
    """A deadline travels as the time remaining when the request is sent (no deadline:
    the message stays unset). The remainder saturates to the field's range: negative ones
    travel as 0 (already passed), ones beyond uint64 ns (~584 years, or infinite) as its maximum.
    Raises InvalidArgument for NaN."""
    if remaining_s is None:
        return
    ns = remaining_ns(remaining_s)
    msg.has_deadline = True
    msg.remaining_ns = ns


def remaining_ns(remaining_s: float) -> int:
    """The ``Deadline.remaining_ns`` of a deadline ``remaining_s`` seconds away (saturated as
    :func:`deadline_to` says). Raises InvalidArgument for NaN."""
    if math.isnan(remaining_s):
        raise InvalidArgument("the deadline is not a number (NaN)")
    ns = remaining_s * 1e9
    return 0 if ns <= 0 else _UINT64_MAX if ns >= _UINT64_MAX else int(ns)


def deadline_from(msg: pb.Deadline) -> int | None:
    """The deadline re-based on this host's monotonic clock (ns), None for none."""
    if not msg.has_deadline:
        return None
    return time.monotonic_ns() + msg.remaining_ns


# -- whole models as bytes (compilation caches) ----------------------------------
def model_to_bytes(model: Model) -> bytes:
    return model_to(model).SerializeToString()


def model_from_bytes(data: bytes) -> Model:
    """Raises InvalidArgument when ``data`` is not a serialized model."""
    msg = pb.Model()
    try:
        msg.ParseFromString(data)
    except DecodeError as err:
        raise InvalidArgument(f"not a serialized model: {err}") from err
    return model_from(msg)

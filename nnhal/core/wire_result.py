"""Protobuf <-> canonical results of an execution: output shapes, timing, output pools,
profiles and timelines, and a fenced execution's information.

Part of the ``wire`` family (:mod:`nnhal.core.wire` states its contract); statuses are read
and written by :mod:`nnhal.core.wire_status`. Safe from any thread; its only state is two
bounded caches — output shapes already converted, and output shapes tuples already encoded —
whose lost races cost a conversion, never a value.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nnhal.core.types import (
    ExecutionResult,
    FencedExecutionInfo,
    OperationProfile,
    OperationTiming,
    OutputShape,
    PoolData,
    Timing,
)
from nnhal.core.wire_status import error_status_from, status_to
from nnhal.proto import service_pb2 as spb, types_pb2 as pb


def output_shapes_to(shapes: Iterable[OutputShape], out: object) -> None:
    for s in shapes:
        m = out.add()  # type: ignore[attr-defined]
        m.dimensions.extend(s.dimensions)
        m.is_sufficient = s.is_sufficient


#: Output shapes by their wire bytes (as ``wire_request._ARGS_SEEN``): an execution loop gets the same few back.
_SHAPES_SEEN: dict[bytes, OutputShape] = {}
_SHAPES_SEEN_MAX = 4096


def _shape_from(m: pb.OutputShape) -> OutputShape:
    key = m.SerializeToString()
    shape = _SHAPES_SEEN.get(key)
    if shape is None:
        shape = OutputShape(tuple(m.dimensions), m.is_sufficient)
        if len(_SHAPES_SEEN) >= _SHAPES_SEEN_MAX:
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
    if len(_SHAPES_PARTS) >= _SHAPES_SEEN_MAX:
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


#: The bytes of a serialized answer before its one output pool's data (:func:`answer_bytes`), by
#: (the answer's output shapes tuple's identity, the pool's index, the data's length, whether
#: a ``BurstResponse`` wraps it): (that tuple, kept so that its id stays its own; the bytes).
#: Bounded: cleared when full.
_HEADS: dict[tuple[int, int, int, bool], tuple[tuple[OutputShape, ...], bytes]] = {}


def answer_bytes(result: ExecutionResult, burst: bool = False) -> bytes | None:
    """``execution_result_to(result)`` serialized — in a ``BurstResponse`` (its ``result``) when
    ``burst`` — for the common answer: a success with no message, an unmeasured timing, one
    output pool, no profile or timeline; None for any other (build the message). Its bytes
    before the pool's data are protobuf's own for the first answer of each (output shapes, pool
    index, data length), kept; an answer is then those bytes and its data, joined (no message
    built, no copy of the data but the join's)."""
    if result.status or result.message or result.profile or result.timeline:
        return None
    timing = result.timing
    if timing.time_on_device != _NO_TIME or timing.time_in_driver != _NO_TIME:
        return None
    try:
        ((index, data),) = result.output_pools.items()
    except ValueError:  # not one pool
        return None
    n = len(data) if type(data) is bytes else memoryview(data).nbytes
    shapes = result.output_shapes
    key = (id(shapes), index, n, burst)
    head = _HEADS.get(key)
    if head is not None and head[0] is shapes:
        return head[1] + data  # bytes, also with a memoryview's data (as a join, one copy)
    if burst:
        answer = spb.BurstResponse()
        execution_result_to(result, answer.result)
        whole = answer.SerializeToString()
    else:
        whole = execution_result_to(result).SerializeToString()
    # The pool's data is the message's last bytes: ``output_pools`` is its last field present
    # and ``data`` its pool's last (an empty one is not written: n is 0).
    if len(_HEADS) >= _SHAPES_SEEN_MAX:
        _HEADS.clear()
    _HEADS[key] = (shapes, whole[: len(whole) - n])
    return whole


def answer_head(result: ExecutionResult, burst: bool = False) -> tuple[int, bytes] | None:
    """The common answer of ``result`` (:func:`answer_bytes`) split before its pool's data: the
    pool's index and the bytes every answer of the same output shapes, pool index and data
    length begins with (then its data); None: not the common answer. Made once per layout
    (``repeat.Repeat``: a burst's repeated messages, answered as those bytes and their data)."""
    whole = answer_bytes(result, burst)
    if whole is None:
        return None
    ((index, data),) = result.output_pools.items()
    return index, whole[: len(whole) - memoryview(data).nbytes]


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

"""Execution requests written as bytes from parts kept per layout, and results read back lean.

A loop of executions of one layout (a numpy plan run again, a burst) sends the same session,
model and request arguments every call; only the pools' bytes, the deadline and a few
scalars change. :func:`execute_bytes` writes the ``ExecuteRequest`` of such a call straight
as protobuf wire bytes: the arguments' bytes are serialized once per layout (:func:`args_bytes`)
and the rest is a few length-prefixed fields around the pools' data, where building the
message field by field through the protobuf API costs several times more. The bytes parse as
the message ``messages.execute_request`` builds (same fields and values, fields in number
order); a request with a pool that is not inline is not written here (None: the caller
builds the message). :func:`burst_bytes` frames it as a ``BurstRequest``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nnhal.core import wire
from nnhal.core.enums import MeasureTiming
from nnhal.core.types import InlinePool, MemoryPool, PoolData, Request, RequestArgument
from nnhal.core.wire_stream import varint
from nnhal.proto import types_pb2 as pb

# Tags (field number << 3 | wire type) of the fields written here; wire type 0 is a varint,
# 2 a length-delimited field.
_SESSION = b"\x0a"  # ExecuteRequest.session = 1
_MODEL = b"\x12"  # ExecuteRequest.prepared_model = 2
_REQUEST = b"\x1a"  # ExecuteRequest.request = 3
_MEASURE = b"\x20"  # ExecuteRequest.measure = 4
_DEADLINE = b"\x2a"  # ExecuteRequest.deadline = 5
_LOOP = b"\x30"  # ExecuteRequest.loop_timeout_ns = 6
_PROFILE = b"\x38\x01"  # ExecuteRequest.profile = 7, true
_POOL = b"\x1a"  # Request.pools = 3
_INLINE = b"\x0a"  # MemoryPool.inline = 1
_DATA = b"\x0a"  # InlineMemory.data = 1
_SIZE = b"\x10"  # InlineMemory.size = 2
_HAS_DEADLINE = b"\x08\x01"  # Deadline.has_deadline = 1, true
_REMAINING = b"\x10"  # Deadline.remaining_ns = 2
_EXECUTE = b"\x1a"  # BurstRequest.execute = 3

_MEASURE_YES = _MEASURE + bytes([int(MeasureTiming.YES)])


#: Serialized arguments by their fields (:func:`_fields`): a few layouts repeat. Bounded:
#: cleared when full.
_ARGS: dict[tuple[tuple[tuple[Any, ...], ...], ...], bytes] = {}
_ARGS_MAX = 64


def _fields(args: tuple[RequestArgument, ...]) -> tuple[tuple[Any, ...], ...]:
    """Every field of ``args`` in plain tuples (hashed and compared in C, where the
    dataclasses' own hash and equality are Python calls per argument)."""
    return tuple(
        [(a.has_no_value, a.location.pool_index, a.location.offset, a.location.length, a.dimensions) for a in args]
    )


#: The last arguments serialized and their bytes: a numpy plan hands the same tuples every call.
#: One tuple, read and replaced whole (threads share it); it keeps those tuples alive, so that
#: ``is`` cannot match other arguments at their address.
_LAST_ARGS: tuple[tuple[RequestArgument, ...], tuple[RequestArgument, ...], bytes] = ((), (), b"")


def args_bytes(inputs: tuple[RequestArgument, ...], outputs: tuple[RequestArgument, ...]) -> bytes:
    """The ``Request.inputs`` and ``Request.outputs`` fields of these arguments, serialized
    (kept per arguments' value: a burst builds equal arguments anew for every call; the very
    tuples of the last call are known without reading their fields)."""
    global _LAST_ARGS
    last = _LAST_ARGS
    if last[0] is inputs and last[1] is outputs:
        return last[2]
    key = (_fields(inputs), _fields(outputs))
    data = _ARGS.get(key)
    if data is None:
        msg = pb.Request()
        wire.request_to(Request(inputs, outputs, ()), msg)
        data = msg.SerializeToString()
        if len(_ARGS) >= _ARGS_MAX:
            _ARGS.clear()
        _ARGS[key] = data
    _LAST_ARGS = (inputs, outputs, data)
    return data


#: Heads by (session, prepared model) (:func:`head_bytes`). Bounded: cleared when full.
_HEADS: dict[tuple[str, str], bytes] = {}
_HEADS_MAX = 64


def head_bytes(session: str, handle: str) -> bytes:
    """The ``session`` and ``prepared_model`` fields of an ExecuteRequest (kept per pair)."""
    key = (session, handle)
    head = _HEADS.get(key)
    if head is None:
        s, h = session.encode(), handle.encode()
        head = b"".join((_SESSION, varint(len(s)), s, _MODEL, varint(len(h)), h))
        if len(_HEADS) >= _HEADS_MAX:
            _HEADS.clear()
        _HEADS[key] = head
    return head


#: An inline pool's framing by (data bytes, declared size) (:func:`_pool_frame`): a layout's
#: pools keep their sizes from call to call. Bounded: cleared when full.
_FRAMES: dict[tuple[int, int], tuple[bytes, bytes, int]] = {}
_FRAMES_MAX = 256


def _pool_frame(n: int, size: int) -> tuple[bytes, bytes, int]:
    """The ``Request.pools`` field of an inline pool of ``n`` data bytes declaring ``size``:
    its bytes before the data and after it, and the field's whole length (kept per pair)."""
    # The InlineMemory message: its data (when any), then its size (when not 0).
    before = b""
    inline = 0
    if n:
        prefix = varint(n)
        before = _DATA + prefix
        inline = 1 + len(prefix) + n
    after = b""
    if size:
        value = varint(size)
        after = _SIZE + value
        inline += 1 + len(value)
    inner = varint(inline)
    outer = varint(1 + len(inner) + inline)  # the MemoryPool message
    frame = (_POOL + outer + _INLINE + inner + before, after, 2 + len(outer) + len(inner) + inline)
    if len(_FRAMES) >= _FRAMES_MAX:
        _FRAMES.clear()
    _FRAMES[n, size] = frame
    return frame


def execute_bytes(
    head: bytes,
    args: bytes,
    pools: Sequence[MemoryPool],
    measure: bool,
    remaining_s: float | None,
    loop_timeout_ns: int,
    profile: bool,
) -> bytes | None:
    """The serialized ExecuteRequest of ``head`` (:func:`head_bytes`), ``args``
    (:func:`args_bytes`) and ``pools``, with its deadline ``remaining_s`` seconds away (None:
    none; saturated as ``wire.deadline_to`` does); None when a pool is not inline. Raises
    InvalidArgument for a NaN deadline (as ``wire.deadline_to``)."""
    parts: list[PoolData] = [args]
    length = len(args)  # of the Request message
    for pool in pools:
        if type(pool) is not InlinePool:
            return None
        data, size = pool.data, pool.size
        n = len(data) if type(data) is bytes else memoryview(data).nbytes
        frame = _FRAMES.get((n, size))
        if frame is None:
            frame = _pool_frame(n, size)
        before, after, field = frame
        parts += (before, data, after)
        length += field
    out: list[PoolData] = [head, _REQUEST, varint(length), *parts]
    if measure:
        out.append(_MEASURE_YES)
    if remaining_s is not None:
        ns = wire.remaining_ns(remaining_s)
        if ns:
            value = varint(ns)
            out += (_DEADLINE, varint(3 + len(value)), _HAS_DEADLINE, _REMAINING, value)
        else:
            out += (_DEADLINE, varint(2), _HAS_DEADLINE)
    if loop_timeout_ns:
        out += (_LOOP, varint(loop_timeout_ns))
    if profile:
        out.append(_PROFILE)
    return b"".join(out)


def burst_bytes(execute: bytes) -> bytes:
    """A ``BurstRequest`` carrying the serialized ExecuteRequest ``execute``."""
    return b"".join((_EXECUTE, varint(len(execute)), execute))

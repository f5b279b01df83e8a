"""Execution requests written as bytes from parts kept per layout, and results read back lean.

A loop of executions of one layout (a numpy plan run again, a burst) sends the same session,
model and request arguments every call; only the pools' bytes, the deadline and a few
scalars change. :func:`execute_bytes` writes the ``ExecuteRequest`` of such a call straight
as protobuf wire bytes: the arguments' bytes are serialized once per layout (:func:`args_bytes`)
and the rest is a few length-prefixed fields around the pools' data, where building the
message field by field through the protobuf API costs several times more. The bytes parse as
the message ``messages.execute_request`` builds (same fields and values, fields in number
order); a request with a pool that is not inline is not written here (None: the caller
builds the message). Asked, :func:`execute_bytes` frames it as a ``BurstRequest`` in the same
pass.

The answers of such a loop differ only in their output pool's bytes: :data:`execute_answered`
and :data:`burst_answered` (the deserializers of those calls) read an answer whose bytes are
those of an answer read before everywhere but in its one output pool's data as that answer's
result with this data, apart (:data:`Answer`) — the same parse, as protobuf's parser gives the same fields for the same
bytes around a bytes field's contents. Any other answer is parsed by protobuf and read by
``wire_result.execution_result_from`` as before (undecodable bytes fail as they did).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

from nnhal.core import fastanswer, wire_deadline, wire_request, wire_result
from nnhal.core.enums import MeasureTiming
from nnhal.core.types import (
    NO_TIMING,
    ExecutionResult,
    InlinePool,
    MemoryPool,
    PoolData,
    Request,
    RequestArgument,
    arguments_key,
)
from nnhal.core.wire_stream import read_varint, varint
from nnhal.proto import service_pb2 as spb, types_pb2 as pb

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


#: Serialized arguments by their fields (``types.arguments_key``): a few layouts repeat.
#: Bounded: cleared when full.
_ARGS: dict[tuple[tuple[tuple[Any, ...], ...], ...], bytes] = {}
_ARGS_MAX = 64

#: The last arguments serialized, their bytes and their key: a numpy plan hands the same tuples
#: every call, a burst loop equal ones. One tuple, read and replaced whole (threads share it); it
#: keeps those tuples alive, so that ``is`` cannot match other arguments at their address.
_LAST_ARGS: tuple[tuple[RequestArgument, ...], tuple[RequestArgument, ...], bytes, object] = ((), (), b"", None)


def args_bytes(inputs: tuple[RequestArgument, ...], outputs: tuple[RequestArgument, ...]) -> bytes:
    """The ``Request.inputs`` and ``Request.outputs`` fields of these arguments, serialized
    (kept per arguments' value: a burst builds equal arguments anew for every call; the very
    tuples of the last call are known without reading their fields, equal ones of the last
    call without a look-up)."""
    global _LAST_ARGS
    last = _LAST_ARGS
    if last[0] is inputs and last[1] is outputs:
        return last[2]
    key = (arguments_key(inputs), arguments_key(outputs))
    if key == last[3]:
        data = last[2]
    else:
        found = _ARGS.get(key)
        if found is None:
            msg = pb.Request()
            wire_request.request_to(Request(inputs, outputs, ()), msg)
            found = msg.SerializeToString()
            if len(_ARGS) >= _ARGS_MAX:
                _ARGS.clear()
            _ARGS[key] = found
        data = found
    _LAST_ARGS = (inputs, outputs, data, key)
    return data


#: Heads by (session, prepared model) (:func:`head_bytes`). Bounded: cleared when full.
_HEADS: dict[tuple[str, str], bytes] = {}
_HEADS_MAX = 64


#: The last head and its pair: a loop's calls hand the same session and handle strings.
#: One tuple, read and replaced whole (threads share it).
_LAST_HEAD: tuple[str, str, bytes] = ("", "", b"")


def head_bytes(session: str, handle: str) -> bytes:
    """The ``session`` and ``prepared_model`` fields of an ExecuteRequest (kept per pair; the
    very strings of the last call known without a look-up)."""
    global _LAST_HEAD
    last = _LAST_HEAD
    if last[0] is session and last[1] is handle:
        return last[2]
    key = (session, handle)
    head = _HEADS.get(key)
    if head is None:
        s, h = session.encode(), handle.encode()
        head = b"".join((_SESSION, varint(len(s)), s, _MODEL, varint(len(h)), h))
        if len(_HEADS) >= _HEADS_MAX:
            _HEADS.clear()
        _HEADS[key] = head
    _LAST_HEAD = (session, handle, head)
    return head


def _pool_frame(n: int, size: int) -> tuple[bytes, bytes, int]:
    """The ``Request.pools`` field of an inline pool of ``n`` data bytes declaring ``size``:
    its bytes before the data and after it, and the field's whole length."""
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
    return _POOL + outer + _INLINE + inner + before, after, 2 + len(outer) + len(inner) + inline


class _Layout(NamedTuple):
    """The bytes of the requests of one layout around their pools' data (:func:`_layout`)."""

    #: The request's length, its scalars left out: its bytes around the pools' data and that data.
    length: int
    #: What :func:`execute_bytes` joins, the pools' data left out: the BurstRequest's framing
    #: (b"": none), then the bytes before each pool's data and those after the last one's (or
    #: the whole request message's, for no pools), b"" where each pool's data goes between them.
    frame: tuple[bytes, ...]
    #: (head, arguments, (data bytes, declared size) of each inline pool): what it is kept by.
    key: tuple[bytes, bytes, tuple[tuple[int, int], ...]]


#: Layouts by (head, arguments, pool sizes) (:func:`_layout`). Bounded: cleared when full.
_LAYOUTS: dict[tuple[bytes, bytes, tuple[tuple[int, int], ...]], _Layout] = {}
_LAYOUTS_MAX = 64
#: The last layout written: a loop of one layout hands the same head and arguments every call.
#: Read and replaced whole (threads share it).
_LAST_LAYOUT: _Layout | None = None


def _layout(head: bytes, args: bytes, sizes: tuple[tuple[int, int], ...]) -> _Layout:
    """The layout of requests of ``head`` (:func:`head_bytes`), ``args`` (:func:`args_bytes`)
    and inline pools of these ``sizes``: made once per layout, then kept."""
    global _LAST_LAYOUT
    key = (head, args, sizes)
    layout = _LAYOUTS.get(key)
    if layout is None:
        frames = [_pool_frame(n, size) for n, size in sizes]
        length = len(args) + sum(field for _, _, field in frames)  # of the Request message
        first = head + _REQUEST + varint(length) + args
        parts: list[bytes] = []
        for before, after, _ in frames:
            parts.append(first + before)
            first = after
        parts.append(first)
        frame = [b""] * (2 * len(parts))
        frame[1::2] = parts
        layout = _Layout(sum(map(len, parts)) + sum(n for n, _ in sizes), tuple(frame), key)
        if len(_LAYOUTS) >= _LAYOUTS_MAX:
            _LAYOUTS.clear()
        _LAYOUTS[key] = layout
    _LAST_LAYOUT = layout
    return layout


def framed_of(plan: Any, session: str, handle: str, made: Any = None) -> Framed | None:
    """The frame of a numpy plan's messages (``plan``: a ``numpy_io`` plan, its ``inputs``,
    ``outputs`` and ``encoded_sizes``) for this session and prepared model, made once per plan
    by its caller, who keeps it (a plan belongs to one prepared model, so to one session and
    handle), its answers ``made`` (:class:`Framed`); None for a plan whose pools are worth
    streaming (``encoded_sizes`` None), which this way never sends."""
    sizes = plan.encoded_sizes
    if sizes is None:
        return None
    return Framed(session, handle, plan.inputs, plan.outputs, sizes, made)


def execute_bytes(
    head: bytes,
    args: bytes,
    pools: Sequence[MemoryPool],
    measure: bool,
    remaining_s: float | None,
    loop_timeout_ns: int,
    profile: bool,
    burst: bool = False,
    sizes: tuple[tuple[int, int], ...] | None = None,
) -> bytes | None:
    """The serialized ExecuteRequest of ``head`` (:func:`head_bytes`), ``args``
    (:func:`args_bytes`) and ``pools``, with its deadline ``remaining_s`` seconds away (None:
    none; saturated as ``wire_deadline.deadline_to`` does); None when a pool is not inline. Raises
    InvalidArgument for a NaN deadline (as ``wire_deadline.deadline_to``). The bytes around the pools'
    data are made once per layout (:func:`_layout`). ``burst``: framed as a ``BurstRequest``
    carrying it (:func:`_burst_head`), written in the same pass. ``sizes``: each pool's (data
    bytes, declared size) when the caller knows them (a numpy plan's), kept by them."""
    inline = _inline(pools)
    if inline is None:
        return None
    datas, found = inline
    key = found if sizes is None else sizes
    layout = _LAST_LAYOUT  # read by index: a named field of a NamedTuple is a slower look-up
    if layout is None or layout[2] != (head, args, key):  # compared in C, the same bytes by identity
        layout = _layout(head, args, key)
    # The BurstRequest's framing (set last, when asked), then the layout's parts around the data.
    out: list[PoolData] = list(layout[1])
    out[2::2] = datas
    return _joined(out, layout[0], measure, remaining_s, loop_timeout_ns, profile, burst)


def _inline(pools: Sequence[MemoryPool]) -> tuple[list[PoolData], tuple[tuple[int, int], ...]] | None:
    """The data of each of these pools and each one's (data bytes, declared size): what a
    request written here carries of them (None when a pool is not inline)."""
    datas: list[PoolData] = []
    sizes: list[tuple[int, int]] = []
    for pool in pools:
        if type(pool) is not InlinePool:
            return None
        data = pool.data
        datas.append(data)
        sizes.append((len(data) if type(data) is bytes else memoryview(data).nbytes, pool.size))
    return datas, tuple(sizes)


class Requests:
    """The execution requests of one session and prepared model written as bytes, the last
    layout's frame kept (a burst stream's: its requests repeat one layout): a request of the
    last one's arguments — the very tuples, or equal ones (``types.arguments_key``, read only
    when the tuples are others) — and of pools of its sizes is that frame joined with its
    pools' data, no head, arguments' bytes or layout looked up; another layout is found as
    :func:`execute_bytes` finds it (:func:`args_bytes`, :func:`_layout`) and kept in its place.
    The same bytes as :func:`execute_bytes`. Thread-safe (what is kept is one tuple, read and
    replaced whole)."""

    __slots__ = ("_head", "_kept", "handle", "session")

    def __init__(self, session: str, handle: str) -> None:
        self.session = session
        self.handle = handle
        self._head = head_bytes(session, handle)
        #: The last layout's arguments (the tuples), their key, its pools' sizes, its layout, and
        #: its frame as a ``BurstRequest`` of no scalars (the framing in its first slot, kept).
        self._kept: (
            tuple[tuple[RequestArgument, ...], tuple[RequestArgument, ...], Any, Any, _Layout, tuple[bytes, ...]] | None
        ) = None

    @staticmethod
    def of(requests: Requests | None, session: str, handle: str) -> Requests:
        """``requests`` when it writes those of this session and prepared model, new ones otherwise
        (a stream keeps them from its first execution on, when its prepared model is known)."""
        if requests is not None and requests.handle == handle and requests.session == session:
            return requests
        return Requests(session, handle)

    def plain(self, request: Request) -> bytes | None:
        """:meth:`write` of a ``BurstRequest`` of no scalars (``write(request, False, None, 0,
        False, True)``) of the kept layout's very arguments (the same tuples) and inline pools of
        its sizes whose data is ``bytes``: the kept frame joined with that data, nothing looked up
        or framed again. None for any other request (:meth:`write` finds its layout)."""
        kept = self._kept
        if kept is None or request.inputs is not kept[0] or request.outputs is not kept[1]:
            return None
        pools = request.pools
        sizes = kept[3]
        if len(pools) != len(sizes):
            return None
        out: list[PoolData] = list(kept[5])  # its framing set: that of the request with no scalars
        at = 2
        # A loop over the pools, each checked against its kept size as it is set into the frame:
        # faster than reading their facts in C (several passes and their tuples), and as short.
        for pool, (n, size) in zip(pools, sizes):
            if type(pool) is not InlinePool or pool.size != size:
                return None
            data = pool.data
            if type(data) is not bytes or len(data) != n:
                return None
            out[at] = data
            at += 2
        return b"".join(out)

    def write(
        self,
        request: Request,
        measure: bool,
        remaining_s: float | None,
        loop_timeout_ns: int,
        profile: bool,
        burst: bool = False,
    ) -> bytes | None:
        """:func:`execute_bytes` of ``request`` (None when a pool is not inline)."""
        inline = _inline(request.pools)
        if inline is None:
            return None
        datas, sizes = inline
        inputs = request.inputs
        outputs = request.outputs
        kept = self._kept
        if kept is None or kept[3] != sizes or kept[0] is not inputs or kept[1] is not outputs:
            # Not the very tuples: the key of these, made once (equal ones keep the layout).
            key = (arguments_key(inputs), arguments_key(outputs))
            if kept is None or kept[3] != sizes or kept[2] != key:
                layout = _layout(self._head, args_bytes(inputs, outputs), sizes)
                framed = (_burst_head(layout[0]), *layout[1][1:])
                kept = self._kept = (inputs, outputs, key, sizes, layout, framed)
        layout = kept[4]
        out: list[PoolData] = list(kept[5] if burst else layout[1])
        out[2::2] = datas
        return _joined(out, layout[0], measure, remaining_s, loop_timeout_ns, profile, burst)


def _joined(
    out: list[Any],
    length: int,
    measure: bool,
    remaining_s: float | None,
    loop_timeout_ns: int,
    profile: bool,
    burst: bool,
) -> bytes:
    """The request of ``out`` (a slot for the BurstRequest's framing, then the request's bytes
    up to its scalars, ``length`` of them) with its scalars, framed when ``burst``, joined. A
    slot that holds a framing already holds that of the request with no scalars (a kept one:
    ``Requests``), set again only when scalars are added."""
    if measure or remaining_s is not None or loop_timeout_ns or profile:
        scalars = _scalars(measure, remaining_s, loop_timeout_ns, profile)
        out.append(scalars)
        length += len(scalars)
        if burst:
            out[0] = _burst_head(length)
    elif burst and not out[0]:
        out[0] = _burst_head(length)
    return b"".join(out)


class Framed:
    """The calls of one layout whose first pool alone carries data (a numpy plan's: the inputs,
    then room for the outputs), made once per layout: their requests written from that data's
    parts (the bytes before and after them made once, :func:`_layout`'s, joined; the parts
    joined into the message at once — :func:`execute_bytes` for a caller that keeps this per
    layout) and, given ``made``, their answers read by :meth:`read` (the layout's own
    deserializer: ``rpc``, set by the session that sends them)."""

    __slots__ = ("_after", "_answer", "_before", "_length", "_made", "rpc")

    def __init__(
        self,
        session: str,
        handle: str,
        inputs: tuple[RequestArgument, ...],
        outputs: tuple[RequestArgument, ...],
        sizes: tuple[tuple[int, int], ...],
        made: Callable[[ExecutionResult, dict[int, PoolData]], Any] | None = None,
    ) -> None:
        """``made``: what an answer alike the kept one (:meth:`read`) is made into, called with
        the result it shares with the answers alike and its own output pools (None: read apart
        as any other)."""
        if not sizes or any(n for n, _ in sizes[1:]):
            raise ValueError("a Framed layout carries data in its first pool only")
        length, frame, _ = _layout(head_bytes(session, handle), args_bytes(inputs, outputs), sizes)
        self._length = length
        self._before = frame[1]
        self._after = b"".join(frame[3:])  # no data between the other pools' parts
        self._made = made
        #: The kept answer (:meth:`read`): its length, its bytes before its one output pool's data
        #: (that data is its last bytes), where the data starts, the pool's index, and the result
        #: the answers alike share (``_read``'s); none (length -1) until one answer was read as
        #: alike another.
        self._answer: tuple[int, bytes, int, int, ExecutionResult | None] = (-1, b"", 0, 0, None)
        #: The unary call whose deserializer is :meth:`read` (made by the session at the first
        #: call: a channel's); None until then.
        self.rpc: Any = None

    def write(
        self,
        parts: Sequence[Any],
        measure: bool,
        remaining_s: float | None,
        loop_timeout_ns: int,
        profile: bool = False,
        burst: bool = False,
    ) -> bytes:
        """The serialized request (as :func:`execute_bytes`) whose first pool's data is these
        parts joined (as many bytes as the layout's; the caller's plan made both)."""
        return _joined(
            [b"", self._before, *parts, self._after],
            self._length,
            measure,
            remaining_s,
            loop_timeout_ns,
            profile,
            burst,
        )

    def read(self, raw: bytes) -> Any:
        """The ``ExecuteResult`` ``raw`` of a call of this layout (the deserializer of ``rpc``):
        an answer of the kept answer's length and bytes before its data — the bytes ``_read``
        read as alike an answer before, the same parse — is ``made`` of that result and its own
        data (a copy, as ``_read``'s), nothing parsed, looked up or read apart; any other is
        read by :data:`execute_answered` (undecodable bytes fail as they did), and one it reads
        as alike another, whose data is its last bytes, is kept (the answers alike after it are
        then ``made``). ``made`` answering None: the answer read apart."""
        length, head, start, pool, r = self._answer
        if len(raw) == length and raw.startswith(head):
            pools: dict[int, PoolData] = {pool: raw[start:]}
            made = self._made(r, pools)  # type: ignore[misc, arg-type]  # a kept answer: ``made`` given
            return (r, pools, r.timing) if made is None else made  # type: ignore[union-attr]
        answer = execute_answered(raw)
        if self._made is not None:
            seen = _EXECUTE_KNOWN.get(len(raw))
            if seen is not None and seen.result is answer[0] and not seen.tail:
                self._answer = (len(raw), seen.head, seen.start, seen.pool, seen.result)
        return answer


def _scalars(measure: bool, remaining_s: float | None, loop_timeout_ns: int, profile: bool) -> bytes:
    """The fields of an ExecuteRequest after its request (:func:`execute_bytes`'s scalars)."""
    out: list[bytes] = []
    if measure:
        out.append(_MEASURE_YES)
    if remaining_s is not None:
        ns = wire_deadline.remaining_ns(remaining_s)
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


#: The last BurstRequest framing made and its length: a burst loop of one layout frames
#: requests of one length. One tuple, read and replaced whole (threads share it).
_LAST_BURST_HEAD: tuple[int, bytes] = (-1, b"")


def _burst_head(n: int) -> bytes:
    """The bytes of a ``BurstRequest`` before the ``n`` bytes of its ExecuteRequest (the last
    length's known without writing its varint)."""
    global _LAST_BURST_HEAD
    last = _LAST_BURST_HEAD
    if last[0] == n:
        return last[1]
    head = _EXECUTE + varint(n)
    _LAST_BURST_HEAD = (n, head)
    return head


# Tags of the answer fields :func:`_pool_data` looks for: ``ExecuteResult.output_pools`` (5,
# length-delimited), ``PoolData.pool_index`` (1, varint) and ``PoolData.data`` (2,
# length-delimited); ``BurstResponse.result`` (1, length-delimited).
_OUTPUT_POOLS = 0x2A
_POOL_INDEX = 0x08
_POOL_DATA = 0x12
_BURST_RESULT = 0x0A
_U32 = 1 << 32


class _Known(NamedTuple):
    """An answer read before: its bytes before and after its one output pool's data, where
    that data lies, the pool's index, and what the rest of it says (``output_pools`` empty)."""

    head: bytes
    tail: bytes
    start: int
    end: int
    pool: int
    result: ExecutionResult


#: Answers read before by their length, one kind each (:func:`_read`). Bounded: cleared when full.
_EXECUTE_KNOWN: dict[int, _Known] = {}
_BURST_KNOWN: dict[int, _Known] = {}
_KNOWN_MAX = 64


#: An answer read apart (:func:`execute_answered`): the same shape as a same-host answer's
#: (``fastanswer.Apart``, one owner of the shape and of ``whole``) — for an answer like one read
#: before, that one's result, shared (never changed), with this answer's output pools and timing
#: (a known answer has no measured timing: its result's).
Answer = fastanswer.Apart


def _read(
    raw: bytes,
    known: dict[int, _Known],
    parse: Callable[[bytes], tuple[ExecutionResult, tuple[int, int] | None]],
) -> Answer:
    """The answer ``raw`` (module docstring), read apart (:data:`Answer`)."""
    seen = known.get(len(raw))
    if seen is not None:
        # Unpacked at once: each named field of a NamedTuple is a look-up of its own.
        head, tail, start, end, pool, r = seen
        if raw.startswith(head) and raw.endswith(tail):
            return r, {pool: raw[start:end]}, r.timing
    result, span = parse(raw)
    timing = result.timing
    # One output pool, and no measured timings (which differ from answer to answer): kept.
    if (
        span is not None
        and len(result.output_pools) == 1
        and timing.time_on_device == timing.time_in_driver == NO_TIMING
    ):
        found = _pool_data(raw, *span)
        # Kept only when the pool found is the one protobuf read (nothing else can match).
        if found is not None and result.output_pools == {found[0]: raw[found[1] : found[2]]}:
            index, start, end = found
            if len(known) >= _KNOWN_MAX:
                known.clear()
            known[len(raw)] = _Known(raw[:start], raw[end:], start, end, index, ExecutionResult(*_rest(result)))
    return fastanswer.apart_of(result)


def _rest(result: ExecutionResult) -> tuple[Any, ...]:
    """``result``'s fields, its output pools left out."""
    return (result.status, result.message, result.output_shapes, result.timing, {}, result.profile, result.timeline)


def _parse_execute(raw: bytes) -> tuple[ExecutionResult, tuple[int, int] | None]:
    """The answer read by protobuf, and where its ExecuteResult lies in ``raw`` (all of it)."""
    return wire_result.execution_result_from(spb.ExecuteResult.FromString(raw)), (0, len(raw))


def _parse_burst(raw: bytes) -> tuple[ExecutionResult, tuple[int, int] | None]:
    """The answer read by protobuf, and where its ExecuteResult lies in ``raw`` when the
    ``result`` field is all of it (None otherwise)."""
    result = wire_result.execution_result_from(spb.BurstResponse.FromString(raw).result)
    if len(raw) < 2 or raw[0] != _BURST_RESULT:
        return result, None
    length, pos = read_varint(raw, 1, 5)
    return result, ((pos, len(raw)) if length >= 0 and pos + length == len(raw) else None)


def _pool_data(raw: bytes, pos: int, end: int) -> tuple[int, int, int] | None:
    """(pool index, start, end) of the data of the one output pool of the ExecuteResult in
    ``raw[pos:end]``, in the form a protobuf writer gives it (``pool_index`` then ``data``,
    each at most once); None for an answer of no or several output pools, or another form."""
    found = None
    while pos < end:
        tag, pos = read_varint(raw, pos, 5)
        if tag < 0:
            return None
        kind = tag & 7
        if kind == 0:
            value, pos = read_varint(raw, pos, 10)
            if value < 0:
                return None
        elif kind == 2:
            length, start = read_varint(raw, pos, 5)
            pos = start + length
            if length < 0 or pos > end:
                return None
            if tag == _OUTPUT_POOLS:
                if found is not None:
                    return None
                found = _data_of_pool(raw, start, pos)
                if found is None:
                    return None
        elif kind == 1:
            pos += 8
        elif kind == 5:
            pos += 4
        else:
            return None
    return found if pos == end else None


def _data_of_pool(raw: bytes, pos: int, end: int) -> tuple[int, int, int] | None:
    """(pool index, start, end) of the data of the PoolData in ``raw[pos:end]``."""
    index = 0
    if pos < end and raw[pos] == _POOL_INDEX:
        index, pos = read_varint(raw, pos + 1, 5)
        if not 0 <= index < _U32:
            return None
    if pos < end and raw[pos] == _POOL_DATA:
        length, start = read_varint(raw, pos + 1, 5)
        if length >= 0 and start + length == end:
            return index, start, end
    return None


# The stubs' deserializers: partials, which call the reading with no frame of their own on every
# call's path. Each raises protobuf's DecodeError for undecodable bytes (gRPC reports a failed
# deserializer as the call's INTERNAL status).

#: The ``ExecuteResult`` ``raw`` (module docstring), apart (:data:`Answer`: no result made for an
#: answer like one read before; ``fastanswer.whole`` makes it whole).
execute_answered: Callable[[bytes], Answer] = partial(_read, known=_EXECUTE_KNOWN, parse=_parse_execute)
#: The result of the ``BurstResponse`` ``raw``, apart (:data:`Answer`: no result made for an answer
#: like one read before — on gRPC's thread that reads the stream, for every message).
burst_answered: Callable[[bytes], Answer] = partial(_read, known=_BURST_KNOWN, parse=_parse_burst)

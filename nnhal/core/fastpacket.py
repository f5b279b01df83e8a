"""The fast burst's compact packets: a repeated request layout travels as an id and raw bytes.

The first execution of a request layout on a fast burst travels as a full
ExecuteRequest in a :data:`LEARN` packet (the HAL burst's memory cache idea,
applied to the whole layout). When the server validated it (the request plan
of the layout is learned: ``nnhal.server.request_plan``) and every pool is
inline, it answers :data:`LEARNED`: a layout id (u32, 0: not granted) then the
ExecuteResult. Later executions of the same layout — the same arguments and
the same inline pool lengths and sizes — send :data:`CALL`: the
:data:`CALL_HEADER` (layout id, flags, deadline remaining ns, loop timeout ns)
then the pools' bytes back to back, in pool order. The server answers a
:data:`CALL` whose execution completed or found an output too small (the
statuses with output shapes) with :data:`ANSWER`, otherwise with the usual
ExecuteResult (kind ``fastring.RESULT``). An ANSWER, little-endian:

- :data:`ANSWER_HEADER`: status u32, message bytes u32, time on device u64,
  time in driver u64, output shapes u32, output pools u32;
- the message (UTF-8);
- per output shape: rank u32, sufficient u32, then rank u32 dimensions;
- per output pool: pool index u32, length u32, then the bytes.

Every field is untrusted: the decoders raise :class:`PacketError` for a packet
too short or too long for what it declares, unknown flags, a length that does
not match its layout. The codec knows only canonical types (no protobuf).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from typing import NamedTuple

from nnhal.core import fastring
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import (
    NO_TIMING,
    ExecutionResult,
    InlinePool,
    MemoryPool,
    OutputShape,
    PoolData,
    RequestArgument,
    Timing,
)

#: Packet kinds beside ``fastring.REQUEST`` / ``fastring.RESULT``.
LEARN = 3
LEARNED = 4
CALL = 5
ANSWER = 6

#: How many layouts one fast burst remembers (a client typically uses one or two).
MAX_LAYOUTS = 16

CALL_HEADER = struct.Struct("<IIQQ")
LEARNED_HEADER = struct.Struct("<I")
ANSWER_HEADER = struct.Struct("<IIQQII")
_PAIR = struct.Struct("<II")
_UINT64_MAX = (1 << 64) - 1
#: CALL flags.
MEASURE = 1
HAS_DEADLINE = 2
_FLAGS = MEASURE | HAS_DEADLINE
#: The statuses an ANSWER carries (the others travel as an ExecuteResult, with their message).
ANSWERED = frozenset((ErrorStatus.NONE, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE))
_ANSWERED_BY_NUMBER = {int(s): s for s in ANSWERED}
_UNMEASURED = Timing()

LayoutKey = tuple[tuple[RequestArgument, ...], tuple[RequestArgument, ...], tuple[tuple[int, int], ...]]


class PacketError(ValueError):
    """A compact packet that does not hold together: nothing of it is used."""


def _nbytes(data: PoolData) -> int:
    return data.nbytes if isinstance(data, memoryview) else len(data)


def layout_key(
    inputs: tuple[RequestArgument, ...], outputs: tuple[RequestArgument, ...], pools: Sequence[MemoryPool]
) -> LayoutKey | None:
    """What identifies a request's layout; None unless every pool is inline (the only
    layouts a compact packet carries)."""
    sizes = []
    for p in pools:
        if not isinstance(p, InlinePool):
            return None
        n = _nbytes(p.data)
        sizes.append((n, max(p.size, n)))
    return inputs, outputs, tuple(sizes)


def remaining_ns(remaining_s: float | None) -> int | None:
    """A deadline's remainder as it travels (``wire.deadline_to``'s saturation); None for none.
    InvalidArgument for NaN."""
    if remaining_s is None:
        return None
    if math.isnan(remaining_s):
        raise InvalidArgument("the deadline is not a number (NaN)")
    ns = remaining_s * 1e9
    return 0 if ns <= 0 else _UINT64_MAX if ns >= _UINT64_MAX else int(ns)


def encode_call(
    layout: int, measure: bool, deadline_ns: int | None, loop_timeout_ns: int, datas: Sequence[PoolData]
) -> bytes:
    """A CALL packet's payload: the header and the pools' bytes."""
    return call_parts(layout, measure, deadline_ns, loop_timeout_ns, datas).joined()


def call_parts(
    layout: int, measure: bool, deadline_ns: int | None, loop_timeout_ns: int, datas: Sequence[PoolData]
) -> fastring.Gathered:
    """``encode_call``'s payload in parts (the header, then each pool's bytes), for a ring to
    copy without joining them first."""
    flags = (MEASURE if measure else 0) | (0 if deadline_ns is None else HAS_DEADLINE)
    return fastring.Gathered([CALL_HEADER.pack(layout, flags, deadline_ns or 0, loop_timeout_ns), *datas])


class Planned:
    """A request layout a client sends again and again (one numpy call plan): its layout key,
    the bytes of pools a compact call of it carries, and ``grant``: the queue (a serial) that
    granted it an id and that id, replaced in one assignment so that a thread reading it
    never pairs one queue's serial with another's id ((0, 0): none yet)."""

    __slots__ = ("body", "grant", "shape")

    def __init__(self, shape: LayoutKey, body: int) -> None:
        self.shape = shape
        self.body = body
        self.grant = (0, 0)


class Call(NamedTuple):
    """A decoded CALL: ``body`` is every pool's bytes back to back (a tuple: one is made per
    call, and a frozen dataclass costs several times a tuple to make)."""

    layout: int
    measure: bool
    deadline_ns: int | None
    loop_timeout_ns: int
    body: memoryview


def decode_call(payload: bytes | memoryview) -> Call:
    if len(payload) < CALL_HEADER.size:
        raise PacketError(f"a compact call of {len(payload)} bytes is shorter than its header")
    layout, flags, deadline, loop = CALL_HEADER.unpack_from(payload)
    if flags & ~_FLAGS:
        raise PacketError(f"unknown compact call flags {flags:#x}")
    body = (payload if type(payload) is memoryview else memoryview(payload))[CALL_HEADER.size :]
    return Call(layout, bool(flags & MEASURE), deadline if flags & HAS_DEADLINE else None, loop, body)


class Layout:
    """A layout the server validated: the request's arguments and its pools' lengths and sizes."""

    __slots__ = ("_sizes", "_total", "inputs", "outputs")

    def __init__(self, key: LayoutKey) -> None:
        self.inputs, self.outputs, self._sizes = key
        self._total = sum(n for n, _ in self._sizes)

    def pools(self, body: memoryview) -> tuple[InlinePool, ...]:
        """The request's pools cut from a CALL's body: views into it, not copies (the body is the
        reader's private copy of the packet, and immutable); PacketError unless its length is
        the layout's."""
        if len(body) != self._total:
            raise PacketError(f"a compact call carries {len(body)} bytes of pools; its layout has {self._total}")
        pools = []
        at = 0
        for n, size in self._sizes:
            pools.append(InlinePool(body[at : at + n], size))
            at += n
        return tuple(pools)


def encode_answer(result: ExecutionResult) -> bytes:
    """An ANSWER's payload (``result.status`` in :data:`ANSWERED`, no profile)."""
    return _with_pools(_answer_head(result), result.output_pools)


def _answer_head(result: ExecutionResult) -> bytes:
    """An ANSWER's bytes before its output pools: the header, the message, the output shapes."""
    message = result.message.encode()
    parts = [
        ANSWER_HEADER.pack(
            int(result.status),
            len(message),
            result.timing.time_on_device,
            result.timing.time_in_driver,
            len(result.output_shapes),
            len(result.output_pools),
        ),
        message,
    ]
    for shape in result.output_shapes:
        parts.append(_PAIR.pack(len(shape.dimensions), int(shape.is_sufficient)))
        parts.append(struct.pack(f"<{len(shape.dimensions)}I", *shape.dimensions))
    return b"".join(parts)


def _with_pools(head: bytes, pools: dict[int, PoolData]) -> bytes:
    """An ANSWER's payload: ``head`` (``_answer_head``), then each output pool."""
    parts: list[bytes | memoryview] = [head]
    for index, data in pools.items():
        parts.append(_PAIR.pack(index, _nbytes(data)))
        parts.append(data)
    return b"".join(parts)


class AnswerWriter:
    """``encode_answer`` for a stream of answers, most of them alike (the answers to one
    request layout's calls): it keeps the bytes before the output pools of the last answer
    it encoded, with the status, message, timing and output shapes they were made from and
    how many pools followed, and writes an answer made of the very same timing and shapes
    objects (a request plan hands its last shapes back while they hold; an unmeasured
    answer's timing is one shared value), the same status and message and as many pools
    with those bytes, so that only the pools are encoded. Not thread-safe: one per layout,
    used by its queue's serving thread."""

    __slots__ = ("_head", "_made")

    def __init__(self) -> None:
        self._head = b""
        self._made: tuple[ErrorStatus, str, object, object, int] | None = None

    def write(self, result: ExecutionResult) -> bytes:
        """``encode_answer(result)``."""
        pools = result.output_pools
        made = self._made
        if (
            made is None
            or made[2] is not result.output_shapes
            or made[3] is not result.timing
            or made[0] is not result.status
            or made[4] != len(pools)
            or made[1] != result.message
        ):
            self._head = _answer_head(result)
            self._made = (result.status, result.message, result.output_shapes, result.timing, len(pools))
        return _with_pools(self._head, pools)


def decode_answer(payload: bytes) -> ExecutionResult:
    """The result an ANSWER carries; PacketError for anything that does not hold together."""
    return _decode_answer(payload)[0]


class AnswerReader:
    """``decode_answer`` for a stream of answers, most of them alike: it remembers the
    structure of the last answer it decoded — the bytes from its header to its first output
    pool's bytes (status, message, timing, output shapes, the first pool's index and length),
    each later pool's index and length, its total length — and reads an answer whose bytes
    there are the same, of the same length, by slicing out its pools' bytes only. Comparing
    those bytes with ones that were checked field by field checks them as well: nothing of
    an answer is taken unchecked. Any other answer is decoded in full (and remembered). Not
    thread-safe: one per queue, read by its owner."""

    __slots__ = ("_end", "_head", "_marks", "_result", "_spans")

    def __init__(self) -> None:
        self._head: bytes | None = None
        self._end = 0
        self._marks: tuple[tuple[int, bytes], ...] = ()
        self._spans: tuple[tuple[int, int, int], ...] = ()
        self._result = ExecutionResult()

    def read(self, payload: bytes) -> ExecutionResult:
        """The result an ANSWER carries; PacketError for anything that does not hold together."""
        head = self._head
        if (
            head is not None
            and len(payload) == self._end
            and payload.startswith(head)
            and (not self._marks or all(payload[at : at + 8] == pair for at, pair in self._marks))
        ):
            r = self._result
            kept = self._spans
            if len(kept) == 1:  # the usual answer: one output pool
                index, start, stop = kept[0]
                pools: dict[int, PoolData] = {index: payload[start:stop]}
            else:
                pools = {index: payload[start:stop] for index, start, stop in kept}
            # The output shapes are the remembered tuple itself: a reader of the outputs may
            # know them by identity.
            return ExecutionResult(r.status, r.message, r.output_shapes, r.timing, pools)
        result, spans = _decode_answer(payload)
        self._head = payload[: spans[0][1]] if spans else payload
        self._end = len(payload)
        self._marks = tuple((start - 8, payload[start - 8 : start]) for _, start, _ in spans[1:])
        self._spans = tuple(spans)
        self._result = result
        return result


def _decode_answer(payload: bytes) -> tuple[ExecutionResult, list[tuple[int, int, int]]]:
    """``decode_answer``, with where each output pool's bytes are: (index, start, stop)."""
    end = len(payload)
    if end < ANSWER_HEADER.size:
        raise PacketError(f"an answer of {end} bytes is shorter than its header")
    status, mlen, on_device, in_driver, nshapes, npools = ANSWER_HEADER.unpack_from(payload)
    answered = _ANSWERED_BY_NUMBER.get(status)
    if answered is None:
        raise PacketError(f"an answer carries status {status}")
    at = ANSWER_HEADER.size
    if at + mlen + 8 * (nshapes + npools) > end:
        raise PacketError("an answer declares more than it carries")
    try:
        message = payload[at : at + mlen].decode()
    except UnicodeDecodeError:
        raise PacketError("an answer's message is not UTF-8") from None
    at += mlen
    shapes = []
    for _ in range(nshapes):
        if at + 8 > end:
            raise PacketError("an answer's output shapes run past its end")
        rank, sufficient = _PAIR.unpack_from(payload, at)
        at += 8
        if at + 4 * rank > end or sufficient > 1:
            raise PacketError("an answer's output shape does not hold together")
        dims = struct.unpack_from(f"<{rank}I", payload, at)  # a handful of dims: struct beats numpy
        at += 4 * rank
        shapes.append(OutputShape(dims, bool(sufficient)))
    pools: dict[int, PoolData] = {}
    spans = []
    for _ in range(npools):
        if at + 8 > end:
            raise PacketError("an answer's output pools run past its end")
        index, length = _PAIR.unpack_from(payload, at)
        at += 8
        if at + length > end or index in pools:
            raise PacketError("an answer's output pool does not hold together")
        pools[index] = payload[at : at + length]
        spans.append((index, at, at + length))
        at += length
    if at != end:
        raise PacketError(f"an answer has {end - at} bytes beyond what it declares")
    timing = _UNMEASURED if on_device == in_driver == NO_TIMING else Timing(on_device, in_driver)
    return ExecutionResult(answered, message, tuple(shapes), timing, pools), spans

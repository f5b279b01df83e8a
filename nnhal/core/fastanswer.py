"""The fast burst's ANSWER packets (:mod:`nnhal.core.fastpacket` describes the format): the
codec of a compact call's answer, and its writer and reader for a stream of answers that are
mostly alike (the answers to one request layout's calls).

Every field is untrusted: the decoders raise :class:`~nnhal.core.fastpacket.PacketError`
for a packet too short or too long for what it declares or that does not hold together.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Literal, overload

from nnhal.core import fastring
from nnhal.core.enums import ErrorStatus
from nnhal.core.fastpacket import ALIGN, PacketError, aligned, bytes_of
from nnhal.core.types import NO_TIMING, ExecutionResult, OutputShape, PoolData, Timing

ANSWER_HEADER = struct.Struct("<IIQQII")
#: The answer header's timing (time on device, time in driver) and where it starts: the one
#: field of the answers to a layout's measured calls that differs from call to call.
_TIMING = struct.Struct("<QQ")
_TIMING_AT = struct.calcsize("<II")
_TIMING_END = _TIMING_AT + _TIMING.size
_PAIR = struct.Struct("<II")
#: A pool's index and length followed by ``pad`` zero bytes, per ``pad`` below :data:`ALIGN`:
#: what comes before an answer's pool's bytes, written in one call (``AnswerWriter.write``).
_PAIRS_PADDED = tuple(struct.Struct(f"<II{pad}x") for pad in range(ALIGN))
#: The statuses an ANSWER carries (the others travel as an ExecuteResult, with their message).
ANSWERED = frozenset((ErrorStatus.NONE, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE))
_ANSWERED_BY_NUMBER = {int(s): s for s in ANSWERED}
_UNMEASURED = Timing()


def encode_answer(result: ExecutionResult) -> bytes:
    """An ANSWER's payload (``result.status`` in :data:`ANSWERED`, no profile)."""
    payload = answer_parts(result)
    return payload.joined() if isinstance(payload, fastring.Gathered) else payload


def answer_parts(result: ExecutionResult) -> bytes | fastring.Gathered:
    """``encode_answer``'s payload, a large one in parts (the output pools' bytes as they
    are), for a ring to copy without joining them first."""
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


def _with_pools(head: bytes, pools: dict[int, PoolData]) -> bytes | fastring.Gathered:
    """``answer_parts``: ``head`` (``_answer_head``), then each output pool — its index and
    length, padded so that its bytes start at a multiple of :data:`ALIGN`, then the bytes."""
    # The bytes before each pool's bytes (the head, the pair and pad) are one part, so a ring
    # checksums and copies two parts per pool, not three.
    parts: list[bytes | memoryview] = []
    before = head
    at = len(head)
    for index, data in pools.items():
        view, n = bytes_of(data)
        at += _PAIR.size
        pad = -at % ALIGN
        parts.append(before + _PAIRS_PADDED[pad].pack(index, n))
        parts.append(view)
        before = b""
        at += pad + n
    if before:
        parts.append(before)
    if at <= fastring.CHECKED_BYTES:
        return b"".join(parts)
    return fastring.Gathered(parts, at)


class AnswerWriter:
    """``answer_parts`` for a stream of answers, most of them alike (the answers to one
    request layout's calls): it keeps the bytes before the output pools of the last answer
    it encoded, with the status, message, timing and output shapes they were made from and
    how many pools followed, and writes an answer made of the very same timing and shapes
    objects (a request plan hands its last shapes back while they hold; an unmeasured
    answer's timing is one shared value), the same status and message and as many pools
    with those bytes, so that only the pools are encoded; an answer that differs from the
    last in its timing alone (a measured call's) gets the kept bytes with the new timing
    written in. Not thread-safe: one per layout, used by its queue's serving thread.

    In place (``places``): a large answer's output pools can be written by the execution
    straight into the result ring, where the answer will carry them; ``write`` then writes
    only the bytes around them (a new timing written into the ring's copy of the kept bytes,
    which stay as they were)."""

    __slots__ = ("_head", "_made", "_placed", "_pools", "_spots")

    def __init__(self) -> None:
        self._head = b""
        self._made: tuple[ErrorStatus, str, object, object, int] | None = None
        #: The last encoded answer's output pools: (index, length) each.
        self._pools: tuple[tuple[int, int], ...] = ()
        #: The places ``places`` gave: the reserved payload, its length, and per pool its
        #: index, where its index and length go, where its bytes go, its length, and the
        #: struct that writes its index, length and pad; and the dict of places it gave.
        self._placed: (
            tuple[memoryview, int, tuple[tuple[int, int, int, int, struct.Struct], ...], dict[int, memoryview]] | None
        ) = None
        #: The spots and length ``places`` worked out last, with the pools and the head's
        #: length they are for (the same while the answers' heads are: worked out once).
        self._spots: tuple[object, int, tuple[tuple[int, int, int, int, struct.Struct], ...], int] = ((), 0, (), 0)

    def places(self, reserve: Callable[[int], memoryview | None]) -> dict[int, memoryview] | None:
        """Where the next answer's output pools go in place: a writable view per pool index
        (of the last encoded answer's pools, at the offsets an answer with the same head has
        them) inside the payload ``reserve(length)`` gives (the result ring's
        ``fastring.Producer.reserve``); None when there was no such answer or no place. The
        next ``write`` writes the answer around them (``fastring.Reserved``) when it carries
        exactly those pools there under a head of the same length; otherwise it copies them
        out of the ring first — an answer whose pools are this very dict, which its caller
        must then not change, is known to be in place by that alone. The places are shared
        memory: the answer's reader may change them, which changes only what it reads."""
        self._placed = None
        if self._made is None or not self._pools:
            return None
        head, pools = len(self._head), self._pools
        known = self._spots
        if known[0] is not pools or known[1] != head:
            spots = []
            at = head
            for index, n in pools:
                start = aligned(at + _PAIR.size)
                spots.append((index, at, start, n, _PAIRS_PADDED[start - at - _PAIR.size]))
                at = start + n
            known = self._spots = (pools, head, tuple(spots), at)
        _, _, placed, length = known
        view = reserve(length)
        if view is None:
            return None
        places: dict[int, memoryview] = {}
        for index, _, start, n, _ in placed:  # a loop: a comprehension's own call costs more
            places[index] = view[start : start + n]
        self._placed = (view, length, placed, places)
        return places

    def write(self, result: ExecutionResult) -> bytes | fastring.Gathered | fastring.Reserved:
        """``answer_parts(result)``, or the answer written around its pools in their places
        (``places``)."""
        pools = result.output_pools
        made = self._made
        timing = result.timing
        if (
            made is None
            or made[2] is not result.output_shapes
            or made[0] is not result.status
            or made[4] != len(pools)
            or made[1] != result.message
        ):
            self._head = _answer_head(result)
            self._made = (result.status, result.message, result.output_shapes, timing, len(pools))
            self._pools = tuple((index, bytes_of(data)[1]) for index, data in pools.items())
            made = self._made
        placed, self._placed = self._placed, None
        if placed is not None:
            view, length, spots, given = placed
            head = self._head
            if len(pools) == len(spots) and len(head) == spots[0][1]:
                # The very places given (a caller that answers with the dict ``places`` gave,
                # untouched: ``memory.LanePools``), or each pool its place. A loop, not ``all``
                # of a generator: on a large answer's every call.
                for index, _, _, n, _ in () if pools is given else spots:
                    if not _in_place(pools.get(index), view, n):
                        break
                else:
                    view[: len(head)] = head
                    if made[3] is not timing:  # a measured call's: written in place, the head kept
                        _TIMING.pack_into(view, _TIMING_AT, timing.time_on_device, timing.time_in_driver)
                    for index, at, _, n, pair in spots:
                        # The pad is zeroed too: the answer's bytes are those ``answer_parts``
                        # writes, so a reader that remembers them (``AnswerReader``) knows the
                        # next one, whatever the ring held there.
                        pair.pack_into(view, at, index, n)
                    return fastring.Reserved(length)
            # Not the answer the places were made for: its pools leave the ring before the
            # answer is written there.
            pools = {i: bytes(d) if fastring.in_ring(d) else d for i, d in pools.items()}
        if made[3] is not timing:  # the kept head with this answer's timing written in
            head = self._head
            self._head = (
                head[:_TIMING_AT] + _TIMING.pack(timing.time_on_device, timing.time_in_driver) + head[_TIMING_END:]
            )
            self._made = (made[0], made[1], made[2], timing, made[4])
        return _with_pools(self._head, pools)


def _in_place(data: PoolData | None, view: memoryview, length: int) -> bool:
    """Whether an answer's pool is its place in ``view`` (``AnswerWriter.places``): output pools
    are in the ring's mapping only there."""
    return type(data) is memoryview and data.obj is view.obj and data.nbytes == length


#: An answer read apart (``AnswerReader.read(payload, True)``): what it says but its output pools
#: and timing — for an answer like the last, the reader's remembered result, shared (never
#: changed; its own pools and timing are the first such answer's) — then its output pools (a
#: dict of its own) and its timing (this answer's: a measured call's differs from call to
#: call). What a caller that makes its own outcome of the answer reads, with no
#: ``ExecutionResult`` made per call (``numpy_io.settle``).
Apart = tuple[ExecutionResult, dict[int, PoolData], Timing]


def apart_of(result: ExecutionResult) -> Apart:
    """A whole result as an answer read apart."""
    return result, result.output_pools, result.timing


def whole(answer: Apart) -> ExecutionResult:
    """The whole result of an answer read apart (the result itself when it is whole)."""
    r, pools, timing = answer
    if r.output_pools is pools and r.timing is timing:
        return r
    return ExecutionResult(r.status, r.message, r.output_shapes, timing, pools, r.profile, r.timeline)


def decode_answer(payload: bytes) -> ExecutionResult:
    """The result an ANSWER carries (its output pools views of ``payload``); PacketError for
    anything that does not hold together."""
    return _decode_answer(payload)[0]


class AnswerReader:
    """``decode_answer`` for a stream of answers, most of them alike: it remembers the
    structure of the last answer it decoded — the bytes from its header to its first output
    pool's bytes (status, message, timing, output shapes, the first pool's index and length),
    each later pool's index and length, its total length — and reads an answer whose bytes
    there are the same but for the timing (a measured call's, read from its bytes), of the
    same length, by slicing out its pools' bytes and that timing only. Comparing
    those bytes with ones that were checked field by field checks them as well: nothing of
    an answer is taken unchecked. Any other answer is decoded in full (and remembered). Not
    thread-safe: one per queue, read by its owner."""

    __slots__ = ("_cut", "_end", "_first", "_head", "_known", "_marks", "_result", "_spans", "_tail")

    def __init__(self) -> None:
        #: The remembered bytes up to the first pool's bytes (``_known``), and those before the
        #: timing and after it.
        self._known = b""
        self._head = b""
        self._tail = b""
        #: The remembered answer's length (-1: none yet).
        self._end = -1
        self._marks: tuple[tuple[int, bytes], ...] = ()
        self._spans: tuple[tuple[int, int, int], ...] = ()
        #: The one output pool's index and bytes (``_cut`` None: another number of pools).
        self._first = 0
        self._cut: slice | None = None
        self._result = ExecutionResult()

    @overload
    def read(self, payload: bytes, apart: Literal[False] = False) -> ExecutionResult: ...
    @overload
    def read(self, payload: bytes, apart: Literal[True]) -> Apart: ...
    @overload
    def read(self, payload: bytes, apart: bool) -> ExecutionResult | Apart: ...

    def read(self, payload: bytes, apart: bool = False) -> ExecutionResult | Apart:
        """The result an ANSWER carries (its output pools views of ``payload``), or with
        ``apart`` the answer read apart (:data:`Apart`: no result made for an answer like the
        last); PacketError for anything that does not hold together."""
        if len(payload) == self._end and (
            not self._marks or all(payload[at : at + 8] == pair for at, pair in self._marks)
        ):
            r = self._result
            if payload.startswith(self._known):  # the same timing too: one comparison
                timing = r.timing
            elif payload.startswith(self._head) and payload.startswith(self._tail, _TIMING_END):
                timing = _timing_of(*_TIMING.unpack_from(payload, _TIMING_AT))
            else:
                return self._learn(payload, apart)
            # Views of the answer's own bytes (a private copy nothing reuses), not copies.
            cut = self._cut
            if cut is not None:  # the usual answer: one output pool
                pools: dict[int, PoolData] = {self._first: memoryview(payload)[cut]}
            else:
                view = memoryview(payload)
                pools = {index: view[start:stop] for index, start, stop in self._spans}
            if apart:
                return r, pools, timing
            # The output shapes are the remembered tuple itself: a reader of the outputs may
            # know them by identity.
            return ExecutionResult(r.status, r.message, r.output_shapes, timing, pools)
        return self._learn(payload, apart)

    def _learn(self, payload: bytes, apart: bool) -> ExecutionResult | Apart:
        """``read`` of an answer unlike the last: decoded in full, and remembered."""
        result, spans, pairs = _decode_answer(payload)
        known = payload[: spans[0][1]] if spans else payload
        self._known = known
        self._head = known[:_TIMING_AT]
        self._tail = known[_TIMING_END:]
        self._end = len(payload)
        self._marks = tuple((at, payload[at : at + 8]) for at in pairs[1:])
        self._spans = tuple(spans)
        if len(spans) == 1:
            self._first, self._cut = spans[0][0], slice(spans[0][1], spans[0][2])
        else:
            self._cut = None
        self._result = result
        return apart_of(result) if apart else result


def _decode_answer(payload: bytes) -> tuple[ExecutionResult, list[tuple[int, int, int]], list[int]]:
    """``decode_answer``, with where each output pool's bytes are — (index, start, stop) —
    and where each pool's index and length are."""
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
    pairs = []
    view = memoryview(payload)  # the pools are views of the answer's bytes, not copies
    for _ in range(npools):
        if at + 8 > end:
            raise PacketError("an answer's output pools run past its end")
        index, length = _PAIR.unpack_from(payload, at)
        pairs.append(at)
        at = aligned(at + 8)
        if at + length > end or index in pools:
            raise PacketError("an answer's output pool does not hold together")
        pools[index] = view[at : at + length]
        spans.append((index, at, at + length))
        at += length
    if at != end:
        raise PacketError(f"an answer has {end - at} bytes beyond what it declares")
    return ExecutionResult(answered, message, tuple(shapes), _timing_of(on_device, in_driver), pools), spans, pairs


def _timing_of(on_device: int, in_driver: int) -> Timing:
    """The timing an answer's two timing fields stand for (one shared value when unmeasured)."""
    return _UNMEASURED if on_device == in_driver == NO_TIMING else Timing(on_device, in_driver)

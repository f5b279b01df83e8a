"""The fast burst's compact packets: a repeated request layout travels as an id and raw bytes.

The first execution of a request layout on a fast burst travels as a full
ExecuteRequest in a :data:`LEARN` packet (the HAL burst's memory cache idea,
applied to the whole layout). When the server validated it (the request plan
of the layout is learned: ``nnhal.server.request_plan``) and every pool is
inline, it answers :data:`LEARNED`: a layout id (u32, 0: not granted) then the
ExecuteResult. Later executions of the same layout — the same arguments and
the same inline pool lengths and sizes — send :data:`CALL`: the
:data:`CALL_HEADER` (layout id, flags — :data:`MEASURE`, :data:`HAS_DEADLINE`,
:data:`WAKE_EARLY` — deadline remaining ns, loop timeout ns) padded to
:data:`CALL_HEAD_BYTES`, then the *body*: the pools' bytes in pool order,
each pool that carries bytes starting at a multiple of :data:`ALIGN` from the body's
start (zero bytes pad the pool before it; :func:`body_spans`). The server answers a
:data:`CALL` whose execution completed or found an output too small (the
statuses with output shapes) with :data:`ANSWER`, otherwise with the usual
ExecuteResult (kind ``fastring.RESULT``). An ANSWER, little-endian:

- :data:`ANSWER_HEADER`: status u32, message bytes u32, time on device u64,
  time in driver u64, output shapes u32, output pools u32;
- the message (UTF-8);
- per output shape: rank u32, sufficient u32, then rank u32 dimensions;
- per output pool: pool index u32, length u32, zero bytes up to the next multiple of
  :data:`ALIGN` from the payload's start, then the bytes.

Alignment: a tensor's bytes start at a multiple of :data:`ALIGN` from their packet's
payload start (a session's queue pads the tag in front of a packet to a multiple of it
too: ``samehost.encode_tag``), so a private copy of a payload made at an aligned address
(any allocator's, 16 bytes or more) holds every tensor aligned for its element type, and
the copies into and out of it run at full speed. The pads' contents are not read.

The ANSWER's codec, writer and reader are :mod:`nnhal.core.fastanswer`'s.

Every field is untrusted: the decoders raise :class:`PacketError` for a packet
too short or too long for what it declares, unknown flags, a length that does
not match its layout. The codec knows only canonical types (no protobuf).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

from nnhal.core import fastring
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import (
    InlinePool,
    MemoryPool,
    PoolData,
    RequestArgument,
)

#: Packet kinds beside ``fastring.REQUEST`` / ``fastring.RESULT``.
LEARN = 3
LEARNED = 4
CALL = 5
ANSWER = 6

#: How many layouts one fast burst remembers (a client typically uses one or two).
MAX_LAYOUTS = 16

#: Where a tensor's bytes start in a packet: at a multiple of this many bytes (module docstring).
ALIGN = 64
CALL_HEADER = struct.Struct("<IIQQ")
#: The CALL header's bytes with its pad: where a call's body starts.
CALL_HEAD_BYTES = ALIGN
#: The header and its zero pad, packed in one go.
_CALL_HEAD = struct.Struct(f"{CALL_HEADER.format}{CALL_HEAD_BYTES - CALL_HEADER.size}x")
#: Zero bytes for pads before an aligned part.
ZEROS = bytes(ALIGN)
LEARNED_HEADER = struct.Struct("<I")
_UINT64_MAX = (1 << 64) - 1
#: CALL flags.
MEASURE = 1
HAS_DEADLINE = 2
#: The caller looks for its answer's doorbell a while after a ring that finds no answer yet:
#: it may be rung as soon as the answer is near (``doorbell.announce``), its wake-up then
#: overlapping the answer's last work, and rung again once the answer is written.
WAKE_EARLY = 4
_FLAGS = MEASURE | HAS_DEADLINE | WAKE_EARLY

LayoutKey = tuple[tuple[RequestArgument, ...], tuple[RequestArgument, ...], tuple[tuple[int, int], ...]]


class PacketError(ValueError):
    """A compact packet that does not hold together: nothing of it is used."""


def _nbytes(data: PoolData) -> int:
    return data.nbytes if isinstance(data, memoryview) else len(data)


def bytes_of(data: PoolData) -> tuple[bytes | memoryview, int]:
    """``data`` as bytes or a view of bytes (format ``B``: what ``fastring.Gathered`` takes with
    its length given), and its length in bytes."""
    if isinstance(data, memoryview):
        if data.format != "B":
            data = data.cast("B")
        return data, data.nbytes
    return data, len(data)


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


def aligned(at: int) -> int:
    """``at`` rounded up to a multiple of :data:`ALIGN`."""
    return (at + ALIGN - 1) & -ALIGN


def body_spans(lengths: Sequence[int]) -> tuple[tuple[tuple[int, int], ...], int]:
    """Where the bytes of pools carrying ``lengths`` bytes are in a CALL's body — (start,
    stop) per pool, a pool that carries bytes at a multiple of :data:`ALIGN` — and the
    body's length (the end of the last pool's bytes)."""
    spans = []
    at = 0
    for n in lengths:
        if n:
            at = aligned(at)
        spans.append((at, at + n))
        at += n
    return tuple(spans), at


def body_parts(datas: Sequence[PoolData]) -> list[PoolData]:
    """The pools' bytes as a CALL's body carries them: each with the zero pad in front of it
    that :func:`body_spans` puts there."""
    parts: list[PoolData] = []
    at = 0
    for data in datas:
        n = _nbytes(data)
        if n:
            pad = -at % ALIGN
            if pad:
                parts.append(ZEROS[:pad])
                at += pad
            parts.append(data)
            at += n
    return parts


def remaining_ns(remaining_s: float | None) -> int | None:
    """A deadline's remainder as it travels (``wire_deadline.deadline_to``'s saturation); None for none.
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
    """A CALL packet's payload: the header, its pad and the body (the pools' bytes, aligned)."""
    return call_parts(layout, measure, deadline_ns, loop_timeout_ns, datas).joined()


def call_parts(
    layout: int, measure: bool, deadline_ns: int | None, loop_timeout_ns: int, datas: Sequence[PoolData]
) -> fastring.Gathered:
    """``encode_call``'s payload in parts (the header with its pad, then each pool's bytes
    with theirs), for a ring to copy without joining them first."""
    return fastring.Gathered([call_head(layout, measure, deadline_ns, loop_timeout_ns), *body_parts(datas)])


def call_head(
    layout: int, measure: bool, deadline_ns: int | None, loop_timeout_ns: int, wake_early: bool = False
) -> bytes:
    """A CALL's header with its pad (:data:`CALL_HEAD_BYTES`): what comes before its body."""
    flags = (MEASURE if measure else 0) | (0 if deadline_ns is None else HAS_DEADLINE)
    if wake_early:
        flags |= WAKE_EARLY
    return _CALL_HEAD.pack(layout, flags, deadline_ns or 0, loop_timeout_ns)


class Planned:
    """A request layout a client sends again and again (one numpy call plan): its layout key,
    ``body``: the length of a compact call's body (:func:`body_spans`: the pools' bytes with
    the pads aligning them), and ``grant``: the queue (a serial) that
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
    #: The caller asked to be rung early (:data:`WAKE_EARLY`).
    wake_early: bool


#: A :class:`Call` from its fields in one tuple, made in C (``Call(...)`` runs the named tuple's
#: ``__new__``, a Python function: a frame per call on the queue thread's path).
_call = partial(tuple.__new__, Call)


def decode_call(payload: bytes | memoryview) -> Call:
    short = len(payload) < CALL_HEAD_BYTES  # one length taken: its header, its flags, then its pad
    if short and len(payload) < CALL_HEADER.size:
        raise PacketError(f"a compact call of {len(payload)} bytes is shorter than its header")
    layout, flags, deadline, loop = CALL_HEADER.unpack_from(payload)
    if flags & ~_FLAGS:
        raise PacketError(f"unknown compact call flags {flags:#x}")
    if short:
        raise PacketError(f"a compact call of {len(payload)} bytes is shorter than its padded header")
    body = (payload if type(payload) is memoryview else memoryview(payload))[CALL_HEAD_BYTES:]
    deadline_ns = deadline if flags & HAS_DEADLINE else None
    return _call((layout, bool(flags & MEASURE), deadline_ns, loop, body, bool(flags & WAKE_EARLY)))


class Layout:
    """A layout the server validated: the request's arguments and its pools' lengths and sizes."""

    __slots__ = ("_sizes", "_spans", "_total", "inputs", "outputs")

    def __init__(self, key: LayoutKey) -> None:
        self.inputs, self.outputs, self._sizes = key
        self._spans, self._total = body_spans([n for n, _ in self._sizes])

    def pools(self, body: memoryview) -> tuple[InlinePool, ...]:
        """The request's pools cut from a CALL's body: views into it, not copies (the body is the
        reader's private copy of the packet, and immutable); PacketError unless its length is
        the layout's."""
        if len(body) != self._total:
            raise PacketError(f"a compact call carries {len(body)} bytes of pools; its layout has {self._total}")
        return tuple(InlinePool(body[a:b], size) for (a, b), (_, size) in zip(self._spans, self._sizes))

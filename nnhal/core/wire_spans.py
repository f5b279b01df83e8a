"""Spans of a serialized protobuf message: where the bytes of one field along a path of
field numbers lie in it (:func:`field_spans`), and a message's :class:`Template` — its
length and its bytes outside those spans — that tells a later message of the same layout
(:meth:`Template.match`) without parsing it.

The burst stream's repeated messages (``nnhal.server.executions.repeat``) differ from one
another only in their inline pools' data: identical bytes outside the data, with the data
of the same lengths (their length varints are outside), parse to the same message but for
the data's contents — so a message that matches the template of a message the full path
accepted passes the same validation, and its data is read where the template says.

The walk reads protobuf's wire format only (varint, 64-bit, length-delimited, 32-bit; a
group, a field number 0 or a value running past its message is refused): nothing here
knows the generated classes. Every refusal is :class:`WireError`; nothing else is raised
for any input.
"""

from __future__ import annotations

from collections.abc import Sequence

#: ``BurstRequest.execute(3) -> ExecuteRequest.request(3) -> Request.pools(3) ->
#: MemoryPool.inline(1) -> InlineMemory.data(1)`` (protos/nnhal/proto/service.proto and
#: types.proto), ``pools`` the repeated one (:func:`field_spans`).
BURST_POOL_DATA = (3, 3, 3, 1, 1)
#: Where ``BURST_POOL_DATA`` repeats: ``Request.pools``.
BURST_POOLS_AT = 2
#: ``ExecuteRequest.request(3) -> Request.pools(3) -> MemoryPool.inline(1) ->
#: InlineMemory.data(1)``: a unary ``executeSynchronously_1_3`` message's
#: (``nnhal.server.executions.repeats``).
UNARY_POOL_DATA = (3, 3, 1, 1)
#: Where ``UNARY_POOL_DATA`` repeats: ``Request.pools``.
UNARY_POOLS_AT = 1

#: A field's bytes in a message: [start, end).
Span = tuple[int, int]

_LENGTH_DELIMITED = 2


class WireError(ValueError):
    """The bytes are not protobuf's wire format as :func:`field_spans` walks it, or the path's
    fields are not as it expects them (a field that does not repeat met twice)."""


def _varint(raw: bytes, pos: int, end: int) -> tuple[int, int]:
    """The varint at ``pos`` (below ``end``) and where it ends."""
    value = shift = 0
    while True:
        if pos >= end:
            raise WireError("a varint runs past its message")
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift >= 70:
            raise WireError("a varint longer than ten bytes")


def _fields(raw: bytes, start: int, end: int, number: int) -> list[Span]:
    """The bodies of field ``number`` (length-delimited) among the fields of the message in
    ``raw[start:end]``, in order; every field's wire structure checked on the way."""
    found: list[Span] = []
    pos = start
    while pos < end:
        key, pos = _varint(raw, pos, end)
        field, kind = key >> 3, key & 7
        if field == 0:
            raise WireError("a field numbered 0")
        if kind == 0:
            _, pos = _varint(raw, pos, end)
        elif kind == 1:
            pos += 8
        elif kind == _LENGTH_DELIMITED:
            n, pos = _varint(raw, pos, end)
            body = pos
            pos += n
            if field == number and pos <= end:
                found.append((body, pos))
        elif kind == 5:
            pos += 4
        else:
            raise WireError(f"wire type {kind} (a group or no type) is not walked")
        if field == number and kind != _LENGTH_DELIMITED:
            raise WireError(f"field {number} of the path is not length-delimited")
        if pos > end:
            raise WireError("a field runs past its message")
    return found


def field_spans(raw: bytes, path: Sequence[int], repeated: int) -> list[Span | None]:
    """Per occurrence of the repeated field ``path[repeated]`` (in order), the span of the
    last field of ``path`` inside it, or None where it is absent; each field of ``path`` a
    message (length-delimited) but the last, which is any length-delimited field. A field of
    ``path`` other than the repeated one met twice in its message is refused (protobuf
    would merge them: the spans would not say which bytes it keeps), so is one met as
    another wire type. WireError for anything the walk refuses."""
    entries: list[Span | None] = [(0, len(raw))]
    for depth, number in enumerate(path):
        below: list[Span | None] = []
        for entry in entries:
            if entry is None:
                below.append(None)
                continue
            found = _fields(raw, entry[0], entry[1], number)
            if depth == repeated:
                below.extend(found)
            elif len(found) > 1:
                raise WireError(f"field {number} occurs {len(found)} times where it does not repeat")
            elif found:
                below.append(found[0])
            elif depth > repeated:
                below.append(None)
        entries = below
    return entries


class Template:
    """A message's length and its bytes outside ``spans`` (in order, not overlapping, within
    it): :meth:`match` tells a message of the same layout, :meth:`views` its spans' bytes."""

    __slots__ = ("length", "segments", "spans", "starts")

    def __init__(self, raw: bytes, spans: Sequence[Span]) -> None:
        self.length = len(raw)
        self.spans = tuple(spans)
        segments: list[bytes] = []
        starts: list[int] = []
        at = 0
        for a, b in self.spans:
            if not at <= a <= b <= self.length:
                raise WireError("a template's spans are out of order or outside its message")
            segments.append(raw[at:a])
            starts.append(at)
            at = b
        segments.append(raw[at:])
        starts.append(at)
        #: The bytes between the spans and where each starts (a match compares them in place).
        self.segments = tuple(segments)
        self.starts = tuple(starts)

    def match(self, raw: bytes) -> bool:
        """Whether ``raw`` is of the template's length with identical bytes outside its spans
        (C calls only: no slice of ``raw`` made)."""
        return len(raw) == self.length and all(map(raw.startswith, self.segments, self.starts))

    def views(self, raw: bytes) -> list[memoryview]:
        """``raw``'s bytes in each span (views: no copy)."""
        view = memoryview(raw)
        return [view[a:b] for a, b in self.spans]

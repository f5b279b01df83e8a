"""The rings of the same-host fast path (DESIGN §2): region layout, packets and their checks.

A fast burst's queue is one shared region (a sealed memfd the server makes, so
that neither side can shrink it under the other's mapping) holding two
single-producer single-consumer byte rings: requests (client to server) and
results (server to client). Layout, little-endian:

=======  ===========================================================
offset   contents
=======  ===========================================================
0        magic ``b"NNFQ"``, version u32, ring bytes u32
64       request ring: head u64 (bytes ever written, by its producer)
128      request ring: tail u64 (bytes ever consumed, by its consumer)
192      result ring: head u64
256      result ring: tail u64
4096     request ring data (ring bytes), then result ring data
=======  ===========================================================

A packet is a 16-byte header — payload length u32, sequence u32 (the producer's
count from 0, wrapping), CRC-32 of the payload's first :data:`CHECKED_BYTES` bytes
u32, kind u32 — then the payload, padded to a multiple of 16 so that a header never
straddles the ring's end (a small payload may: it goes on at the ring's start). A packet
of up to ``ring_bytes - 16`` payload bytes fits an empty ring. A payload of
:data:`DIRECT_BYTES` or more that would run past the ring's end starts at the ring's
start instead when there is room: a :data:`FILL` packet (no checksum, its bytes
never read) takes the rest of the ring before it, so that the consumer can read it
in one piece, in place (``direct`` kinds).

What the checksum is for: catching a producer that is out of step with its
consumer (a bug, a packet written over a stale index), not an attacker — the peer
writes the shared memory anyway and could give any bytes a matching checksum, so
safety rests on the consumer's private copy and on every decoder checking every
field. It covers the part of a payload that packets give structure to (every
header, a small packet whole) and stops there: the raw tensor bytes of a large
packet are opaque to both sides, and checksumming them cost more than the rest
of the packet's way through the ring.

Trust: each side keeps its own index privately and only reads the peer's from
shared memory, so a peer can lie only about its own index and the bytes it
wrote. The consumer copies a packet out before checking it (the peer could
change it meanwhile) — but for a large packet of a kind whose payload is mostly
opaque tensor bytes (``direct`` kinds, :data:`DIRECT_BYTES` or more, not wrapping
past the ring's end): that one is handed out as a view of the ring, which stays
the consumer's until :meth:`Consumer.release` (its tail is published only then), so that
each tensor's bytes are copied once, straight to where they are used. What such a
view's reader must keep to (DESIGN §2): every field that gives the packet structure
(a tag, a header, a length, an id) is read once into a private value before it is
checked and used — never checked in the ring and read again — and the payload's
opaque bytes are only ever copied out, once, into memory the peer cannot write.
A peer changing them meanwhile only changes its own input values, which it could
have sent anyway. The consumer refuses with :class:`RingError` a head behind its tail
or more than the ring ahead of it, a length past the limit or past what was
written, an unexpected sequence number or kind, a wrong checksum. The producer
refuses a tail outside ``[head - ring_bytes, head]``. After a RingError the ring
is usable again: ``resync`` drops whatever is pending and follows the producer.
Neither side blocks here: waking the peer is the doorbell's job
(:mod:`nnhal.core.doorbell`).
"""

from __future__ import annotations

import itertools
import mmap
import struct
import sys
import zlib
from collections.abc import Collection, Sequence
from typing import Generic, TypeVar, final

MAGIC = b"NNFQ"
#: 2: the checksum covers the payload's first CHECKED_BYTES bytes (1: all of it). 3: the
#: compact packets' tensors start aligned in their payloads (``fastpacket.ALIGN``). 4: a
#: large payload does not wrap when a FILL packet can take the ring's end. 5: a compact call may
#: ask to be rung early (``fastpacket.WAKE_EARLY``).
VERSION = 5
#: How many of a payload's first bytes the packet's checksum covers (module docstring).
CHECKED_BYTES = 4096
#: From how many payload bytes a packet of a ``direct`` kind is handed out as a view of the
#: ring (``Consumer.read``): below it a private copy costs less than the view's bookkeeping.
DIRECT_BYTES = 16 << 10
#: Where the rings' data starts; everything before it is the region's header.
DATA_OFFSET = 4096
#: Ring sizes: a multiple of the page size, within these bounds.
MIN_RING_BYTES = 4096
MAX_RING_BYTES = 16 << 20
DEFAULT_RING_BYTES = 1 << 20
#: The secret a client presents to collect its queue (DESIGN §2: authorised through gRPC).
TOKEN_BYTES = 32
#: What the server's handover sends with the descriptors: the magic and the ring size.
HANDOVER = struct.Struct("<4sI")
#: Descriptors handed over, in this order: the region's memfd, the request doorbell's write
#: end, the result doorbell's read end and its write end (the client's self-wake).
HANDOVER_FDS = 4

#: Packet kinds.
REQUEST = 1
RESULT = 2
#: The ring's end skipped so that the next (large) packet starts at the ring's start: read
#: by the consumer itself, whatever kinds it takes, never handed out.
FILL = 15

_crc32 = zlib.crc32
_SEQ_MASK = 0xFFFFFFFF
_REGION_HEADER = struct.Struct("<4sII")
_INDEX = struct.Struct("<Q")
_PACKET = struct.Struct("<IIII")
HEADER_BYTES = _PACKET.size
_ALIGN = HEADER_BYTES - 1
_REQUEST_HEAD, _REQUEST_TAIL, _RESULT_HEAD, _RESULT_TAIL = 64, 128, 192, 256


class RingError(Exception):
    """The peer broke the ring protocol (a corrupt index or packet): nothing of it is used."""


def region_bytes(ring_bytes: int) -> int:
    """The size of a region with two rings of ``ring_bytes``."""
    return DATA_OFFSET + 2 * ring_bytes


def grant_ring_bytes(asked: int) -> int:
    """The ring size a server grants for ``asked`` (0: the default): clamped, page-rounded."""
    size = asked or DEFAULT_RING_BYTES
    size = min(max(size, MIN_RING_BYTES), MAX_RING_BYTES)
    return -(-size // MIN_RING_BYTES) * MIN_RING_BYTES


#: ``madvise``'s MADV_POPULATE_WRITE (Linux 5.14; Python names it from 3.12): a side's whole
#: mapping of the region faulted in at once, its content untouched (``_Ring._populate``).
_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


def write_region_header(mm: mmap.mmap, ring_bytes: int) -> None:
    _REGION_HEADER.pack_into(mm, 0, MAGIC, VERSION, ring_bytes)


def check_region(mm: mmap.mmap, ring_bytes: int) -> None:
    """RingError unless ``mm`` is a region of this version with rings of ``ring_bytes``."""
    if len(mm) != region_bytes(ring_bytes):
        raise RingError(f"the queue region has {len(mm)} bytes, expected {region_bytes(ring_bytes)}")
    magic, version, size = _REGION_HEADER.unpack_from(mm, 0)
    if magic != MAGIC or version != VERSION or size != ring_bytes:
        raise RingError(f"not a version {VERSION} queue region of {ring_bytes}-byte rings")


class Gathered:
    """A packet's payload in parts (a header, then an execution's pools), which the producer
    checksums and copies into the ring one after the other: the parts of a large payload are
    never joined into one buffer first (a payload of at most :data:`CHECKED_BYTES` is: one
    copy of a few parts costs less than a checksum and a copy per part). ``len()`` is the
    payload's length in bytes."""

    __slots__ = ("_length", "parts")

    def __init__(self, parts: Sequence[bytes | bytearray | memoryview], length: int | None = None) -> None:
        """``length``: the parts' total bytes, when the caller knows it (then every memoryview
        among them must be of bytes already)."""
        if length is None:
            self.parts = [p.cast("B") if isinstance(p, memoryview) else p for p in parts]
            self._length = sum(map(len, self.parts))
        else:
            self.parts = list(parts) if type(parts) is not list else parts
            self._length = length

    def __len__(self) -> int:
        return self._length

    def joined(self) -> bytes:
        return b"".join(self.parts)


@final
class Reserved:
    """A payload of ``length`` bytes its producer already wrote into the ring, in the place
    ``Producer.reserve`` gave for it. ``len()`` is its length."""

    __slots__ = ("length",)

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length


#: What a producer writes as one packet's payload.
Payload = bytes | bytearray | memoryview | Gathered | Reserved


def _padded(length: int) -> int:
    return HEADER_BYTES + (-(-length // HEADER_BYTES)) * HEADER_BYTES


def checksum(payload: bytes | bytearray | memoryview) -> int:
    """The checksum a packet carrying ``payload`` (bytes, or a view of bytes) has."""
    # One slice whatever the length: a payload of bytes within the checked length is itself
    # (no copy), a view's slice is a view; a longer one's slice copies at most the checked bytes.
    return _crc32(payload[:CHECKED_BYTES])


def _gathered_checksum(parts: Sequence[bytes | bytearray | memoryview]) -> int:
    crc = 0
    left = CHECKED_BYTES
    for part in parts:
        n = len(part)
        if n >= left:
            return zlib.crc32(memoryview(part)[:left], crc)
        crc = zlib.crc32(part, crc)
        left -= n
    return crc


class _Ring:
    """One ring of a region, seen from one side."""

    def __init__(self, mm: mmap.mmap, ring_bytes: int, first: bool) -> None:
        if ring_bytes % HEADER_BYTES or ring_bytes < MIN_RING_BYTES:
            raise ValueError(f"ring_bytes must be a multiple of {HEADER_BYTES} and at least {MIN_RING_BYTES}")
        self._mm = mm
        self.ring_bytes = ring_bytes
        #: The largest payload one packet may carry.
        self.max_payload = ring_bytes - HEADER_BYTES
        self._data = DATA_OFFSET if first else DATA_OFFSET + ring_bytes
        #: Where the ring's data ends in the region: a payload ending there or before it
        #: does not wrap.
        self._data_end = self._data + ring_bytes
        self._head_at = _REQUEST_HEAD if first else _RESULT_HEAD
        self._tail_at = _REQUEST_TAIL if first else _RESULT_TAIL

        if sys.byteorder != "little":
            raise RingError("the queue region is little-endian; this machine is not")
        # The indexes are read and written whole, each one aligned 8-byte load or store through
        # a native view: struct's little-endian packers write byte by byte, so a peer reading
        # meanwhile could see a torn index (part old, part new) and take it for a corrupt one.
        self._slots = memoryview(mm)[:DATA_OFFSET].cast("Q")
        self._head_slot = self._head_at // _INDEX.size
        self._tail_slot = self._tail_at // _INDEX.size
        #: The ring's data, which views in place are cut from (``Consumer.read``, ``Producer.reserve``).
        self._area = memoryview(mm)[self._data : self._data + ring_bytes]
        #: Whether this side's mapping was faulted in (``_populate``).
        self._populated = False

    def _index(self, at: int) -> int:
        value: int = self._slots[at // _INDEX.size]
        return value

    def _populate(self) -> bool:
        """Fault in this side's whole mapping of the region, once, at the first packet of
        :data:`DIRECT_BYTES` or more it writes or reads (issue #27). Mapped lazily, a fresh
        ring's first lap faulted on every 4 KiB a mid-size packet crossed, on each side (the
        face model's 192 KiB calls about a dozen faults a side per call for their first ≈ 20
        calls); a queue of small packets never pays for the pages it does not touch. Where the
        kernel cannot (before Linux 5.14), the pages fault in as they are touched. True (a
        reader's test of a large packet calls it in its condition)."""
        self._populated = True
        try:
            self._mm.madvise(_POPULATE_WRITE)
        except (OSError, ValueError):
            pass
        return True

    def close(self) -> None:
        """Release this side's views of the region (before the region's mapping is closed)."""
        self._slots.release()
        self._area.release()


class Producer(_Ring):
    """The writing side of one ring: ``request=True`` for the request ring (the client's)."""

    def __init__(self, mm: mmap.mmap, ring_bytes: int, request: bool) -> None:
        super().__init__(mm, ring_bytes, request)
        self._head = self._index(self._head_at)
        #: The sequence numbers of its packets, wrapped (``next`` of it: one C call per packet).
        self._seqs = map(_SEQ_MASK.__and__, itertools.count())
        #: The place ``reserve`` gave: (head then, payload length, where its packet starts).
        self._reserved: tuple[int, int, int] | None = None

    def reserve(self, length: int) -> memoryview | None:
        """A writable view of the ring where the payload of the next packet of ``length``
        bytes (:data:`DIRECT_BYTES` or more) will be, when it fits now in one piece; None
        otherwise. Its producer may write (part of) the payload there and then ``write`` the
        packet with a :class:`Reserved` payload of that length, before writing anything else
        (which gives the place up). The consumer's peer may read and write the place too: it is
        in shared memory, not yet published."""
        size, head = self.ring_bytes, self._head
        self._reserved = None
        if length < DIRECT_BYTES or length > self.max_payload:
            return None
        if not self._populated:
            self._populate()
        used = head - self._slots[self._tail_slot]
        if not 0 <= used <= size:
            return None  # ``write`` says what is wrong
        need = HEADER_BYTES + ((length + _ALIGN) & ~_ALIGN)
        pos = head % size
        if pos + need > size:  # it would run past the end: after a fill, if both fit
            if size - used < size - pos + need:
                return None
            pos = 0
        elif size - used < need:
            return None
        self._reserved = (head, length, pos)
        return self._area[pos + HEADER_BYTES : pos + HEADER_BYTES + length]

    def fits(self, length: int) -> bool:
        """Whether a payload of ``length`` bytes can ever travel in one packet."""
        return length <= self.max_payload

    def write(self, kind: int, payload: Payload, *, crc: int | None = None) -> None:
        """Append one packet; RingError when it does not fit (the consumer is behind, or it is
        larger than ``max_payload``) or the consumer's index is corrupt. ``crc`` overrides
        the checksum (tests of the consumer's checks)."""
        if type(payload) is not bytes:  # bytes first: most answers, and the cheapest test
            if type(payload) is Reserved:
                self._write_reserved(kind, payload.length, crc)
                return
            if isinstance(payload, Gathered):
                if payload._length > CHECKED_BYTES:  # its length, without a call of ``len``
                    self._write_gathered(kind, payload, crc)
                    return
                payload = b"".join(payload.parts)  # a small packet: one copy of a few parts is cheaper
            elif isinstance(payload, memoryview):
                payload = payload.cast("B")
        size, mm, data, head = self.ring_bytes, self._mm, self._data, self._head
        self._reserved = None
        length = len(payload)
        used = head - self._slots[self._tail_slot]
        need = HEADER_BYTES + ((length + _ALIGN) & ~_ALIGN)  # _padded(length), inlined: a hot path
        # One test refuses all three (a payload past the limit needs more than the ring, a
        # consumer's index ahead of the head or more than the ring behind it leaves less
        # room than any packet needs): ``_refusal`` says which.
        if used < 0 or size - used < need:
            raise RingError(self._refusal(length, used))
        pos = head % size
        if length >= DIRECT_BYTES:
            head = self._start(head, used, need)
            pos = head % size
        at = data + pos
        if crc is None:
            crc = checksum(payload)
        _PACKET.pack_into(mm, at, length, next(self._seqs), crc, kind)
        at += HEADER_BYTES
        if at + length <= self._data_end:
            mm[at : at + length] = payload
        else:  # it wraps past the ring's end (or its header ended the ring: it starts at the start)
            start = (at - data) % size
            first = size - start
            if length <= first:
                mm[data + start : data + start + length] = payload
            else:
                mm[data + start : data + size] = payload[:first]
                mm[data : data + length - first] = payload[first:]
        self._head = head = head + need
        self._slots[self._head_slot] = head

    def _refusal(self, length: int, used: int) -> str:
        """Why ``write`` refuses a payload of ``length`` bytes with ``used`` bytes of the ring
        unread (the first that holds: too large, a corrupt index, a full ring)."""
        if length > self.max_payload:
            return f"a packet of {length} bytes exceeds the ring's limit of {self.max_payload}"
        if not 0 <= used <= self.ring_bytes:
            return "the consumer's ring index is corrupt"
        return f"the ring is full ({used} of {self.ring_bytes} bytes unread)"

    def _write_reserved(self, kind: int, length: int, crc: int | None) -> None:
        """``write`` of a payload already in the place ``reserve`` gave for it."""
        reserved, self._reserved = self._reserved, None
        head = self._head
        if reserved is None or reserved[0] != head or reserved[1] != length:
            raise RingError("a reserved payload written without its place")
        pos = reserved[2]
        if pos != head % self.ring_bytes:  # the place is at the ring's start, after a fill
            used = head - self._slots[self._tail_slot]
            head = self._fill(head, used, HEADER_BYTES + ((length + _ALIGN) & ~_ALIGN))
            if head % self.ring_bytes:  # the consumer cannot have taken room back: a bug
                raise RingError("the reserved place is no longer free")
        start = pos + HEADER_BYTES
        if crc is None:
            crc = checksum(self._area[start : start + length])
        _PACKET.pack_into(self._mm, self._data + pos, length, next(self._seqs), crc, kind)
        self._head = head = head + HEADER_BYTES + ((length + _ALIGN) & ~_ALIGN)
        self._slots[self._head_slot] = head

    def _start(self, head: int, used: int, need: int) -> int:
        """The head a packet of :data:`DIRECT_BYTES` or more (``need`` bytes with its header)
        starts at: after a fill when it would run past the ring's end (``_fill``). The mapping
        is populated first (``_populate``)."""
        if not self._populated:
            self._populate()
        if head % self.ring_bytes + need > self.ring_bytes:
            head = self._fill(head, used, need)
        return head

    def _fill(self, head: int, used: int, need: int) -> int:
        """Where a packet of ``need`` bytes (with its header) that would run past the ring's
        end starts: the ring's start, after a FILL packet written over the rest of the ring
        (published with the packet), when both fit; else ``head`` itself (it wraps)."""
        size = self.ring_bytes
        fill = size - head % size
        if size - used < fill + need:
            return head
        _PACKET.pack_into(self._mm, self._data + head % size, fill - HEADER_BYTES, next(self._seqs), 0, FILL)
        return head + fill

    def _write_gathered(self, kind: int, payload: Gathered, crc: int | None) -> None:
        """``write`` of a payload in parts: the same packet, each part copied in turn. A packet
        in one piece (every large one the ring's start can take) is checksummed from the bytes
        it was copied to — the producer's own, not yet published: one checksum of one
        buffer, not one per part."""
        size, area, head = self.ring_bytes, self._area, self._head
        self._reserved = None
        length = payload._length
        used = head - self._slots[self._tail_slot]
        need = HEADER_BYTES + ((length + _ALIGN) & ~_ALIGN)
        if used < 0 or size - used < need:  # as ``write``
            raise RingError(self._refusal(length, used))
        if length >= DIRECT_BYTES:
            head = self._start(head, used, need)
        pos = head % size
        at = start = pos + HEADER_BYTES
        if start + length <= size:
            for part in payload.parts:
                end = at + len(part)
                area[at:end] = part
                at = end
            if crc is None:
                crc = checksum(area[start:at])
        else:
            if crc is None:
                crc = _gathered_checksum(payload.parts)
            at %= size
            for part in payload.parts:
                n = len(part)
                first = size - at
                if n <= first:
                    area[at : at + n] = part
                else:
                    view = memoryview(part)
                    area[at:size] = view[:first]
                    area[: n - first] = view[first:]
                at = (at + n) % size
        _PACKET.pack_into(area, pos, length, next(self._seqs), crc, kind)
        self._head = head = head + need
        self._slots[self._head_slot] = head


def in_ring(payload: bytes | bytearray | memoryview) -> bool:
    """Whether ``payload`` is (a view cut from) a packet :meth:`Consumer.read` handed out as
    a view of its ring — shared memory the peer writes — rather than a private copy."""
    return type(payload) is memoryview and type(payload.obj) is mmap.mmap


#: What a consumer's ``read`` hands out: ``bytes`` for one with no ``direct`` kinds, else
#: ``bytes | memoryview`` (how its owner annotates it: the type checker's concern only).
P = TypeVar("P", bytes, bytes | memoryview)


class Consumer(_Ring, Generic[P]):
    """The reading side of one ring: ``request=True`` for the request ring (the server's).
    Packets of the ``direct`` kinds may be handed out as views of the ring (``read``)."""

    def __init__(
        self, mm: mmap.mmap, ring_bytes: int, request: bool, kinds: Collection[int], direct: Collection[int] = ()
    ) -> None:
        super().__init__(mm, ring_bytes, request)
        #: The kinds it hands out: never FILL, which it reads itself.
        self._kinds = frozenset(kinds) - {FILL}
        self._direct = frozenset(direct)
        self._tail = self._index(self._tail_at)
        self._seq: int | None = 0
        #: Whether the tail of a packet handed out as a view is not published yet (``release``).
        self._held = False

    def pending(self) -> bool:
        """Whether the producer's index moved past what was read (a packet, or a corrupt index,
        waits): one load from shared memory, for a consumer watching the ring. It orders
        nothing: read the packet only after a synchronising step that followed its
        publication (the producer's doorbell byte, :mod:`nnhal.core.doorbell`)."""
        return bool(self._slots[self._head_slot] != self._tail)

    def read(self) -> tuple[int, P] | None:
        """The next packet's kind and payload, None when the ring is empty; RingError for
        anything the producer got wrong (module docstring). The payload is a private copy,
        but for a packet of a ``direct`` kind of :data:`DIRECT_BYTES` or more that does not
        wrap: a read-only view of the ring (``in_ring``), the consumer's until ``release``
        or the next ``read`` (which releases it first); its reader keeps to the module's
        rules for such views."""
        if self._held:
            self.release()
        tail = self._tail
        avail = self._slots[self._head_slot] - tail
        if avail == 0:  # first, before the rest is loaded: a serving thread's last look of a turn
            return None
        size = self.ring_bytes
        pos = tail % size
        # Offsets in the ring's data (``_area``), the region's only where a copy is cut.
        length, seq, crc, kind = _PACKET.unpack_from(self._area, pos)  # in the ring whatever the head
        need = HEADER_BYTES + ((length + _ALIGN) & ~_ALIGN)  # _padded(length), inlined: a hot path
        # One test refuses a head more than the ring ahead (or behind: ``need`` is more than any
        # negative count) and a length past what was written (or past the limit: it needs more
        # than the ring); ``_refusal`` says which.
        if need > avail or avail > size:
            raise RingError(self._refusal(length, avail))
        due = self._seq  # the sequence number due, already wrapped (None after a resync)
        if seq != due and due is not None:
            raise RingError(f"packet {seq} arrived where packet {due} was due")
        if kind not in self._kinds:  # FILL never is among them
            if kind != FILL:
                raise RingError(f"unexpected packet kind {kind}")
            if pos + need != size or need == avail:
                raise RingError("a fill packet that does not end at the ring's end, or ends the ring's packets")
            self._tail = tail + need
            self._seq = (seq + 1) & 0xFFFFFFFF
            self._slots[self._tail_slot] = self._tail
            return self.read()
        start = pos + HEADER_BYTES
        end = start + length
        data = self._data
        if end <= size:
            if length >= DIRECT_BYTES and (self._populated or self._populate()) and kind in self._direct:
                view = self._area[start:end].toreadonly()
                if checksum(view) != crc:
                    raise RingError("a packet's checksum does not match its bytes")
                self._tail = tail + need
                self._seq = (seq + 1) & 0xFFFFFFFF
                self._held = True  # published by ``release``: the view's bytes are still read
                return kind, view  # type: ignore[return-value]  # P admits views with direct kinds
            payload = self._mm[data + start : data + end]
        else:  # it wraps past the ring's end (or its header ended the ring: it starts at the start)
            mm = self._mm
            start %= size
            first = size - start
            if length <= first:
                payload = mm[data + start : data + start + length]
            else:
                payload = mm[data + start : data + size] + mm[data : data + length - first]
        if checksum(payload) != crc:
            raise RingError("a packet's checksum does not match its bytes")
        self._tail = tail = tail + need
        self._seq = (seq + 1) & 0xFFFFFFFF
        self._slots[self._tail_slot] = tail
        return kind, payload  # type: ignore[return-value]  # bytes: both of P's types admit it

    def _refusal(self, length: int, avail: int) -> str:
        """Why ``read`` refuses a packet of ``length`` bytes with ``avail`` bytes pending (a
        corrupt index first)."""
        if not HEADER_BYTES <= avail <= self.ring_bytes:
            return f"the producer's ring index is corrupt ({avail} bytes pending in a {self.ring_bytes}-byte ring)"
        return f"a packet claims {length} bytes; {avail - HEADER_BYTES} were written"

    def release(self) -> None:
        """Done with the packet last handed out as a view: its bytes are the producer's again
        (the tail published). Idempotent; the view must not be read afterwards."""
        if self._held:
            self._held = False
            self._slots[self._tail_slot] = self._tail

    def resync(self) -> None:
        """Drop everything pending and follow the producer from its current head (the next
        packet's sequence number is taken as it comes)."""
        self._held = False
        self._tail = self._index(self._head_at)
        self._seq = None
        self._slots[self._tail_slot] = self._tail

"""The fast path's rings: packets round-trip (also across the ring's end), and every
broken promise of the peer is a RingError that leaves the ring usable."""

from __future__ import annotations

import mmap
import struct

import pytest

from nnhal.core import fastring
from nnhal.core.fastring import REQUEST, RESULT, Consumer, Producer, RingError

RING = fastring.MIN_RING_BYTES


@pytest.fixture
def region() -> mmap.mmap:
    mm = mmap.mmap(-1, fastring.region_bytes(RING))
    fastring.write_region_header(mm, RING)
    return mm


def _pair(mm: mmap.mmap) -> tuple[Producer, Consumer[bytes]]:
    return Producer(mm, RING, True), Consumer(mm, RING, True, (REQUEST,))


def test_packets_round_trip_across_the_end_of_the_ring(region: mmap.mmap) -> None:
    prod, cons = _pair(region)
    assert cons.read() is None
    for i in range(40):  # 40 x ~1 KiB through a 4 KiB ring: wraps many times, mid-payload too
        payload = bytes([i]) * (1000 + i)
        prod.write(REQUEST, payload)
        assert cons.read() == (REQUEST, payload)
    assert cons.read() is None


def test_a_payload_in_parts_is_the_packet_of_its_joined_bytes(region: mmap.mmap) -> None:
    prod, cons = _pair(region)
    for i in range(40):  # parts of several sizes, the ring's end falling inside and between them
        parts: list[bytes | bytearray | memoryview] = [
            bytes([i]) * 7,
            memoryview(bytes(range(200)) * (2 + i % 5)),
            bytearray(b"z" * (13 * i)),
            b"",
        ]
        gathered = fastring.Gathered(parts)
        assert len(gathered) == sum(len(p) for p in parts)
        prod.write(REQUEST, gathered)
        assert cons.read() == (REQUEST, gathered.joined())
    with pytest.raises(RingError, match="exceeds"):
        prod.write(REQUEST, fastring.Gathered([bytes(RING // 2), bytes(RING // 2)]))


def test_a_mid_size_payload_in_parts_carries_its_joined_bytes_checksum() -> None:
    # Above CHECKED_BYTES (written part by part), below DIRECT_BYTES (never after a fill): the
    # ring's end falls inside the header, inside a part, between parts; in one piece, the
    # checksum is taken from the ring's copy, wrapped from the parts: the same either way.
    ring = 12 << 10
    mm = mmap.mmap(-1, fastring.region_bytes(ring))
    prod = Producer(mm, ring, True)
    cons: Consumer[bytes] = Consumer(mm, ring, True, (REQUEST,))
    for i in range(60):
        parts: list[bytes | bytearray | memoryview] = [
            bytes([i]) * (3 + i),
            memoryview(bytes(range(256)) * 17),
            bytearray(b"q" * (97 * i)),
        ]
        gathered = fastring.Gathered(parts)
        assert fastring.CHECKED_BYTES < len(gathered) < fastring.DIRECT_BYTES
        pos = prod._head % ring
        prod.write(REQUEST, gathered)
        crc = fastring._PACKET.unpack_from(mm, fastring.DATA_OFFSET + pos)[2]
        assert crc == fastring.checksum(gathered.joined())
        assert cons.read() == (REQUEST, gathered.joined())
    cons.close()
    prod.close()
    mm.close()


def test_the_largest_packet_fills_an_empty_ring(region: mmap.mmap) -> None:
    prod, cons = _pair(region)
    prod.write(REQUEST, b"x" * 100)
    cons.read()
    big = bytes(range(256)) * ((RING - fastring.HEADER_BYTES) // 256)
    prod.write(REQUEST, big)
    assert cons.read() == (REQUEST, big)
    with pytest.raises(RingError, match="exceeds"):
        prod.write(REQUEST, bytes(RING))


def test_a_full_ring_refuses_the_producer(region: mmap.mmap) -> None:
    prod, _ = _pair(region)
    prod.write(REQUEST, bytes(3000))
    with pytest.raises(RingError, match="full"):
        prod.write(REQUEST, bytes(3000))


def test_a_wrong_checksum_is_refused_and_the_ring_resyncs(region: mmap.mmap) -> None:
    prod, cons = _pair(region)
    prod.write(REQUEST, b"payload", crc=123)
    with pytest.raises(RingError, match="checksum"):
        cons.read()
    cons.resync()
    prod.write(REQUEST, b"next")
    assert cons.read() == (REQUEST, b"next")


def test_a_length_past_what_was_written_is_refused(region: mmap.mmap) -> None:
    prod, cons = _pair(region)
    prod.write(REQUEST, b"short")
    struct.pack_into("<I", region, fastring.DATA_OFFSET, RING * 8)  # the header now claims 32 KiB
    with pytest.raises(RingError, match="claims"):
        cons.read()


def test_a_corrupt_producer_index_is_refused(region: mmap.mmap) -> None:
    _, cons = _pair(region)
    struct.pack_into("<Q", region, 64, 1 << 40)  # the request ring's head
    with pytest.raises(RingError, match="index is corrupt"):
        cons.read()


def test_a_corrupt_consumer_index_is_refused(region: mmap.mmap) -> None:
    prod, _ = _pair(region)
    struct.pack_into("<Q", region, 128, 1 << 40)  # the request ring's tail
    with pytest.raises(RingError, match="index is corrupt"):
        prod.write(REQUEST, b"x")


def test_unexpected_kind_and_sequence_are_refused(region: mmap.mmap) -> None:
    prod, cons = _pair(region)
    prod.write(REQUEST, b"a")
    struct.pack_into("<I", region, fastring.DATA_OFFSET + 4, 7)  # the first packet claims number 7
    with pytest.raises(RingError, match="arrived where packet 0 was due"):
        cons.read()
    cons.resync()
    prod.write(RESULT, b"x")
    with pytest.raises(RingError, match="kind"):
        cons.read()
    cons.resync()
    prod.write(REQUEST, b"b")
    assert cons.read() == (REQUEST, b"b")


def test_region_checks(region: mmap.mmap) -> None:
    fastring.check_region(region, RING)
    with pytest.raises(RingError):
        fastring.check_region(region, RING * 2)
    region[0:4] = b"XXXX"
    with pytest.raises(RingError):
        fastring.check_region(region, RING)


def test_granted_sizes() -> None:
    assert fastring.grant_ring_bytes(0) == fastring.DEFAULT_RING_BYTES
    assert fastring.grant_ring_bytes(1) == fastring.MIN_RING_BYTES
    assert fastring.grant_ring_bytes(5000) == 8192
    assert fastring.grant_ring_bytes(1 << 40) == fastring.MAX_RING_BYTES


def test_the_checksum_covers_a_large_payloads_first_bytes() -> None:
    ring = 4 * RING
    mm = mmap.mmap(-1, fastring.region_bytes(ring))
    fastring.write_region_header(mm, ring)
    prod, cons = Producer(mm, ring, True), Consumer(mm, ring, True, (REQUEST,))
    big = bytes(range(256)) * ((fastring.CHECKED_BYTES + 512) // 256)  # past what is checked
    assert len(big) > fastring.CHECKED_BYTES
    assert fastring.checksum(big) == fastring.checksum(big[: fastring.CHECKED_BYTES])
    prod.write(REQUEST, fastring.Gathered([big[:100], memoryview(big)[100:]], len(big)))
    assert cons.read() == (REQUEST, big)
    prod.write(REQUEST, big, crc=fastring.checksum(big) ^ 1)
    with pytest.raises(RingError, match="checksum"):
        cons.read()


def test_a_large_packet_of_a_direct_kind_is_read_in_place_until_released() -> None:
    ring = 64 << 10
    mm = mmap.mmap(-1, fastring.region_bytes(ring))
    prod = Producer(mm, ring, True)
    cons: Consumer[bytes | memoryview] = Consumer(mm, ring, True, (REQUEST, RESULT), (REQUEST,))
    big = bytes(range(256)) * (fastring.DIRECT_BYTES // 256)
    prod.write(RESULT, big)  # not a direct kind: a private copy
    kind, payload = cons.read() or (0, b"")
    assert (kind, payload) == (RESULT, big) and type(payload) is bytes and not fastring.in_ring(payload)
    prod.write(REQUEST, big[:100])  # too small to be read in place
    assert type((cons.read() or (0, b""))[1]) is bytes
    prod.write(REQUEST, big)
    kind, view = cons.read() or (0, b"")
    assert kind == REQUEST and fastring.in_ring(view) and view == big
    assert isinstance(view, memoryview) and view.readonly
    assert fastring.in_ring(memoryview(view)[64:])  # a view cut from it is still one
    # The producer does not get the bytes back until the consumer is done with them.
    tail_slot = 128 // 8
    slots = memoryview(mm)[: fastring.DATA_OFFSET].cast("Q")
    held = slots[tail_slot]
    cons.release()
    assert slots[tail_slot] == held + fastring.HEADER_BYTES + len(big)
    cons.release()  # idempotent
    # The next read gives back a view not released yet.
    prod.write(REQUEST, big)
    assert fastring.in_ring((cons.read() or (0, b""))[1])
    assert cons.read() is None
    assert slots[tail_slot] == prod._head  # published by the read
    # A large packet that would run past the ring's end starts at its start, after a fill.
    _advance_to(prod, cons, ring - 4096)
    prod.write(REQUEST, big)
    kind, payload = cons.read() or (0, b"")
    assert kind == REQUEST and fastring.in_ring(payload) and payload == big
    assert cons.read() is None
    # Without room for the fill and the packet (a packet not read yet), it runs past the end:
    # a private copy, joined.
    unread = b"u" * (40 << 10)
    _advance_to(prod, cons, ring - 8192 - (fastring.HEADER_BYTES + len(unread)))
    prod.write(RESULT, unread)
    prod.write(REQUEST, big)
    assert cons.read() == (RESULT, unread)
    kind, payload = cons.read() or (0, b"")
    assert payload == big and type(payload) is bytes
    del view, payload, slots
    cons.close()
    prod.close()
    mm.close()


def _advance_to(prod: Producer, cons: Consumer[bytes | memoryview], pos: int) -> None:
    """Small packets written and read until the producer's next packet starts at ``pos``."""
    size = prod.ring_bytes
    while (gap := (pos - prod._head) % size) != 0:
        prod.write(RESULT, b"s" * (min(gap, 4016) - fastring.HEADER_BYTES))
        assert cons.read() is not None


def test_a_fill_packet_that_does_not_end_the_ring_is_refused(region: mmap.mmap) -> None:
    prod, cons = _pair(region)
    prod.write(REQUEST, b"x" * 100, crc=0)
    struct.pack_into("<I", region, fastring.DATA_OFFSET + 12, fastring.FILL)  # its kind
    with pytest.raises(RingError, match="fill packet"):
        cons.read()
    cons.resync()
    prod.write(REQUEST, b"ok")
    assert cons.read() == (REQUEST, b"ok")


def test_large_packets_in_parts_round_trip_with_fills() -> None:
    ring = 64 << 10
    mm = mmap.mmap(-1, fastring.region_bytes(ring))
    prod = Producer(mm, ring, True)
    cons: Consumer[bytes] = Consumer(mm, ring, True, (REQUEST,))
    for i in range(40):  # 17-23 KiB packets through a 64 KiB ring: a fill or a wrap every few
        parts = [bytes([i]) * 1000, bytes([i + 1]) * (fastring.DIRECT_BYTES + 1000 * (i % 7))]
        prod.write(REQUEST, fastring.Gathered(parts))
        if i % 3 == 0:
            prod.write(REQUEST, b"small")
        assert cons.read() == (REQUEST, b"".join(parts))
        if i % 3 == 0:
            assert cons.read() == (REQUEST, b"small")
    assert cons.read() is None
    cons.close()
    prod.close()
    mm.close()


def test_a_reserved_place_is_the_next_packets_payload() -> None:
    ring = 64 << 10
    mm = mmap.mmap(-1, fastring.region_bytes(ring))
    prod = Producer(mm, ring, False)
    cons: Consumer[bytes] = Consumer(mm, ring, False, (RESULT,))
    big = bytes(range(256)) * (fastring.DIRECT_BYTES // 256 + 8)
    assert prod.reserve(100) is None  # small: written the usual way
    for i in range(12):  # through the ring's end several times: some places after a fill
        place = prod.reserve(len(big))
        assert place is not None and len(place) == len(big) and not place.readonly
        place[:] = big
        prod.write(RESULT, fastring.Reserved(len(big)))
        assert cons.read() == (RESULT, big)
        prod.write(RESULT, b"between" * i)  # the usual writes go on around them
        assert cons.read() == (RESULT, b"between" * i)
        del place
    # A place given up by another write is not written through.
    assert prod.reserve(len(big)) is not None
    prod.write(RESULT, b"other")
    with pytest.raises(RingError, match="without its place"):
        prod.write(RESULT, fastring.Reserved(len(big)))
    # No place while the consumer has not read enough.
    prod.write(RESULT, b"x" * (ring - len(big)))
    assert prod.reserve(len(big)) is None
    cons.close()
    prod.close()
    mm.close()

"""The chunk messages' own (de)serializers (``wire_stream.parser``, ``write_part``) against
protobuf's: the same bytes written, the same chunk read, and every other encoding (unknown,
repeated or reordered fields, over-long varints, truncated or garbage bytes) left to protobuf,
so it means, or fails, exactly as it did."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings, strategies as st

from nnhal.core import wire_stream
from nnhal.core.wire_stream import Chunk
from nnhal.proto import service_pb2 as spb, streamed_pb2 as stpb

MESSAGES = (stpb.StreamedExecuteRequest, stpb.StreamedExecuteResult)

u32 = st.integers(0, (1 << 32) - 1)
u64 = st.integers(0, (1 << 64) - 1)
payload = st.binary(max_size=300)
message = st.sampled_from(MESSAGES)


def _pb(cls: Any, index: int, offset: int, data: bytes) -> Any:
    return cls(chunk=stpb.PoolChunk(pool_index=index, offset=offset, data=data))


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, body: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(body)) + body


def _same_as_protobuf(cls: Any, raw: bytes) -> None:
    """``parser(cls)`` reads ``raw`` as protobuf does: a chunk read in place has protobuf's
    fields; anything else is protobuf's own result."""
    ours = wire_stream.parser(cls)(raw)
    try:
        theirs = cls.FromString(raw)
    except DecodeError:
        assert not isinstance(ours, Chunk)  # read in place only what protobuf decodes
        raise
    if isinstance(ours, Chunk):
        assert theirs.WhichOneof("part") == "chunk"
        assert (ours.pool_index, ours.offset, bytes(ours.data)) == (
            theirs.chunk.pool_index,
            theirs.chunk.offset,
            theirs.chunk.data,
        )
    else:
        assert ours == theirs


@settings(max_examples=300, deadline=None)
@given(message, u32, u64, payload)
def test_a_chunk_is_written_as_protobuf_writes_it_and_read_back_in_place(
    cls: Any, index: int, offset: int, data: bytes
) -> None:
    raw = wire_stream.write_part(Chunk(index, offset, memoryview(data)))
    assert raw == _pb(cls, index, offset, data).SerializeToString()
    got = wire_stream.parser(cls)(raw)
    assert isinstance(got, Chunk) and (got.pool_index, got.offset, bytes(got.data)) == (index, offset, data)
    assert isinstance(got.data, memoryview) and got.data.readonly  # a view of the received bytes
    _same_as_protobuf(cls, raw)


@settings(max_examples=300, deadline=None)
@given(message, u32, u64, payload, st.data())
def test_mutated_chunks_mean_what_protobuf_says(cls: Any, index: int, offset: int, data: bytes, draw: Any) -> None:
    raw = bytearray(_pb(cls, index, offset, data).SerializeToString())
    how = draw.draw(st.sampled_from(["flip", "cut", "append", "insert"]))
    at = draw.draw(st.integers(0, len(raw)))
    byte = draw.draw(st.integers(0, 255))
    if how == "flip" and at < len(raw):
        raw[at] = byte
    elif how == "cut":
        del raw[at:]
    elif how == "append":
        raw += draw.draw(st.binary(min_size=1, max_size=12))
    else:
        raw[at:at] = bytes((byte,))
    try:
        _same_as_protobuf(cls, bytes(raw))
    except DecodeError:
        with pytest.raises(DecodeError):
            wire_stream.parser(cls)(bytes(raw))


@settings(max_examples=300, deadline=None)
@given(message, st.binary(max_size=64))
def test_garbage_means_what_protobuf_says(cls: Any, raw: bytes) -> None:
    try:
        _same_as_protobuf(cls, raw)
    except DecodeError:
        with pytest.raises(DecodeError):
            wire_stream.parser(cls)(raw)


DATA = _field(0x1A, b"abc")
ODD_ENCODINGS = [
    # fields out of order: data before offset, offset before index
    _field(0x12, DATA + b"\x10\x05"),
    _field(0x12, b"\x10\x05\x08\x01" + DATA),
    # a field twice (protobuf keeps the last)
    _field(0x12, b"\x08\x01\x08\x02" + DATA),
    _field(0x12, DATA + _field(0x1A, b"de")),
    # unknown fields, inside the chunk and beside it
    _field(0x12, b"\x08\x01" + DATA + b"\x78\x07"),
    _field(0x12, b"\x08\x01" + DATA) + b"\x78\x07",
    # the chunk field twice (protobuf merges them)
    _field(0x12, b"\x08\x01") + _field(0x12, DATA),
    # a head, then a chunk (the oneof keeps the last)
    _field(0x0A, b"") + _field(0x12, DATA),
    # an index over 32 bits (protobuf truncates it), a varint longer than its type needs
    _field(0x12, b"\x08" + _varint((1 << 32) + 3) + DATA),
    _field(0x12, b"\x08\x81\x80\x80\x80\x80\x00" + DATA),
]


@pytest.mark.parametrize("raw", ODD_ENCODINGS)
@pytest.mark.parametrize("cls", MESSAGES)
def test_every_other_encoding_is_parsed_by_protobuf(cls: Any, raw: bytes) -> None:
    got = wire_stream.parser(cls)(raw)
    assert not isinstance(got, Chunk)
    assert got == cls.FromString(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x12\x05\x08",  # a length past the end
        b"\x12\x03\x1a\x05ab",  # the data's length past the chunk's end
        b"\x12\x02\x08\x80",  # a varint cut short
        b"\x12\x03\x1a\xff\xff",
        b"\xff\x0a\xff\x0a",
        b"\x12\x85\x80\x80\x80\x80\x00\x1a\x03abc",  # a length in more bytes than 32 bits need
    ],
)
@pytest.mark.parametrize("cls", MESSAGES)
def test_undecodable_bytes_fail_as_protobuf_fails(cls: Any, raw: bytes) -> None:
    with pytest.raises(DecodeError):
        cls.FromString(raw)
    with pytest.raises(DecodeError):
        wire_stream.parser(cls)(raw)


def test_messages_are_serialized_by_protobuf_and_heads_parsed_by_it() -> None:
    head = stpb.StreamedExecuteRequest(head=spb.ExecuteRequest(session="s", prepared_model="p"))
    raw = wire_stream.write_part(head)
    assert raw == head.SerializeToString()
    assert wire_stream.parser(stpb.StreamedExecuteRequest)(raw) == head
    empty = wire_stream.write_part(Chunk(0, 0, b""))
    assert empty == stpb.StreamedExecuteRequest(chunk=stpb.PoolChunk()).SerializeToString()
    assert wire_stream.parser(stpb.StreamedExecuteRequest)(empty) == Chunk(0, 0, memoryview(b""))


def test_a_chunk_of_a_wider_view_is_written_as_bytes() -> None:
    values = np.arange(6, dtype=np.float32)
    (chunk,) = wire_stream.chunks({3: values.data})
    raw = wire_stream.write_part(chunk)
    assert raw == _pb(stpb.StreamedExecuteResult, 3, 0, values.tobytes()).SerializeToString()

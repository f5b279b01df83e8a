"""Inline pools in chunks (nnhal.core.wire_stream): the round trip both ways and every rule."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from nnhal.core import wire, wire_request, wire_result, wire_stream
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import (
    DataLocation,
    ExecutionResult,
    InlinePool,
    Request,
    RequestArgument,
    SharedMemoryPool,
)
from nnhal.proto import service_pb2 as spb, streamed_pb2 as stpb

CHUNK = wire_stream.CHUNK_BYTES
BIG = 2 * CHUNK + 123  # three chunks, the last one short


def _request(data: bytes) -> Request:
    return Request(
        (RequestArgument(location=DataLocation(0, 0, len(data))),),
        (RequestArgument(location=DataLocation(1, 0, 16)),),
        (InlinePool(data, len(data)), InlinePool(b"", 16), SharedMemoryPool("ashmem", "nnhal-x", 0, 64)),
    )


def _head(request: Request) -> spb.ExecuteRequest:
    msg = spb.ExecuteRequest(session="s", prepared_model="p")
    wire_request.request_to(request, msg.request)
    return msg


def _client_stream(request: Request) -> Iterator[Any]:
    head_request, chunked = wire_stream.split_request(request)
    return wire_stream.request_messages(_head(head_request), chunked)


def _kind(part: Any) -> str:
    """What a received part is: a chunk read in place, or what its message carries."""
    return "chunk" if isinstance(part, wire_stream.Chunk) else str(part.WhichOneof("part"))


def _chunk(index: int, offset: int, data: bytes) -> stpb.StreamedExecuteRequest:
    return stpb.StreamedExecuteRequest(chunk=stpb.PoolChunk(pool_index=index, offset=offset, data=data))


def test_a_large_pool_travels_in_chunks_and_arrives_whole() -> None:
    data = np.random.default_rng(0).integers(0, 255, BIG, np.uint8).tobytes()
    request = _request(data)
    head_request, chunked = wire_stream.split_request(request)
    assert head_request.pools[0] == InlinePool(b"", BIG) and list(chunked) == [0]
    parse = wire_stream.parser(stpb.StreamedExecuteRequest)
    messages = [parse(wire_stream.write_part(m)) for m in wire_stream.request_messages(_head(head_request), chunked)]
    assert [_kind(m) for m in messages] == ["head", "chunk", "chunk", "chunk"]
    head, got = wire_stream.read_request(iter(messages))
    assert head.session == "s" and got.pools[0] == InlinePool(data, BIG)
    assert got.pools[1:] == request.pools[1:]  # small and shared pools as they were
    assert isinstance(got.pools[0].data, memoryview) and got.pools[0].data.readonly  # type: ignore[union-attr]


def test_small_requests_are_not_split_and_the_choice_follows_the_pool_sizes() -> None:
    small = _request(b"abc")
    assert wire_stream.split_request(small) == (small, {})
    assert not wire_stream.worth_streaming(small)
    room = Request((), (), (InlinePool(b"", wire_stream.STREAM_MIN_BYTES),))  # room for a large output
    assert wire_stream.worth_streaming(room)


def test_a_chunk_writes_over_the_head_data_and_the_tail_stays_zero() -> None:
    head = _head(Request((), (), (InlinePool(b"\x01" * 8, 32),)))
    messages = [stpb.StreamedExecuteRequest(head=head), _chunk(0, 4, b"\x02\x02")]
    _, got = wire_stream.read_request(iter(messages))
    assert bytes(got.pools[0].data) == b"\x01" * 4 + b"\x02" * 2 + b"\x01" * 2 + bytes(24)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (_chunk(1 + 1, 0, b"x"), "no inline pool"),  # the shared pool
        (_chunk(7, 0, b"x"), "no inline pool"),
        (_chunk(1, 10, b"x" * 7), "whose size is 16"),
        (stpb.StreamedExecuteRequest(head=spb.ExecuteRequest()), "one head"),
    ],
)
def test_a_stream_breaking_the_rules_is_invalid_argument(extra: Any, says: str) -> None:
    messages = [*_client_stream(_request(b"abc")), extra]
    with pytest.raises(InvalidArgument, match=says):
        wire_stream.read_request(iter(messages))


def test_more_chunk_bytes_than_declared_are_refused() -> None:
    messages = [*_client_stream(_request(b"abcd")), *[_chunk(1, 0, b"y" * 16)] * 2]
    with pytest.raises(InvalidArgument, match="more bytes than"):
        wire_stream.read_request(iter(messages))


def test_a_stream_must_start_with_its_head() -> None:
    with pytest.raises(InvalidArgument, match="must start with its head"):
        wire_stream.read_request(iter([_chunk(0, 0, b"x")]))
    with pytest.raises(InvalidArgument, match="must start with its head"):
        wire_stream.read_request(iter([]))


def test_declared_sizes_over_the_inline_limit_are_refused_before_any_allocation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wire, "MAX_MESSAGE_BYTES", wire.ENVELOPE_BYTES + 100)
    head = _head(Request((), (), (InlinePool(b"", 101),)))
    with pytest.raises(InvalidArgument, match="declare 101 bytes"):
        wire_stream.read_request(iter([stpb.StreamedExecuteRequest(head=head)]))


def _answer(result: ExecutionResult) -> list[Any]:
    kept, chunked = wire_stream.split_result(result)
    head = stpb.StreamedExecuteResult(head=wire_result.execution_result_to(kept))
    return [head, *wire_stream.chunks(chunked)]


def test_a_large_output_pool_comes_back_in_chunks() -> None:
    out = np.arange(BIG // 4, dtype=np.float32).tobytes()
    request = Request((), (), (InlinePool(b"in", 2), InlinePool(b"", len(out)), InlinePool(b"", 8)))
    result = ExecutionResult(ErrorStatus.NONE, output_pools={1: out, 2: b"12345678"})
    parse = wire_stream.parser(stpb.StreamedExecuteResult)
    messages = [parse(wire_stream.write_part(m)) for m in _answer(result)]
    assert [_kind(m) for m in messages] == ["head", "chunk", "chunk", "chunk"]
    got = wire_stream.read_result(iter(messages), request)
    assert got.output_pools == {1: out, 2: b"12345678"} and got.status == ErrorStatus.NONE


def test_an_answer_naming_a_pool_the_request_has_not_is_refused() -> None:
    messages = _answer(ExecutionResult(output_pools={5: b"z" * CHUNK}))
    with pytest.raises(InvalidArgument, match="no inline pool of the request"):
        wire_stream.read_result(iter(messages), Request((), (), (InlinePool(b"", CHUNK),)))
    with pytest.raises(InvalidArgument, match="did not start with its head"):
        wire_stream.read_result(iter(messages[1:]), Request((), (), ()))

"""Inline pools in chunks (``streamed.proto``): splitting them off a request or result,
the chunk messages, and their reassembly on the receiving side.

A message of tens of MiB costs each side several copies into freshly mapped memory
(gRPC's receive and send buffers, protobuf's arena and the bytes a field read returns),
each one faulting its pages in 4 KiB at a time; chunks of :data:`CHUNK_BYTES` are copied
through memory already in use. Reassembled pools are numpy allocations (zero pages mapped
lazily, as huge pages where the system allows), handed on as read-only memoryviews: the
receiver's executor or ``numpy.frombuffer`` reads them in place.

Rules (both directions): a chunk names an inline pool of the head and lies within its
declared size; the pool's contents are its head data, zero-extended to its size, with
every chunk written at its offset; a stream carries at most as many chunk bytes as its
pools declare. Anything else is INVALID_ARGUMENT naming what was wrong (a server's
answer breaking them is the client's GENERAL_FAILURE). Stateless functions; an
:class:`Assembler` belongs to one stream.

The chunk messages skip protobuf's message objects on both sides (:func:`parser`,
:func:`write_part`): a received chunk in the form a protobuf writer gives it (the ``chunk``
field alone; ``PoolChunk``'s fields in order, each at most once, nothing else; varints of
at most the bytes their types need) is read in place as a :class:`Chunk` whose ``data`` is
a view of the received bytes, and a :class:`Chunk` to send is written as its header and
data joined once. Any other encoding is parsed by protobuf as before, so every stream means
what it meant (and undecodable bytes fail as they did); the readers take either form.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from nnhal.core import wire, wire_request, wire_result
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import ExecutionResult, InlinePool, MemoryPool, PoolData, Request
from nnhal.proto import service_pb2 as spb, streamed_pb2 as stpb

#: Bytes of pool contents per chunk message: large enough that per-message costs vanish,
#: small enough that every buffer on the way is reused memory.
CHUNK_BYTES = 1 << 20
#: A request with an inline pool of this size or more travels as a stream (the client's
#: choice; below it one message costs no more than a stream).
STREAM_MIN_BYTES = 2 << 20

#: Tags (field number << 3 | wire type): the ``chunk`` of a stream's message (field 2,
#: length-delimited), and ``PoolChunk``'s ``pool_index`` (1, varint), ``offset`` (2,
#: varint) and ``data`` (3, length-delimited).
_CHUNK_TAG, _INDEX_TAG, _OFFSET_TAG, _DATA_TAG = 0x12, 0x08, 0x10, 0x1A
_U32, _U64 = 1 << 32, 1 << 64


class Chunk(NamedTuple):
    """A ``PoolChunk`` without its protobuf message: ``data`` is a view of the received
    message's bytes (read) or of the pool's (to write)."""

    pool_index: int
    offset: int
    data: PoolData


def read_varint(raw: bytes, pos: int, most: int) -> tuple[int, int]:
    """(value, position after it) of the varint at ``pos`` of at most ``most`` bytes;
    (-1, pos) when it is longer or runs past the end."""
    value = shift = 0
    for i in range(pos, min(pos + most, len(raw))):
        byte = raw[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    return -1, pos


def read_chunk(raw: bytes) -> Chunk | None:
    """The chunk ``raw`` (a serialized stream message) carries when it is in the form a
    protobuf writer gives it (module docstring), with the fields protobuf's parser would
    read; None for any other bytes, which only protobuf's parser may judge. Reads every
    length and varint within ``raw``."""
    end = len(raw)
    if end < 2 or raw[0] != _CHUNK_TAG:
        return None
    length, pos = read_varint(raw, 1, 5)
    if length < 0 or pos + length != end:  # the chunk field is the whole message
        return None
    index = offset = 0
    if pos < end and raw[pos] == _INDEX_TAG:
        index, pos = read_varint(raw, pos + 1, 5)
        if not 0 <= index < _U32:  # protobuf would truncate a larger value: its parser decides
            return None
    if pos < end and raw[pos] == _OFFSET_TAG:
        offset, pos = read_varint(raw, pos + 1, 10)
        if not 0 <= offset < _U64:
            return None
    start = end
    if pos < end and raw[pos] == _DATA_TAG:
        length, start = read_varint(raw, pos + 1, 5)
        if length < 0 or start + length != end:
            return None
        pos = end
    if pos != end:  # a field out of order, repeated, unknown or of another wire type
        return None
    return Chunk(index, offset, memoryview(raw)[start:end])


def parser(message: Callable[[], Any]) -> Callable[[bytes], Any]:
    """A deserializer of ``message`` (``StreamedExecuteRequest`` or ``StreamedExecuteResult``)
    giving a :class:`Chunk` for a chunk in the usual encoding and the parsed message for
    anything else (protobuf's DecodeError for undecodable bytes)."""
    from_string: Callable[[bytes], Any] = message.FromString  # type: ignore[attr-defined]

    def parse(raw: bytes) -> Any:
        chunk = read_chunk(raw)
        return from_string(raw) if chunk is None else chunk

    return parse


#: The one-byte varints (the common lengths and sizes), made once.
_VARINTS = tuple(bytes([n]) for n in range(128))


def varint(n: int) -> bytes:
    """``n`` (0 <= n < 2**64) as a protobuf varint (also the client's request writer's:
    ``nnhal.client.remote.encoded``)."""
    if n < 128:
        return _VARINTS[n]
    if n < 16384:  # two bytes: a small message's length (a burst request's, a pool's)
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def write_part(part: Any) -> bytes:
    """The serializer matching :func:`parser`: a :class:`Chunk` as the ``chunk`` of a stream's
    message, fields at their defaults left out as protobuf leaves them; a message serialized."""
    if not isinstance(part, Chunk):
        return bytes(part.SerializeToString())
    index, offset, data = part
    size = len(data)
    body = bytearray()
    if index:
        body.append(_INDEX_TAG)
        body += varint(index)
    if offset:
        body.append(_OFFSET_TAG)
        body += varint(offset)
    if size:
        body.append(_DATA_TAG)
        body += varint(size)
    head = bytearray((_CHUNK_TAG,))
    head += varint(len(body) + size)
    return b"".join((head, body, data))


def split_pools(pools: Mapping[int, PoolData]) -> tuple[dict[int, PoolData], dict[int, PoolData]]:
    """(pools kept whole in the head, with the chunked ones' data emptied; the chunked
    ones' data): a pool travels in chunks from :data:`CHUNK_BYTES` of data on."""
    kept: dict[int, PoolData] = {}
    chunked: dict[int, PoolData] = {}
    for index, data in pools.items():
        if len(data) >= CHUNK_BYTES:
            chunked[index] = data
            kept[index] = b""
        else:
            kept[index] = data
    return kept, chunked


def worth_streaming(request: Request) -> bool:
    """True when an inline pool of ``request`` (inputs or room for outputs) is large."""
    return pools_worth_streaming(request.pools)


def pools_worth_streaming(pools: Sequence[MemoryPool]) -> bool:
    """True when one of ``pools`` is an inline pool of :data:`STREAM_MIN_BYTES` or more."""
    for p in pools:  # noqa: SIM110 (a loop, not ``any`` over a generator: asked on every remote execution)
        if isinstance(p, InlinePool) and p.size >= STREAM_MIN_BYTES:
            return True
    return False


def split_request(request: Request) -> tuple[Request, dict[int, PoolData]]:
    """``request`` with the data of its large inline pools emptied (sizes kept), and that data by pool index."""
    inline = {i: p.data for i, p in enumerate(request.pools) if isinstance(p, InlinePool)}
    _, chunked = split_pools(inline)
    if not chunked:
        return request, chunked
    pools = tuple(
        InlinePool(b"", p.size) if i in chunked and isinstance(p, InlinePool) else p
        for i, p in enumerate(request.pools)
    )
    return replace(request, pools=pools), chunked


def split_result(result: ExecutionResult) -> tuple[ExecutionResult, dict[int, PoolData]]:
    """``result`` with its large output pools' data emptied, and that data by pool index."""
    kept, chunked = split_pools(result.output_pools)
    return (replace(result, output_pools=kept) if chunked else result), chunked


def chunks(pools: Mapping[int, PoolData]) -> Iterator[Chunk]:
    """The chunks carrying ``pools``, views of their data (written by :func:`write_part`)."""
    for index, data in pools.items():
        view = memoryview(data).cast("B")
        for offset in range(0, len(view), CHUNK_BYTES):
            yield Chunk(index, offset, view[offset : offset + CHUNK_BYTES])


def chunk_of(part: Any, what: str) -> Any:
    """The chunk a stream's message carries (a :class:`Chunk`, or a message's ``PoolChunk``);
    InvalidArgument(``what``) for a message carrying something else."""
    if isinstance(part, Chunk):
        return part
    if part.WhichOneof("part") != "chunk":
        raise InvalidArgument(what)
    return part.chunk


class Assembler:
    """Pools rebuilt from chunks: ``sizes`` are the declared sizes of the pools that may
    receive chunks, ``initial`` their head data. Raises InvalidArgument for a chunk that
    breaks the module's rules, before anything is written."""

    def __init__(self, sizes: Mapping[int, int], initial: Mapping[int, PoolData] | None = None) -> None:
        self._sizes = sizes
        self._initial = initial or {}
        self._buffers: dict[int, np.ndarray] = {}
        self._left = sum(sizes.values())

    def add(self, chunk: Any) -> None:
        index, offset, data = int(chunk.pool_index), int(chunk.offset), chunk.data
        size = self._sizes.get(index)
        if size is None:
            raise InvalidArgument(f"a chunk for pool {index}, which is no inline pool of the stream's head")
        end = offset + len(data)
        if end > size:
            raise InvalidArgument(f"a chunk for bytes {offset}..{end} of pool {index}, whose size is {size}")
        self._left -= len(data)
        if self._left < 0:
            raise InvalidArgument("the chunks carry more bytes than the stream's pools declare")
        buf = self._buffers.get(index)
        if buf is None:
            buf = self._buffers[index] = np.zeros(size, np.uint8)  # calloc: pages appear as chunks fill them
            head = self._initial.get(index, b"")
            if len(head):
                buf[: len(head)] = np.frombuffer(head, np.uint8)
        buf[offset:end] = np.frombuffer(data, np.uint8)

    def pools(self) -> dict[int, memoryview]:
        """The pools that received chunks, as read-only views of their buffers."""
        return {i: buf.data.toreadonly() for i, buf in self._buffers.items()}


# -- the server's side ---------------------------------------------------------------
def read_request(messages: Iterator[Any]) -> tuple[spb.ExecuteRequest, Request]:
    """The head and the canonical request with its pools reassembled (INVALID_ARGUMENT for a
    stream that breaks the rules). The declared sizes are held to the inline limit before
    anything is allocated, as for a request in one message."""
    reader = RequestReader(next(messages, None))
    for msg in messages:
        reader.add(msg)
    return reader.finish()


class RequestReader:
    """``read_request`` one message at a time, for a reader that is handed them (an asyncio
    server's stream): made with the first message, ``add`` each later one, then ``finish``."""

    def __init__(self, first: Any) -> None:
        if first is None or isinstance(first, Chunk) or first.WhichOneof("part") != "head":
            raise InvalidArgument("a streamed execution must start with its head (the ExecuteRequest)")
        self.head: spb.ExecuteRequest = first.head
        self._request = wire_request.request_from(self.head.request)
        inline = {i: p for i, p in enumerate(self._request.pools) if isinstance(p, InlinePool)}
        declared, limit = sum(p.size for p in inline.values()), wire.max_inline_bytes()
        #: Bytes the stream's inline pools declare (what its chunks may fill).
        self.declared = declared
        if declared > limit:
            raise InvalidArgument(f"the inline pools declare {declared} bytes; at most {limit} travel inline")
        self._assembler = Assembler({i: p.size for i, p in inline.items()}, {i: p.data for i, p in inline.items()})

    def add(self, msg: Any) -> None:
        self._assembler.add(chunk_of(msg, "a streamed execution has one head, then only chunks"))

    def finish(self) -> tuple[spb.ExecuteRequest, Request]:
        request, filled = self._request, self._assembler.pools()
        if filled:
            pools = tuple(
                InlinePool(filled[i], p.size) if i in filled and isinstance(p, InlinePool) else p
                for i, p in enumerate(request.pools)
            )
            request = replace(request, pools=pools)
        return self.head, request


# -- the client's side ---------------------------------------------------------------
def request_messages(head: spb.ExecuteRequest, chunked: Mapping[int, PoolData]) -> Iterator[Any]:
    """The request: ``head`` (built from ``split_request``'s request), then the chunks."""
    yield stpb.StreamedExecuteRequest(head=head)
    yield from chunks(chunked)


def read_result(messages: Iterator[Any], request: Request) -> ExecutionResult:
    """The result with its output pools reassembled; InvalidArgument when the answer breaks
    the rules (an output pool the request has no inline pool for, a chunk out of range)."""
    first = next(messages, None)
    if first is None or isinstance(first, Chunk) or first.WhichOneof("part") != "head":
        raise InvalidArgument("the streamed answer did not start with its head (the ExecuteResult)")
    result = wire_result.execution_result_from(first.head)
    announced = [i for i, data in result.output_pools.items() if not len(data)]
    sizes: dict[int, int] = {}
    for i in announced:
        pool = request.pools[i] if 0 <= i < len(request.pools) else None
        if not isinstance(pool, InlinePool):
            raise InvalidArgument(f"the answer names output pool {i}, which is no inline pool of the request")
        sizes[i] = pool.size
    assembler = Assembler(sizes)
    for msg in messages:
        assembler.add(chunk_of(msg, "the streamed answer has one head, then only chunks"))
    filled = assembler.pools()
    if not filled:
        return result
    return replace(result, output_pools={**result.output_pools, **filled})

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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from nnhal.core import wire
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import ExecutionResult, InlinePool, PoolData, Request
from nnhal.proto import service_pb2 as spb, streamed_pb2 as stpb

#: Bytes of pool contents per chunk message: large enough that per-message costs vanish,
#: small enough that every buffer on the way is reused memory.
CHUNK_BYTES = 1 << 20
#: A request with an inline pool of this size or more travels as a stream (the client's
#: choice; below it one message costs no more than a stream).
STREAM_MIN_BYTES = 2 << 20

M = TypeVar("M")


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
    return any(isinstance(p, InlinePool) and p.size >= STREAM_MIN_BYTES for p in request.pools)


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


def chunks(make: Callable[[], M], pools: Mapping[int, PoolData]) -> Iterator[M]:
    """``make()`` messages whose ``chunk`` carries ``pools``, filled in place (a message built
    with ``chunk=PoolChunk(...)`` would copy the chunk once more)."""
    for index, data in pools.items():
        view = memoryview(data).cast("B")
        for offset in range(0, len(view), CHUNK_BYTES):
            msg = make()
            chunk = msg.chunk  # type: ignore[attr-defined]
            chunk.pool_index = index
            chunk.offset = offset
            chunk.data = view[offset : offset + CHUNK_BYTES].tobytes()
            yield msg


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
        if first is None or first.WhichOneof("part") != "head":
            raise InvalidArgument("a streamed execution must start with its head (the ExecuteRequest)")
        self.head: spb.ExecuteRequest = first.head
        self._request = wire.request_from(self.head.request)
        inline = {i: p for i, p in enumerate(self._request.pools) if isinstance(p, InlinePool)}
        declared, limit = sum(p.size for p in inline.values()), wire.max_inline_bytes()
        #: Bytes the stream's inline pools declare (what its chunks may fill).
        self.declared = declared
        if declared > limit:
            raise InvalidArgument(f"the inline pools declare {declared} bytes; at most {limit} travel inline")
        self._assembler = Assembler({i: p.size for i, p in inline.items()}, {i: p.data for i, p in inline.items()})

    def add(self, msg: Any) -> None:
        if msg.WhichOneof("part") != "chunk":
            raise InvalidArgument("a streamed execution has one head, then only chunks")
        self._assembler.add(msg.chunk)

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
    yield from chunks(stpb.StreamedExecuteRequest, chunked)


def read_result(messages: Iterator[Any], request: Request) -> ExecutionResult:
    """The result with its output pools reassembled; InvalidArgument when the answer breaks
    the rules (an output pool the request has no inline pool for, a chunk out of range)."""
    first = next(messages, None)
    if first is None or first.WhichOneof("part") != "head":
        raise InvalidArgument("the streamed answer did not start with its head (the ExecuteResult)")
    result = wire.execution_result_from(first.head)
    announced = [i for i, data in result.output_pools.items() if not len(data)]
    sizes: dict[int, int] = {}
    for i in announced:
        pool = request.pools[i] if 0 <= i < len(request.pools) else None
        if not isinstance(pool, InlinePool):
            raise InvalidArgument(f"the answer names output pool {i}, which is no inline pool of the request")
        sizes[i] = pool.size
    assembler = Assembler(sizes)
    for msg in messages:
        if msg.WhichOneof("part") != "chunk":
            raise InvalidArgument("the streamed answer has one head, then only chunks")
        assembler.add(msg.chunk)
    filled = assembler.pools()
    if not filled:
        return result
    return replace(result, output_pools={**result.output_pools, **filled})

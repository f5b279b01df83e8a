"""``chunk_reads.ChunkReads``: a streamed request's chunk read asked for ahead holds no byte
its session was not charged for, a session the budget refuses gets no read ahead, and every
byte charged is given back at the end, on an error and when the handler stops early."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nnhal.core.errors import InvalidArgument, ResourceExhaustedTransient
from nnhal.core.wire_stream import CHUNK_BYTES, Chunk
from nnhal.server.budget import MemoryBudget
from nnhal.server.rpc.chunk_reads import ChunkReads

KIND = "request data arriving"
SESSION = "s"


class Source:
    """The chunks of a stream (an exception item is raised in its place). Each read asked for
    records the session's charge at that moment, beside the bytes delivered before it and
    the size of the chunk it will deliver; a read can be held until released."""

    def __init__(self, items: list[Any], budget: MemoryBudget) -> None:
        self.items = items
        self.budget = budget
        self.asked: list[tuple[int, int, int]] = []  # (charged, delivered before, this chunk's bytes)
        self.delivered = 0
        self.gate: asyncio.Event | None = None

    def __aiter__(self) -> Source:
        return self

    async def __anext__(self) -> Any:
        i = len(self.asked)
        item = self.items[i] if i < len(self.items) else None
        size = len(item.data) if isinstance(item, Chunk) else 0
        self.asked.append((self.budget.used(SESSION), self.delivered, size))
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)  # a read completes on a later turn of the loop, as gRPC's do
        if item is None:
            raise StopAsyncIteration
        if isinstance(item, Exception):
            raise item
        self.delivered += size
        return item


def chunks(*sizes: int) -> list[Any]:
    out: list[Any] = []
    offset = 0
    for size in sizes:
        out.append(Chunk(0, offset, memoryview(bytes(size))))
        offset += size
    return out


def budget(per_client: int = 0, total: int = 0) -> MemoryBudget:
    b = MemoryBudget(per_client, total)
    b.open_session(SESSION)
    return b


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


async def drain(reads: ChunkReads, work: int = 3) -> list[int]:
    """The handler's loop: each chunk taken, the next read asked for ahead, some work."""
    sizes = []
    while (part := await reads.next()) is not None:
        if reads.ahead():
            await asyncio.sleep(0)
        for _ in range(work):  # the copy into the pool; the read ahead proceeds meanwhile
            await asyncio.sleep(0)
        sizes.append(len(part.data))
    return sizes


def test_every_read_asked_for_is_charged_for_its_chunk_before() -> None:
    sizes = (CHUNK_BYTES, CHUNK_BYTES, CHUNK_BYTES, CHUNK_BYTES // 2)
    b = budget()
    source = Source(chunks(*sizes), b)
    reads = ChunkReads(source, b, SESSION, KIND, sum(sizes))

    assert _run(drain(reads)) == list(sizes)
    # When a read was asked for, the chunks delivered before it and its own bytes were charged.
    assert len(source.asked) == len(sizes) + 1
    for charged, before, size in source.asked:
        assert charged >= before + size
    # The stream's chunks are charged (no reservation left), until closed.
    assert reads.charged == b.used(SESSION) == sum(sizes)
    assert reads.reserved == 0
    _run(reads.close())
    assert b.used(SESSION) == 0


def test_reads_go_ahead_of_the_handler() -> None:
    b = budget()
    source = Source(chunks(*[CHUNK_BYTES] * 6), b)
    reads = ChunkReads(source, b, SESSION, KIND, 6 * CHUNK_BYTES)

    async def main() -> list[int]:
        asked = []
        while (part := await reads.next()) is not None:
            assert reads.ahead()
            await asyncio.sleep(0)
            asked.append(len(source.asked))  # reads asked for while the handler works on ``part``
            del part
        return asked

    # Chunk i (0-based) is worked on with the read of i + 1 asked for.
    assert _run(main()) == [2, 3, 4, 5, 6, 7]
    _run(reads.close())


def test_a_session_the_budget_refuses_gets_no_read_ahead() -> None:
    # Room for two chunks: the second read ahead is refused, the chunk then read as it comes.
    b = budget(per_client=2 * CHUNK_BYTES)
    source = Source(chunks(CHUNK_BYTES, CHUNK_BYTES), b)
    reads = ChunkReads(source, b, SESSION, KIND, 2 * CHUNK_BYTES)

    async def main() -> None:
        first = await reads.next()
        assert first is not None and b.used(SESSION) == CHUNK_BYTES
        assert reads.ahead()  # the second fits
        second = await reads.next()
        assert second is not None and b.used(SESSION) == 2 * CHUNK_BYTES
        # The end of the stream needs no charge: its read goes ahead.
        assert reads.ahead() and reads.reserved == 0
        assert await reads.next() is None

    _run(main())
    _run(reads.close())
    assert b.used(SESSION) == 0

    b = budget(per_client=CHUNK_BYTES + CHUNK_BYTES // 2)
    source = Source(chunks(CHUNK_BYTES, CHUNK_BYTES), b)
    reads = ChunkReads(source, b, SESSION, KIND, 2 * CHUNK_BYTES)

    async def refused() -> None:
        assert await reads.next() is not None
        assert not reads.ahead()  # a full budget: no read pending, nothing asked
        assert len(source.asked) == 1
        with pytest.raises(ResourceExhaustedTransient):
            await reads.next()  # read as it comes and charged then: refused as before

    _run(refused())
    _run(reads.close())
    assert b.used(SESSION) == 0


def test_a_larger_chunk_than_expected_is_charged_the_difference_as_it_arrives() -> None:
    b = budget()
    sizes = (1000, 3000, 500)
    source = Source(chunks(*sizes), b)
    reads = ChunkReads(source, b, SESSION, KIND, 10_000)
    assert _run(drain(reads)) == list(sizes)
    assert b.used(SESSION) == reads.charged == sum(sizes)
    _run(reads.close())
    assert b.used(SESSION) == 0


def test_a_reservation_is_given_back_when_the_handler_stops_with_a_read_pending() -> None:
    b = budget()
    source = Source(chunks(CHUNK_BYTES, CHUNK_BYTES, CHUNK_BYTES), b)
    reads = ChunkReads(source, b, SESSION, KIND, 3 * CHUNK_BYTES)

    async def main() -> set[asyncio.Task[Any]]:
        before = asyncio.all_tasks()
        assert await reads.next() is not None
        source.gate = asyncio.Event()  # the read ahead waits for its chunk
        assert reads.ahead()
        await asyncio.sleep(0)
        assert reads.reserved == CHUNK_BYTES and b.used(SESSION) == 2 * CHUNK_BYTES
        await reads.close()  # e.g. the head refused: the read cancelled, everything given back
        return asyncio.all_tasks() - before

    assert _run(main()) == set()
    assert b.used(SESSION) == 0 and reads.charged == 0


def test_an_error_of_a_read_or_a_message_that_is_no_chunk_gives_everything_back() -> None:
    b = budget()
    source = Source([*chunks(CHUNK_BYTES), ConnectionError("broken")], b)
    reads = ChunkReads(source, b, SESSION, KIND, 4 * CHUNK_BYTES)
    with pytest.raises(ConnectionError):
        _run(drain(reads))
    _run(reads.close())
    assert b.used(SESSION) == 0

    class NotAChunk:
        def WhichOneof(self, _name: str) -> str:
            return "head"

    source = Source([*chunks(CHUNK_BYTES), NotAChunk()], b)
    reads = ChunkReads(source, b, SESSION, KIND, 4 * CHUNK_BYTES)
    with pytest.raises(InvalidArgument):
        _run(drain(reads))
    _run(reads.close())
    assert b.used(SESSION) == 0


def test_a_cancelled_handler_gives_everything_back() -> None:
    b = budget()
    source = Source(chunks(CHUNK_BYTES, CHUNK_BYTES), b)
    reads = ChunkReads(source, b, SESSION, KIND, 2 * CHUNK_BYTES)

    async def handler() -> None:
        try:
            await reads.next()
            source.gate = asyncio.Event()
            reads.ahead()
            await reads.next()  # waits for the held read
        finally:
            await reads.close()

    async def main() -> None:
        task = asyncio.ensure_future(handler())
        for _ in range(10):
            await asyncio.sleep(0)
        assert reads.reserved == CHUNK_BYTES
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    _run(main())
    assert b.used(SESSION) == 0

"""``streamed_servicer.read_ahead``: a streamed request's next chunk is asked for before the
handler works on the current one (its flow-control window is granted while a read is
pending), in order, bounded, errors in their place, and no task left behind."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nnhal.server.rpc.streamed_servicer import read_ahead


class Source:
    """An async iterator of ``items`` (an exception item is raised in its place) that records
    how many reads were asked for, and can hold a read until released."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self.asked = 0
        self.gate: asyncio.Event | None = None

    def __aiter__(self) -> Source:
        return self

    async def __anext__(self) -> Any:
        i = self.asked
        self.asked += 1
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)  # a read completes on a later turn of the loop, as gRPC's do
        if i >= len(self.items):
            raise StopAsyncIteration
        item = self.items[i]
        if isinstance(item, Exception):
            raise item
        return item


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_the_next_read_is_asked_for_before_the_caller_gets_a_message() -> None:
    async def main() -> list[tuple[int, int]]:
        source = Source(list(range(5)))
        seen = []
        async for item in read_ahead(source, lambda m: m):
            seen.append((item, source.asked))  # reads asked for when the caller gets ``item``
        return seen

    seen = _run(main())
    assert [item for item, _ in seen] == [0, 1, 2, 3, 4]
    # Message i reaches the caller with the read of i + 1 already pending.
    assert all(asked >= item + 2 for item, asked in seen)


def test_messages_are_taken_as_they_arrive_and_at_most_two_wait_for_the_caller() -> None:
    async def main() -> tuple[list[int], int]:
        source = Source(list(range(20)))
        taken: list[int] = []
        ahead = 0
        async with contextlib.aclosing(read_ahead(source, lambda m: taken.append(m) or m)) as items:
            async for item in items:
                for _ in range(20):  # a slow caller: the reader may run far ahead if unbounded
                    await asyncio.sleep(0)
                ahead = max(ahead, len(taken) - (item + 1))
        return taken, ahead

    taken, ahead = _run(main())
    assert taken == list(range(20))
    assert ahead <= 2


def test_an_error_is_raised_after_the_messages_before_it() -> None:
    async def main() -> list[int]:
        got: list[int] = []
        with pytest.raises(ValueError, match="bad part"):
            async for item in read_ahead(Source([1, 2, ValueError("bad part"), 4]), lambda m: m):
                got.append(item)
        return got

    assert _run(main()) == [1, 2]


def test_an_error_of_take_is_raised_in_its_place() -> None:
    def take(m: int) -> int:
        if m == 3:
            raise RuntimeError("over the limit")
        return m * 10

    async def main() -> list[int]:
        got: list[int] = []
        with pytest.raises(RuntimeError, match="over the limit"):
            async for item in read_ahead(Source([1, 2, 3, 4]), take):
                got.append(item)
        return got

    assert _run(main()) == [10, 20]


def test_a_caller_stopping_early_leaves_no_reader_running() -> None:
    async def main() -> tuple[int, int]:
        before = asyncio.all_tasks()
        source = Source(list(range(100)))
        async with contextlib.aclosing(read_ahead(source, lambda m: m)) as items:
            async for item in items:
                if item == 2:
                    break
        asked = source.asked
        for _ in range(50):
            await asyncio.sleep(0)
        return asked - source.asked + len(asyncio.all_tasks() - before), asked

    still, asked = _run(main())
    assert still == 0  # nothing read after the close, no task left
    assert asked <= 6


def test_a_cancelled_caller_cancels_its_pending_read() -> None:
    async def main() -> bool:
        before = asyncio.all_tasks()
        source = Source([1, 2, 3])
        source.gate = asyncio.Event()  # every read waits: the caller waits on the first
        got: list[int] = []

        async def consume(items: AsyncIterator[int]) -> None:
            async with contextlib.aclosing(items):
                async for item in items:
                    got.append(item)

        task = asyncio.ensure_future(consume(read_ahead(source, lambda m: m)))
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return not got and not asyncio.all_tasks() - before

    assert _run(main())

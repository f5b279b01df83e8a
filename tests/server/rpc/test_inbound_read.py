"""The read of a gated call's one request message: admitted, bounded in time, held."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from nnhal.server.rpc.inbound import Inbound


class Aborted(Exception):
    pass


class FakeContext:
    """What ``Inbound.receive`` uses of a grpc.aio servicer context."""

    def __init__(self, delay: float, message: object = b"abc") -> None:
        self.delay = delay
        self.message = message
        self.aborted: tuple[grpc.StatusCode, str] | None = None
        self.done: list[Any] = []

    async def read(self) -> object:
        await asyncio.sleep(self.delay)
        return self.message

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted(details)

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    def add_done_callback(self, fn: Any) -> None:
        self.done.append(fn)


def test_a_message_read_in_time_is_held_until_let_go_once() -> None:
    inbound = Inbound(1024, read_timeout=5.0)
    ctx = FakeContext(0.0)
    message, call = asyncio.run(inbound.receive(ctx))  # type: ignore[arg-type]
    assert message == b"abc" and call.nbytes == 3
    assert inbound.held == 3 and len(ctx.done) == 1
    call.let_go()  # the handler has its answer: the client may call again before the call ends
    assert inbound.held == 0
    ctx.done[0](ctx)  # the call's end does not give it back twice
    assert inbound.held == 0


def test_a_read_past_the_timeout_ends_the_call_and_frees_its_place() -> None:
    inbound = Inbound(1024, read_timeout=0.05)
    ctx = FakeContext(5.0)

    async def main() -> None:
        with pytest.raises(Aborted):
            await inbound.receive(ctx)  # type: ignore[arg-type]
        # The place is given back: the next read starts at once.
        assert (await inbound.receive(FakeContext(0.0)))[0] == b"abc"  # type: ignore[arg-type]

    asyncio.run(asyncio.wait_for(main(), 10))
    assert ctx.aborted is not None
    assert ctx.aborted[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "did not arrive within 0.05 s" in ctx.aborted[1]


def test_a_cancelled_read_is_a_cancellation_not_a_timeout() -> None:
    inbound = Inbound(1024, read_timeout=5.0)
    ctx = FakeContext(5.0)

    async def main() -> None:
        task = asyncio.ensure_future(inbound.receive(ctx))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(main(), 10))
    assert ctx.aborted is None
    assert inbound.held == 0


def test_reads_expire_in_turn_on_one_clock() -> None:
    """A read that finished in time leaves the next one its own full time (the clock re-arms
    for it), and that one still expires when its time is up."""
    # A whole second: the quick read must not expire on a loaded machine.
    inbound = Inbound(1024, read_timeout=1.0)
    quick, slow = FakeContext(0.05), FakeContext(5.0)

    async def late_slow() -> tuple[object, object]:
        await asyncio.sleep(0.1)
        return await inbound.receive(slow)  # type: ignore[arg-type]

    async def main() -> None:
        started = asyncio.get_running_loop().time()
        late = asyncio.ensure_future(late_slow())
        assert (await inbound.receive(quick))[0] == b"abc"  # type: ignore[arg-type]
        with pytest.raises(Aborted):
            await late
        # Not before its own 1 s (started at 0.1 s); a lower bound, which load cannot break.
        assert asyncio.get_running_loop().time() - started >= 1.09

    asyncio.run(asyncio.wait_for(main(), 10))
    assert quick.aborted is None
    assert slow.aborted is not None and slow.aborted[0] == grpc.StatusCode.RESOURCE_EXHAUSTED


class HeldContext(FakeContext):
    """A context whose read returns once released."""

    def __init__(self) -> None:
        super().__init__(0.0)
        self.release = asyncio.Event()

    async def read(self) -> object:
        await self.release.wait()
        return self.message


def test_reads_past_the_places_wait_in_turn_and_a_cancelled_one_passes_its_place_on() -> None:
    """With one read's place, a second and a third read wait, first come first served; the
    second, cancelled while waiting, leaves its turn to the third, which gets its place (and its
    time) when the first read leaves."""
    inbound = Inbound(1024, read_bytes=0, read_timeout=5.0)  # one place
    first, second, third = HeldContext(), HeldContext(), HeldContext()

    async def main() -> None:
        a = asyncio.ensure_future(inbound.receive(first))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        b = asyncio.ensure_future(inbound.receive(second))  # type: ignore[arg-type]
        c = asyncio.ensure_future(inbound.receive(third))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        third.release.set()  # its message is there, but it has no place yet
        await asyncio.sleep(0.01)
        assert not c.done()
        b.cancel()
        with pytest.raises(asyncio.CancelledError):
            await b
        first.release.set()
        (message, call) = await a
        call.let_go()
        assert message == b"abc" and (await asyncio.wait_for(c, 5))[0] == b"abc"
        # Every place given back: a read starts at once.
        second.release.set()
        assert (await asyncio.wait_for(inbound.receive(second), 5))[0] == b"abc"  # type: ignore[arg-type]

    asyncio.run(asyncio.wait_for(main(), 10))
    assert first.aborted is None and third.aborted is None


def test_a_read_waiting_for_its_place_is_not_timed_until_it_has_one() -> None:
    """A read's time starts with its place: one that waited longer than the read timeout for its
    place still gets its own time to read."""
    inbound = Inbound(1024, read_bytes=0, read_timeout=1.0)
    first, second = HeldContext(), HeldContext()

    async def main() -> None:
        a = asyncio.ensure_future(inbound.receive(first))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        b = asyncio.ensure_future(inbound.receive(second))  # type: ignore[arg-type]
        await asyncio.sleep(0.7)
        first.release.set()  # within its time
        await a
        await asyncio.sleep(0.5)  # the second has waited 1.2 s in all, 0.5 s of it with its place
        second.release.set()
        assert (await b)[0] == b"abc"

    asyncio.run(asyncio.wait_for(main(), 10))
    assert first.aborted is None and second.aborted is None

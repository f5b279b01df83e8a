"""AioSession's one call path without a server: the asyncio twin of the death monitor's tests
(test_callbacks.py) — a death releases every awaiting call once with DEAD_OBJECT and fails later
calls at once; a draining server's end leaves each call the status its own stream delivers
(within the grace); close releases with GENERAL_FAILURE; cancelling a caller cancels its RPC."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from typing import Any

import grpc.aio
import pytest

from nnhal.client.remote import monitor as monitor_module
from nnhal.client.remote.aio_session import AioSession
from nnhal.client.remote.monitor import DRAINING
from nnhal.client.remote.transport import Metadata
from nnhal.core.errors import DeadObject, GeneralFailure

CALLS = 32


def _run(main: Callable[[AioSession], Awaitable[None]]) -> None:
    async def with_session() -> None:
        # A channel to nowhere: nothing connects until a call is made, and none is.
        session = AioSession("test", grpc.aio.insecure_channel("unix:/nonexistent/nnhal.sock"), None)
        try:
            await main(session)
        finally:
            await session.close()

    asyncio.run(asyncio.wait_for(with_session(), 30))
    # grpc.aio stops its poller thread when its last channel is collected; the tracebacks of
    # the calls' exceptions hold this one in a reference cycle until a collection.
    gc.collect()


def _pending(session: AioSession, gate: asyncio.Event, value: Any = "answer") -> asyncio.Task[Any]:
    """A call whose 'RPC' answers ``value`` once ``gate`` is set."""

    async def rpc(_md: Metadata) -> Any:
        await gate.wait()
        return value

    return asyncio.ensure_future(session.call("test", False, rpc))


def test_a_death_releases_every_awaiting_call_once_and_later_calls_at_once() -> None:
    async def main(session: AioSession) -> None:
        gate = asyncio.Event()
        calls = [_pending(session, gate) for _ in range(CALLS)]
        ends: list[int] = []
        for call in calls:
            call.add_done_callback(lambda _c: ends.append(1))
        await asyncio.sleep(0.01)
        for k in range(4):  # several signals, as the watchers may all see the end
            session.declare_dead(f"reason {k}")
        results = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(r, DeadObject) and "reason 0" in r.message for r in results)
        gate.set()
        await asyncio.sleep(0.05)
        assert len(ends) == CALLS and session.dead
        with pytest.raises(DeadObject, match="reason 0"):
            await _pending(session, gate)

    _run(main)


def test_a_draining_servers_end_leaves_each_call_its_own_streams_status(monkeypatch: pytest.MonkeyPatch) -> None:
    # Roomy enough that a loaded machine's stall between the steps below stays inside it (0.3 s
    # did not, once); the unanswered call then waits out the grace.
    monkeypatch.setattr(monitor_module, "DRAIN_NOTIFY_GRACE_S", 1.5)

    async def main(session: AioSession) -> None:
        session._draining = True  # what the session stream's draining event sets
        told, silent = asyncio.Event(), asyncio.Event()
        answered, unanswered = _pending(session, told, "DEVICE_UNAVAILABLE"), _pending(session, silent)
        await asyncio.sleep(0.01)
        session.declare_dead("the server ended the session")
        with pytest.raises(DeadObject, match="draining"):
            await _pending(session, told)  # later calls fail at once
        await asyncio.sleep(0.05)
        assert not answered.done() and not unanswered.done()  # their streams may still deliver
        told.set()  # the notify, read late
        assert await answered == "DEVICE_UNAVAILABLE"
        with pytest.raises(DeadObject) as dead:
            await unanswered  # nothing came within the grace
        assert DRAINING in dead.value.message

    _run(main)


def test_close_releases_awaiting_calls_with_general_failure() -> None:
    async def main(session: AioSession) -> None:
        call = _pending(session, asyncio.Event())
        await asyncio.sleep(0.01)
        await session.close()
        with pytest.raises(GeneralFailure, match="closed"):
            await call
        assert not session.dead

    _run(main)


def test_cancelling_the_caller_cancels_its_rpc() -> None:
    async def main(session: AioSession) -> None:
        rpc_cancelled = asyncio.Event()

        async def rpc(_md: Metadata) -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                rpc_cancelled.set()
                raise

        caller = asyncio.ensure_future(session.call("test", False, rpc))
        await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await asyncio.wait_for(rpc_cancelled.wait(), 5)
        assert not session.dead  # a cancellation is the caller's, not a death

    _run(main)

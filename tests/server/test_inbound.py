"""Requests in flight held against their client and the total (``rpc.inbound``, issue #24):
a client past its limit is refused; past the total, a client below its fair share makes room
by ending the newest call of the client furthest above its own; a call's end gives its bytes back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from nnhal.server.budget import MemoryBudget
from nnhal.server.rpc.inbound import IDLE_CLIENTS, REQUEST_COPIES, REQUESTS_IN_FLIGHT, Call, Inbound

MiB = 1 << 20


class _Context:
    """The parts of a grpc.aio servicer context the inbound reads."""

    def __init__(self, peer: str) -> None:
        self._peer = peer
        self.done: list[Callable[[Any], None]] = []

    def peer(self) -> str:
        return self._peer

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def add_done_callback(self, fn: Callable[[Any], None]) -> None:
        self.done.append(fn)

    def cancelled(self) -> bool:
        return False

    def end(self) -> None:
        for fn in self.done:
            fn(self)


async def _hold(inbound: Inbound, ctx: _Context, nbytes: int) -> tuple[str | None, asyncio.Task[None]]:
    """``nbytes`` held for ``ctx``'s call on a task of its own (its ender cancels that task);
    the refusal, or None."""
    result: list[str | None] = []
    started = asyncio.Event()

    async def call() -> None:
        task = asyncio.current_task()
        assert task is not None
        result.append(inbound._hold(f"peer:{ctx.peer()}", nbytes, ctx, Call(task)))  # type: ignore[arg-type]
        started.set()
        await asyncio.sleep(60)

    task = asyncio.ensure_future(call())
    await started.wait()
    return result[0], task


def test_a_client_past_its_limit_is_refused_and_a_newcomer_makes_room() -> None:
    async def scenario() -> None:
        budget = MemoryBudget(per_client=64 * MiB, total=256 * MiB)
        inbound = Inbound(64 * MiB, 64 * MiB, budget)
        a, b, c = _Context("a"), _Context("b"), _Context("c")
        held_a = [await _hold(inbound, a, 20 * MiB) for _ in range(3)]
        assert all(refusal is None for refusal, _ in held_a)
        refusal, _ = await _hold(inbound, a, 20 * MiB)
        assert refusal is not None and "past its limit" in refusal  # 80 MiB > 64 per client
        held_b = [await _hold(inbound, b, 20 * MiB) for _ in range(2)]
        assert all(refusal is None for refusal, _ in held_b)
        assert budget.by_kind()[REQUESTS_IN_FLIGHT] == 5 * 20 * MiB * REQUEST_COPIES
        # 200 of the 224 MiB outside the reserve: c's 40 do not fit; c is below its share
        # (112 MiB of messages among 3 clients): a's newest call (a is furthest above) ends.
        refusal, task_c = await _hold(inbound, c, 20 * MiB)
        assert refusal is None and inbound.evicted == 1
        await asyncio.wait([held_a[-1][1]], timeout=10)  # a bound, not a timing: it ends at once
        assert held_a[-1][1].cancelled()
        assert not any(t.done() for _, t in held_a[:-1] + held_b)
        assert inbound.held == 5 * 20 * MiB
        for ctx in (a, b, c):
            ctx.end()
        assert inbound.held == 0 and budget.by_kind()[REQUESTS_IN_FLIGHT] == 0
        for _, t in [*held_a, *held_b, (None, task_c)]:
            t.cancel()
        await asyncio.gather(*(t for _, t in [*held_a, *held_b, (None, task_c)]), return_exceptions=True)

    asyncio.run(scenario())


def test_small_messages_are_never_refused_for_the_total() -> None:
    async def scenario() -> None:
        budget = MemoryBudget(per_client=64 * MiB, total=64 * MiB)
        budget.charge_working(64 * MiB, "execution tensors")  # the total is full
        inbound = Inbound(64 * MiB, 64 * MiB, budget)
        refusal, task = await _hold(inbound, _Context("v"), 1024)
        assert refusal is None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


def _call() -> Call:
    task = asyncio.current_task()
    assert task is not None
    return Call(task)


def test_a_clients_calls_let_go_in_any_order_leave_nothing_behind() -> None:
    async def scenario() -> None:
        inbound = Inbound(1024, 4096)
        a, b = _Context("a"), _Context("b")
        lets: list[Callable[[], None]] = []
        for ctx, nbytes in ((a, 100), (a, 200), (b, 50), (a, 300)):
            call = _call()
            assert inbound._hold(f"peer:{ctx.peer()}", nbytes, ctx, call) is None  # type: ignore[arg-type]
            lets.append(call.let_go)
        assert inbound.held == 650 and inbound.holders() == {"peer:a": 600, "peer:b": 50}
        lets[1]()  # a's middle call first
        lets[1]()  # and again (its call's end): nothing given back twice
        assert inbound.held == 450 and inbound.holders()["peer:a"] == 400
        lets[2]()
        assert "peer:b" not in inbound.holders()  # its last call let go
        # a's limit counts what a still holds: 400 + 3,700 is past 4,096.
        assert isinstance(inbound._hold("peer:a", 3700, a, _call()), str)  # type: ignore[arg-type]
        a.end()  # the call ends: every call of a's not yet let go is
        assert inbound.held == 0 and not inbound.holders()
        # A client that left and comes back starts from nothing.
        again = _call()
        assert inbound._hold("peer:a", 4096, _Context("a"), again) is None  # type: ignore[arg-type]
        assert inbound.held == 4096
        again.let_go()
        assert inbound.held == 0 and not inbound.holders()

    asyncio.run(scenario())


def test_idle_client_records_are_kept_for_their_next_call_and_bounded() -> None:
    """A client calling one at a time keeps its record between calls (none made per call);
    records of clients holding nothing are swept as new clients come, so they stay bounded."""

    async def scenario() -> None:
        inbound = Inbound(1024, 4096)
        a = _Context("a")
        first = _call()
        assert inbound._hold("peer:a", 10, a, first) is None  # type: ignore[arg-type]
        record = inbound._clients["peer:a"]
        first.let_go()
        second = _call()
        assert inbound._hold("peer:a", 10, a, second) is None  # type: ignore[arg-type]
        assert inbound._clients["peer:a"] is record and inbound.holders() == {"peer:a": 10}
        for n in range(10 * IDLE_CLIENTS):  # many clients, one call each
            call = _call()
            assert inbound._hold(f"peer:{n}", 1, _Context(str(n)), call) is None  # type: ignore[arg-type]
            call.let_go()
        assert len(inbound._clients) <= 2 * IDLE_CLIENTS + 1
        assert inbound.holders() == {"peer:a": 10}  # the holding client is never swept
        second.let_go()
        assert inbound.held == 0 and not inbound.holders()

    asyncio.run(scenario())


def test_an_answer_within_the_window_needs_no_wait_and_a_large_one_its_turn() -> None:
    from nnhal.server.rpc.inbound import WINDOW_BYTES

    async def scenario() -> None:
        inbound = Inbound(1024)
        ctx = _Context("a")
        let: list[int] = []
        assert inbound.answer(ctx, lambda: let.append(1), WINDOW_BYTES, "x") is None  # type: ignore[arg-type]
        assert let == [1]  # let go before the answer is returned
        handing = inbound.answer(ctx, lambda: let.append(2), WINDOW_BYTES + 1, "x")  # type: ignore[arg-type]
        assert let == [1, 2] and handing is not None
        await handing  # the connection's first large answer: its turn at once
        ctx.end()  # the answer written: the next one's turn

    asyncio.run(scenario())

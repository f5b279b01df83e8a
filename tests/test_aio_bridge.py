"""The bridge's Callback of an asyncio task is released once, even for a task already done
when it is tied (the race that once left a waiter of ``test_faults`` without its callback)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject
from tests.aio_bridge import _Loop

pytestmark = pytest.mark.timeout(60)

WAIT_S = 10.0


def _done_future(loop: asyncio.AbstractEventLoop, value: Any = None, error: BaseException | None = None) -> Any:
    """A future already resolved when the bridge ties its Callback to it: the loop then has
    nothing left to do and sleeps, so only a done callback added on its own thread runs."""
    fut: asyncio.Future[Any] = loop.create_future()
    if error is None:
        fut.set_result(value)
    else:
        fut.set_exception(error)
    return fut


@pytest.mark.parametrize("rounds", [50])
def test_a_task_done_before_its_callback_is_tied_still_notifies_once(rounds: int) -> None:
    bridge = _Loop()
    try:
        for _ in range(rounds):
            ok = bridge.start(lambda: _done_future(bridge.loop, 7), lambda v: (ErrorStatus.NONE, v, ""))
            dead = bridge.start(
                lambda: _done_future(bridge.loop, error=DeadObject("gone")), lambda v: (ErrorStatus.NONE, v, "")
            )
            assert ok.wait(WAIT_S) and ok.get() == 7
            assert dead.wait(WAIT_S) and dead.status == ErrorStatus.DEAD_OBJECT
            assert ok.notifications == 1 and dead.notifications == 1
    finally:
        bridge.close()

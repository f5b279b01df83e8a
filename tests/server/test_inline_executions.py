"""When an execution may run on the server's event loop (``Scheduler.starts_at_once``), in process.

The RPC layer runs a short execution on the loop's thread only when it would get a slot
without waiting: a free slot, nobody queued, and no higher-priority work of the same
client in flight (which would pause it). One thread, no waits.
"""

from __future__ import annotations

from nnhal.core.enums import Priority
from nnhal.server.scheduler import Scheduler


def test_an_idle_device_starts_at_once_and_a_full_one_does_not() -> None:
    sched = Scheduler(slots=2, queue_depth=4)
    assert sched.starts_at_once("a", Priority.MEDIUM)
    first = sched.admit("a", Priority.MEDIUM)
    sched.acquire(first, None)
    assert sched.starts_at_once("b", Priority.MEDIUM)  # one slot left
    second = sched.admit("b", Priority.MEDIUM)
    sched.acquire(second, None)
    assert not sched.starts_at_once("c", Priority.MEDIUM)  # both slots taken
    sched.release(first)
    assert sched.starts_at_once("c", Priority.MEDIUM)
    sched.release(second)


def test_the_same_clients_higher_priority_work_holds_it_off() -> None:
    sched = Scheduler(slots=2, queue_depth=4)
    high = sched.admit("a", Priority.HIGH)
    assert not sched.starts_at_once("a", Priority.LOW)  # it would be outranked
    assert sched.starts_at_once("a", Priority.HIGH)
    assert sched.starts_at_once("b", Priority.LOW)  # priorities are per client
    sched.release(high)


def test_a_shut_scheduler_starts_nothing() -> None:
    sched = Scheduler(slots=1, queue_depth=0)
    sched.shut("draining")
    assert not sched.starts_at_once("a", Priority.MEDIUM)

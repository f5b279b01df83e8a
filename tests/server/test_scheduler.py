"""Scheduler ordering and admission (nnhal.server.scheduler), in process.

Waiting executions are threads blocked in ``acquire``; every wait is bounded and
every thread is joined before the test ends. No assertion depends on how fast
the machine is: a test waits (bounded) for a state, then checks an order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from nnhal.core.enums import Priority
from nnhal.core.errors import MissedDeadlineTransient, ResourceExhaustedTransient
from nnhal.server.scheduler import Scheduler, Ticket
from tests.conftest import until

WAIT_S = 10.0


def _until(predicate: Callable[[], bool], what: str) -> None:
    until(predicate, what, WAIT_S, 0.001)


class Waiters:
    """Threads acquiring tickets; each records its ticket when it gets a slot, then
    holds the slot until told to release it."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.order: list[str] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._release: dict[str, threading.Event] = {}
        self.errors: list[BaseException] = []

    def start(self, name: str, ticket: Ticket) -> None:
        """Queue ``ticket`` (the test waits until it is queued, so arrival order is known)."""
        before = self.sched.queued
        go = self._release[name] = threading.Event()

        def run() -> None:
            try:
                self.sched.acquire(ticket, None)
                with self._lock:
                    self.order.append(name)
                go.wait(WAIT_S)
            except BaseException as err:  # reported by close()
                self.errors.append(err)
            finally:
                self.sched.release(ticket)

        thread = threading.Thread(target=run, name=f"waiter-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()
        _until(lambda: self.sched.queued > before or name in self.order, f"{name} to queue")

    def done(self, name: str) -> None:
        """Let ``name`` release its slot."""
        self._release[name].set()

    def running(self, n: int) -> list[str]:
        _until(lambda: len(self.order) >= n, f"{n} waiters to run")
        with self._lock:
            return list(self.order)

    def close(self) -> None:
        for go in self._release.values():
            go.set()
        for thread in self._threads:
            thread.join(WAIT_S)
            assert not thread.is_alive(), f"{thread.name} still running"
        assert not self.errors, self.errors


@pytest.fixture
def waiters() -> Iterator[Callable[[Scheduler], Waiters]]:
    made: list[Waiters] = []

    def make(sched: Scheduler) -> Waiters:
        made.append(Waiters(sched))
        return made[-1]

    yield make
    for w in made:
        w.close()


def _running(sched: Scheduler, client: str, priority: Priority = Priority.MEDIUM) -> Ticket:
    ticket = sched.admit(client, priority)
    sched.acquire(ticket, None)  # uncontended: returns at once
    assert ticket.running
    return ticket


def test_least_recently_served_client_goes_first(waiters: Callable[[Scheduler], Waiters]) -> None:
    sched = Scheduler(slots=1)
    holder = _running(sched, "A")  # A was served last
    w = waiters(sched)
    w.start("A2", sched.admit("A", Priority.MEDIUM))
    w.start("B1", sched.admit("B", Priority.MEDIUM))
    sched.release(holder)
    assert w.running(1) == ["B1"]  # B arrived later but was never served
    w.done("B1")
    assert w.running(2) == ["B1", "A2"]


def test_client_holding_fewest_slots_goes_first(waiters: Callable[[Scheduler], Waiters]) -> None:
    sched = Scheduler(slots=3)
    _running(sched, "A")
    a2 = _running(sched, "A")
    b1 = _running(sched, "B")  # B served most recently, but holds one slot to A's two
    w = waiters(sched)
    w.start("A3", sched.admit("A", Priority.MEDIUM))
    w.start("B2", sched.admit("B", Priority.MEDIUM))
    sched.release(b1)
    assert w.running(1) == ["B2"]
    sched.release(a2)
    assert w.running(2) == ["B2", "A3"]


def test_priority_then_arrival_within_a_client(waiters: Callable[[Scheduler], Waiters]) -> None:
    sched = Scheduler(slots=1)
    sched.hold_off_ns = 0  # no pause after the HIGH work: the order alone is under test
    holder = _running(sched, "Z")
    w = waiters(sched)
    w.start("low", sched.admit("A", Priority.LOW))
    w.start("medium1", sched.admit("A", Priority.MEDIUM))
    w.start("high", sched.admit("A", Priority.HIGH))
    w.start("medium2", sched.admit("A", Priority.MEDIUM))
    sched.release(holder)
    for n, name in enumerate(["high", "medium1", "medium2", "low"], start=1):
        assert w.running(n)[-1] == name
        w.done(name)


def test_lower_priority_waits_while_higher_of_same_client_is_in_flight(
    waiters: Callable[[Scheduler], Waiters],
) -> None:
    sched = Scheduler(slots=2)
    sched.hold_off_ns = 0
    high = sched.admit("A", Priority.HIGH)  # launched, not yet running
    other = _running(sched, "B", Priority.LOW)  # another client's priorities do not matter
    w = waiters(sched)
    w.start("low", sched.admit("A", Priority.LOW))
    assert w.order == [] and sched.queued == 1  # a slot is free, yet LOW of A waits
    sched.release(high)
    assert w.running(1) == ["low"]
    sched.release(other)


def test_high_preempts_low_of_the_same_client_at_a_checkpoint() -> None:
    sched = Scheduler(slots=2)
    sched.hold_off_ns = 0
    low = _running(sched, "A", Priority.LOW)
    sched.checkpoint(low, None)  # nothing outranks it: returns at once
    stranger = sched.admit("B", Priority.HIGH)
    sched.checkpoint(low, None)  # another client's HIGH does not pre-empt A's LOW
    assert low.running and low.preempted == 0
    sched.release(stranger)

    high = sched.admit("A", Priority.HIGH)
    paused = threading.Thread(target=sched.checkpoint, args=(low, None), name="low-checkpoint", daemon=True)
    paused.start()
    try:
        _until(lambda: low.preempted == 1 and not low.running, "LOW to pause")
        sched.acquire(high, None)  # the paused LOW gave its slot up
        assert high.running
        assert paused.is_alive()  # still paused while HIGH runs
        sched.release(high)
        paused.join(WAIT_S)
        assert not paused.is_alive()
        assert low.running and low.delayed
    finally:
        sched.release(high)
        sched.release(low)
        paused.join(WAIT_S)
    assert sched.in_flight == 0


def test_admission_beyond_queue_depth_is_transient() -> None:
    sched = Scheduler(slots=1, queue_depth=2)
    tickets = [sched.admit(f"c{k}", Priority.MEDIUM) for k in range(3)]
    with pytest.raises(ResourceExhaustedTransient, match="saturated"):
        sched.admit("late", Priority.HIGH)
    assert sched.in_flight == 3
    sched.release(tickets[0])
    sched.release(tickets[0])  # idempotent: frees one place only
    tickets[0] = sched.admit("late", Priority.HIGH)
    with pytest.raises(ResourceExhaustedTransient):
        sched.admit("later", Priority.LOW)
    for t in tickets:
        sched.release(t)
    assert sched.in_flight == 0


def test_no_queue_admits_only_the_slots() -> None:
    sched = Scheduler(slots=2, queue_depth=0)
    first, second = sched.admit("a", Priority.LOW), sched.admit("b", Priority.LOW)
    with pytest.raises(ResourceExhaustedTransient):
        sched.admit("c", Priority.LOW)
    sched.release(first)
    sched.release(second)


def test_deadline_passing_in_the_queue_is_transient_and_leaves_the_queue() -> None:
    sched = Scheduler(slots=1)
    holder = _running(sched, "A")
    late = sched.admit("B", Priority.HIGH)
    with pytest.raises(MissedDeadlineTransient, match="waited for the device"):
        sched.acquire(late, time.monotonic_ns())
    assert sched.queued == 0 and not late.running
    sched.release(late)
    sched.release(holder)
    assert sched.in_flight == 0


# -- per-client state is bounded (issue #11, item 5) -------------------------------------
def test_forget_drops_a_clients_fairness_record() -> None:
    s = Scheduler(slots=1, queue_depth=4)
    for client in ("a", "b"):
        t = s.admit(client, Priority.MEDIUM)
        s.acquire(t, None)
        s.release(t)
    assert s.clients_tracked() == 2
    s.forget("a")
    s.forget("never-seen")
    assert s.clients_tracked() == 1


def test_fairness_records_stay_bounded_over_many_sessions(monkeypatch: pytest.MonkeyPatch) -> None:
    from nnhal.server import scheduler

    monkeypatch.setattr(scheduler, "SERVED_BOUND", 16)
    s = Scheduler(slots=1, queue_depth=4)
    held = s.admit("busy", Priority.MEDIUM)
    s.acquire(held, None)
    for k in range(200):  # sessions that come and go without a forget
        t = s.admit(f"client-{k}", Priority.MEDIUM)
        s.release(held)
        s.acquire(t, None)
        held = t
        assert s.clients_tracked() <= 17
    s.release(held)
    assert s.in_flight == 0


def test_forget_keeps_the_record_of_a_client_with_work_admitted() -> None:
    s = Scheduler(slots=1, queue_depth=4)
    t = s.admit("a", Priority.MEDIUM)
    s.acquire(t, None)
    s.forget("a")  # another session of the same client still has work
    assert s.clients_tracked() == 1
    s.release(t)
    s.forget("a")
    assert s.clients_tracked() == 0


def test_try_start_takes_a_free_slot_in_one_step_and_never_waits() -> None:
    s = Scheduler(slots=1, queue_depth=4)
    t = s.try_start("a", Priority.MEDIUM)
    assert t is not None and t.running and s.in_flight == 1
    # No free slot: nothing taken (admit/acquire decide, queue or refuse).
    assert s.try_start("b", Priority.HIGH) is None
    assert s.in_flight == 1
    s.release(t)
    assert s.in_flight == 0 and s.try_start("b", Priority.MEDIUM) is not None


def test_try_start_defers_to_waiting_work_higher_priority_and_the_shut() -> None:
    s = Scheduler(slots=2, queue_depth=4)
    high = s.admit("a", Priority.HIGH)  # in flight, not yet running
    assert s.try_start("a", Priority.LOW) is None  # outranked by its own client's work
    other = s.try_start("b", Priority.LOW)  # another client is not
    assert other is not None
    s.release(other)
    s.release(high)
    assert s.try_start("a", Priority.LOW) is None  # the hold-off after HIGH work
    s.hold_off_ns = 0
    assert s.try_start("a", Priority.LOW) is not None
    s.shut("draining")
    assert s.try_start("c", Priority.HIGH) is None


def test_try_start_respects_the_admission_cap() -> None:
    s = Scheduler(slots=2, queue_depth=0)
    first = s.admit("a", Priority.MEDIUM)  # admitted, not running: one slot left by the cap
    second = s.try_start("b", Priority.MEDIUM)
    assert second is not None
    assert s.try_start("c", Priority.MEDIUM) is None  # the cap (slots + queue depth) is reached
    for t in (first, second):
        s.release(t)
    assert s.in_flight == 0


def test_a_client_served_again_keeps_its_mark_and_a_forgotten_one_is_marked_anew() -> None:
    s = Scheduler(slots=2)
    t = s.try_start("a", Priority.MEDIUM)
    assert t is not None
    s.release(t)
    t = s.try_start("a", Priority.MEDIUM)  # its mark is the newest already
    assert t is not None and s.clients_tracked() == 1
    s.release(t)
    s.forget("a")
    assert s.clients_tracked() == 0
    t = s.try_start("a", Priority.MEDIUM)  # marked again after its record was dropped
    assert t is not None and s.clients_tracked() == 1
    s.release(t)
    u = s.try_start("b", Priority.MEDIUM)
    assert u is not None and s.clients_tracked() == 2
    s.release(u)


def test_try_start_with_nothing_admitted_still_defers_to_the_shut_and_a_hold_off() -> None:
    s = Scheduler(slots=1, queue_depth=0)
    high = s.try_start("a", Priority.HIGH)
    assert high is not None
    s.release(high)
    assert s.in_flight == 0
    # Nothing admitted (the fast path), yet the client's recent HIGH work holds its LOW work off,
    # and another client's is not held off.
    assert s.try_start("a", Priority.LOW) is None
    other = s.try_start("b", Priority.LOW)
    assert other is not None
    s.release(other)
    s.shut("draining")
    assert s.in_flight == 0 and s.try_start("b", Priority.HIGH) is None


def test_release_keeps_the_hold_offs_bounded_and_their_top_exact() -> None:
    s = Scheduler(slots=2)
    s.hold_off_ns = 1_000_000  # 1 ms
    for client in ("a", "b", "c"):
        t = s.try_start(client, Priority.HIGH)
        assert t is not None
        s.release(t)
    time.sleep(0.005)  # every hold-off expired
    # One client's lone hold-off, just set: nothing of the others' is kept past the next sweep.
    for _ in range(3):
        t = s.try_start("d", Priority.MEDIUM)
        assert t is not None
        s.release(t)
    assert set(s._recent) == {("d", int(Priority.MEDIUM))}
    assert s._recent_top == Priority.MEDIUM
    time.sleep(0.005)
    # LOW work sweeps too (its own release sets no hold-off): the top comes down to LOW.
    t = s.try_start("e", Priority.LOW)
    assert t is not None
    s.release(t)
    assert s._recent == {} and s._recent_top == Priority.LOW


def test_a_ticket_is_its_own_identity_and_starts_with_no_waits() -> None:
    """Tickets compare and hash by identity (released by identity); a new one has waited and been
    paused never, and its repr names its fields."""
    s = Scheduler(slots=1)
    a = s.try_start("c", Priority.MEDIUM)
    b = Ticket("c", Priority.MEDIUM, a.seq if a is not None else 0, True)
    assert a is not None and a.running and a != b and len({a, b}) == 2
    assert (a.delayed, a.preempted) == (False, 0) and (b.delayed, b.preempted) == (False, 0)
    assert "client='c'" in repr(a) and "preempted=0" in repr(a)
    s.release(a)
    assert not a.running and s.in_flight == 0

"""When an execution may run on the server's event loop, in process.

The owner lets a short execution run on the loop's thread (``Executions.runs_inline``) only when
its model has run before, fast, with little inline data, no fault or delay set, and it
would get a slot without waiting — a free slot, nobody queued, and no higher-priority work of
the same client in flight (which would pause it): ``runs_inline`` takes the slot then, or
nothing (``Scheduler.try_start``).
One thread, no waits, no timing asserted.
"""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import ErrorStatus, ExecutionPreference, Priority
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.server.driver import DeviceConfig, Driver
from nnhal.server.executions import Execution, Executions, owner
from nnhal.server.scheduler import Scheduler
from nnhal.server.session import Faults, Session
from tests.conftest import add_model


def _starts(sched: Scheduler, client: str, priority: Priority) -> bool:
    """Whether ``try_start`` starts an execution of ``client`` at ``priority`` at once (the
    slot it takes given back)."""
    ticket = sched.try_start(client, priority)
    if ticket is None:
        return False
    sched.release(ticket)
    return True


def test_an_idle_device_starts_at_once_and_a_full_one_does_not() -> None:
    sched = Scheduler(slots=2, queue_depth=4)
    first = sched.try_start("a", Priority.MEDIUM)
    assert first is not None
    second = sched.try_start("b", Priority.MEDIUM)  # one slot left
    assert second is not None
    assert sched.try_start("c", Priority.MEDIUM) is None  # both slots taken
    sched.release(first)
    assert _starts(sched, "c", Priority.MEDIUM)
    sched.release(second)


def test_the_same_clients_higher_priority_work_holds_it_off() -> None:
    sched = Scheduler(slots=2, queue_depth=4)
    high = sched.admit("a", Priority.HIGH)
    assert not _starts(sched, "a", Priority.LOW)  # it would be outranked
    assert _starts(sched, "a", Priority.HIGH)
    assert _starts(sched, "b", Priority.LOW)  # priorities are per client
    sched.release(high)


def test_the_same_clients_recent_higher_priority_work_holds_it_off_with_nothing_admitted() -> None:
    sched = Scheduler(slots=2, queue_depth=4)
    sched.release(sched.admit("a", Priority.HIGH))
    assert sched.in_flight == 0
    assert not _starts(sched, "a", Priority.LOW)  # within the hold-off
    assert _starts(sched, "a", Priority.HIGH)
    assert _starts(sched, "b", Priority.LOW)  # another client's work is not held off
    sched.hold_off_ns = 0
    assert _starts(sched, "a", Priority.LOW)  # the hold-off over


def test_a_shut_scheduler_starts_nothing() -> None:
    sched = Scheduler(slots=1, queue_depth=0)
    sched.shut("draining")
    assert sched.try_start("a", Priority.MEDIUM) is None


def _add_request(session: str, handle: str, floats: int = 8) -> Execution:
    data = np.ones(2 * floats, np.float32).tobytes()
    n = 4 * floats
    request = Request(
        (RequestArgument(location=DataLocation(0, 0, n)), RequestArgument(location=DataLocation(0, n, n))),
        (RequestArgument(location=DataLocation(1, 0, n)),),
        (InlinePool(data, 2 * n), InlinePool(b"", n)),
    )
    return Execution(session, handle, request)


def _inline(x: Executions, call: Execution) -> bool:
    """``x.runs_inline`` of ``call``, as a transport asks it (the slot it takes given back)."""
    size = sum(len(p.data) for p in call.request.pools if isinstance(p, InlinePool))
    inline = x.runs_inline(call.session, call.prepared_model, size)
    if inline is None:
        return False
    x.driver.scheduler.release(inline[1])
    return True


def _prepared(driver: Driver) -> tuple[Session, str]:
    """A session of ``driver`` and the handle of an ADD model prepared in it."""
    session = driver.open_session("t", "unix:/tmp/nnhal-test.sock")
    job = driver.begin_prepare(session, add_model(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, b"")
    try:
        handle, _ = job.run()
    finally:
        job.close()
    return session, handle


def test_a_short_execution_runs_inline_once_its_model_has_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # The rule under test is "a model whose fastest run is known and short"; a loaded machine
    # can stretch one ADD of 2x4 past the real 1 ms limit, so the limit is made roomy here.
    monkeypatch.setattr(owner, "INLINE_MAX_NS", 60_000_000_000)
    driver = Driver(DeviceConfig(fault_injection=True))
    x = Executions(driver)
    session, handle = _prepared(driver)
    msg = _add_request(session.id, handle)
    assert not _inline(x, msg)  # never run: its duration is unknown
    result = x.execute(x.method("test"), lambda: msg)
    assert result.status == ErrorStatus.NONE
    assert _inline(x, msg)  # ADD of 2x4 floats: its fastest run is known and under the limit
    assert not _inline(x, _add_request(session.id, "missing"))  # the worker reports it
    driver.set_faults(session, Faults(execute_delay_ms=5))
    assert not _inline(x, msg)  # an injected delay would hold the loop
    driver.set_faults(session, Faults())
    ticket = driver.scheduler.admit("someone", Priority.MEDIUM)
    other = driver.scheduler.admit("else", Priority.MEDIUM)
    driver.scheduler.acquire(ticket, None)
    driver.scheduler.acquire(other, None)
    assert not _inline(x, msg)  # both slots busy: it would wait
    driver.scheduler.release(ticket)
    driver.scheduler.release(other)
    assert _inline(x, msg)


def test_a_large_request_goes_to_a_worker() -> None:
    driver = Driver(DeviceConfig())
    x = Executions(driver)
    session, handle = _prepared(driver)
    call = _add_request(session.id, handle)
    x.execute(x.method("test"), lambda: call)
    big = owner.INLINE_MAX_BYTES // 8 + 1  # floats per input: both exceed the limit
    assert not _inline(x, _add_request(session.id, handle, big))

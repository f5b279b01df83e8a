"""The owner of a device's HAL calls, in process: answers, refusals, the lifecycle, the
long-call caps, injected faults and the hooks (told in their documented order).

No transport, no thread but the test's, no timing asserted.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from nnhal.core.enums import ErrorStatus, ExecutionPreference, HalVersion, Priority
from nnhal.core.errors import DeviceUnavailable, InvalidArgument, ResourceExhaustedTransient
from nnhal.core.types import DataLocation, ExecutionResult, InlinePool, Request, RequestArgument
from nnhal.server.driver import DeviceConfig, Driver
from nnhal.server.executions import (
    Abort,
    Call,
    Execution,
    Executions,
    Fault,
    FencedExecution,
    Launch,
    Notify,
    Observer,
    Preparation,
    Prepared,
    Refused,
    Timings,
    notified as notified_module,
)
from nnhal.server.executions.hooks import Observers
from nnhal.server.executions.notified import RESULTS_WAITING, TRANSPORT_COPIES
from tests.conftest import add_model

LOCAL = "unix:/tmp/nnhal-test.sock"


class Recorder(Observer):
    """Every hook call, in order: (hook, method, status or answer type)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, object]] = []
        self.timings: list[Timings] = []

    def launch_written(self, call: Call) -> None:
        self.seen.append(("launch_written", call.method, None))

    def started(self, call: Call) -> None:
        self.seen.append(("started", call.method, type(call.args).__name__))

    def finished(self, call: Call, status: ErrorStatus, timings: Timings) -> None:
        self.seen.append(("finished", call.method, status))
        self.timings.append(timings)

    def answered(self, call: Call, answer: object) -> None:
        self.seen.append(("answered", call.method, type(answer).__name__))


def _request() -> Request:
    data = np.ones(16, np.float32).tobytes()
    return Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (InlinePool(data, 64), InlinePool(b"", 32)),
    )


def _owner(**config: object) -> tuple[Executions, str, str]:
    """An owner of a fresh device, a session on it and the handle of an ADD model prepared there."""
    x = Executions(Driver(DeviceConfig(**config)))  # type: ignore[arg-type]
    session = x.driver.open_session("t", LOCAL)
    events = list(x.prepare(x.method("prepareModel_1_3", timer="prepare"), lambda: _preparation(session.id)))
    notify = events[-1]
    assert isinstance(notify, Notify) and isinstance(notify.answer, Prepared)
    return x, session.id, notify.answer.handle


def _preparation(session: str) -> Preparation:
    return Preparation(session, add_model(), ExecutionPreference.FAST_SINGLE_ANSWER)


def test_a_synchronous_execution_answers_and_tells_the_hooks_in_order() -> None:
    x, session, handle = _owner()
    seen = Recorder()
    x.observe(seen)
    m = x.method("executeSynchronously_1_3")
    result = x.execute(m, lambda: Execution(session, handle, _request()))
    assert isinstance(result, ExecutionResult) and result.status == ErrorStatus.NONE
    assert np.frombuffer(result.output_pools[1], np.float32).tolist() == [2.0] * 8
    assert seen.seen == [
        ("started", "executeSynchronously_1_3", "Execution"),
        ("finished", "executeSynchronously_1_3", ErrorStatus.NONE),
        ("answered", "executeSynchronously_1_3", "ExecutionResult"),
    ]
    t = seen.timings[0]
    assert t.started is not None and t.arrived <= t.started <= t.finished
    assert x.lifecycle.active == 0 and x.driver.scheduler.in_flight == 0


def test_a_refused_execution_is_a_refusal_counted_and_told() -> None:
    x, session, _ = _owner()
    seen = Recorder()
    x.observe(seen)
    result = x.execute(x.method("executeSynchronously_1_3"), lambda: Execution(session, "missing", _request()))
    assert isinstance(result, Refused) and result.status == ErrorStatus.INVALID_ARGUMENT
    assert [s[0] for s in seen.seen] == ["finished", "answered"]  # never started
    assert seen.timings[0].started is None
    assert x.lifecycle.active == 0


def test_an_asynchronous_execution_tells_launch_written_before_it_runs() -> None:
    x, session, handle = _owner()
    seen = Recorder()
    x.observe(seen)
    events = x.execute_async(x.method("execute_1_3", "an execution"), lambda: Execution(session, handle, _request()))
    launch = next(events)
    assert launch == Launch(ErrorStatus.NONE) and seen.seen == []  # not written until resumed
    notify = next(events)
    assert isinstance(notify, Notify) and notify.status == ErrorStatus.NONE
    assert [s[0] for s in seen.seen] == ["launch_written", "started", "finished", "answered"]
    assert list(events) == [] and x.lifecycle.active == 0


def test_an_asynchronous_call_abandoned_after_its_launch_closes_its_job() -> None:
    x, session, handle = _owner()
    events = x.execute_async(x.method("execute_1_3"), lambda: Execution(session, handle, _request()))
    next(events)
    # Parked at its launch: counted, its request data charged, no scheduler ticket yet.
    assert x.driver.scheduler.in_flight == 0 and x.lifecycle.active == 1
    assert _held(x) == 96  # its input and output pools
    events.close()
    assert x.driver.scheduler.in_flight == 0 and x.lifecycle.active == 0
    assert _held(x) == 0


def _held(x: Executions) -> int:
    """Bytes charged for calls in progress: request data and answers waiting to be written."""
    kinds = x.driver.budget.by_kind()
    return kinds.get("request data", 0) + kinds.get(RESULTS_WAITING, 0)


def test_calls_whose_launch_is_not_written_hold_no_place_on_the_device() -> None:
    """Issue #24: a client that never reads its launch statuses cannot saturate the device."""
    x, session, handle = _owner(slots=1, queue_depth=0)
    m = x.method("execute_1_3", "an execution")
    parked = [x.execute_async(m, lambda: Execution(session, handle, _request())) for _ in range(8)]
    assert all(next(events) == Launch(ErrorStatus.NONE) for events in parked)
    assert x.driver.scheduler.in_flight == 0
    other = x.driver.open_session("victim", LOCAL).id
    events = list(x.prepare(x.method("prepareModel_1_3", timer="prepare"), lambda: _preparation(other)))
    notify = events[-1]
    assert isinstance(notify, Notify) and isinstance(notify.answer, Prepared)
    victim = notify.answer.handle
    result = x.execute(x.method("executeSynchronously_1_3"), lambda: Execution(other, victim, _request()))
    assert isinstance(result, ExecutionResult) and result.status == ErrorStatus.NONE
    for stream in parked:
        stream.close()
    assert x.lifecycle.active == 0 and _held(x) == 0


def test_a_written_launch_on_a_saturated_device_is_notified_resource_exhausted() -> None:
    x, session, handle = _owner(slots=1, queue_depth=0)
    events = x.execute_async(x.method("execute_1_3", "an execution"), lambda: Execution(session, handle, _request()))
    assert next(events) == Launch(ErrorStatus.NONE)
    ticket = x.driver.scheduler.admit("someone else", Priority.MEDIUM)
    try:
        notify = next(events)
    finally:
        x.driver.scheduler.release(ticket)
    assert isinstance(notify, Notify) and notify.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    assert "saturated" in notify.message
    assert list(events) == [] and x.driver.scheduler.in_flight == 0 and _held(x) == 0


def test_an_answer_waiting_to_be_written_is_charged_to_its_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notified_module, "SMALL_ANSWER_BYTES", 0)  # this answer's 32 bytes count whole
    x, session, handle = _owner()
    events = x.execute_async(x.method("execute_1_3", "an execution"), lambda: Execution(session, handle, _request()))
    next(events)
    notify = next(events)
    assert isinstance(notify, Notify) and notify.status == ErrorStatus.NONE
    # Until the notify was written: the answer to its session, the transport's copies to the total.
    assert x.driver.budget.by_kind()[RESULTS_WAITING] == 32 * (1 + TRANSPORT_COPIES)
    assert list(events) == []
    assert _held(x) == 0


def test_an_answer_past_the_clients_limit_is_refused_not_buffered(monkeypatch: pytest.MonkeyPatch) -> None:
    x, session, handle = _owner()
    budget = x.driver.budget
    charge = budget.charge

    def full(sid: str, nbytes: int, what: str = "model constants") -> None:
        if what == RESULTS_WAITING:
            raise ResourceExhaustedTransient("this client already uses 64 of its 64")
        charge(sid, nbytes, what)

    monkeypatch.setattr(budget, "charge", full)
    events = x.execute_async(x.method("execute_1_3", "an execution"), lambda: Execution(session, handle, _request()))
    next(events)
    notify = next(events)
    assert isinstance(notify, Notify) and notify.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    assert notify.answer is None and "cannot wait to be written" in notify.message
    assert list(events) == [] and _held(x) == 0


def test_a_launch_error_is_launched_and_notified_with_the_same_status() -> None:
    x, session, _ = _owner()
    events = list(x.execute_async(x.method("execute_1_3"), lambda: Execution(session, "missing", _request())))
    assert [type(e).__name__ for e in events] == ["Launch", "Notify"]
    assert {e.status for e in events} == {ErrorStatus.INVALID_ARGUMENT}


def test_while_draining_new_work_is_refused_with_device_unavailable() -> None:
    x, session, handle = _owner()
    x.lifecycle.begin_drain()
    result = x.execute(x.method("a"), lambda: Execution(session, handle, _request()))
    assert isinstance(result, Refused) and result.status == ErrorStatus.DEVICE_UNAVAILABLE
    events = list(x.prepare(x.method("prepareModel_1_3", "a preparation"), lambda: _preparation(session)))
    assert {e.status for e in events} == {ErrorStatus.DEVICE_UNAVAILABLE}
    with pytest.raises(DeviceUnavailable):
        x.admit("allocate")


def test_the_level_gate_refuses_a_form_newer_than_the_device() -> None:
    x, _, _ = _owner(feature_level=HalVersion.V1_2)
    arrival = x.arrive(x.method("executeSynchronously_1_3"))
    assert arrival is not None and arrival.error is not None
    assert arrival.error.error_status == ErrorStatus.GENERAL_FAILURE
    assert "needs NN HAL 1.3; this device serves 1.2" in arrival.error.message
    assert x.arrive(x.method("executeSynchronously")) is None  # the 1.2 form
    with pytest.raises(InvalidArgument, match=r"a deadline needs NN HAL 1\.3"):
        x.check_burst_fields(True, 0, False)
    x.check_burst_fields(False, 0, False)


def test_injected_faults_apply_to_every_form() -> None:
    x, session, handle = _owner()
    m = x.method("AIDL IPreparedModel.executeSynchronously")
    x.faults.add([Fault(m.name, "error", status=ErrorStatus.MISSED_DEADLINE_TRANSIENT)])
    arrival = x.arrive(m)
    assert arrival is not None and arrival.fault is not None
    result = x.execute(m, lambda: Execution(session, handle, _request()), None, arrival)
    assert isinstance(result, Refused) and result.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert "injected fault" in result.message
    x.faults.add([Fault("prepareModel", "abort", after=1)])
    prepare = x.method("prepareModel", timer="prepare")
    events = x.prepare(prepare, lambda: _preparation(session), None, x.arrive(prepare))
    assert next(events) == Launch(ErrorStatus.NONE)
    with pytest.raises(Abort) as aborted:
        next(events)  # aborted after its launch message; the job is ended
    assert aborted.value.code == 14 and x.lifecycle.active == 0


def test_long_calls_are_capped_per_client() -> None:
    x, session, _ = _owner(max_preparations_per_session=1)
    first = x.prepare(x.method("prepareModel_1_3"), lambda: _preparation(session))
    assert next(first) == Launch(ErrorStatus.NONE)  # holds its place until notified
    second = list(x.prepare(x.method("prepareModel_1_3"), lambda: _preparation(session)))
    assert second[0].status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    assert "cap per client is 1" in second[0].message
    rest = list(first)  # its notify, after which its place is given back
    assert [e.status for e in rest] == [ErrorStatus.NONE]
    assert x.long_calls.in_progress == 0


def test_an_answer_over_the_message_limit_is_invalid_argument() -> None:
    x, session, handle = _owner()
    small = Executions(x.driver, x.metrics, lambda: 16)
    result = small.execute(small.method("e"), lambda: Execution(session, handle, _request()))
    assert isinstance(result, ExecutionResult) and result.status == ErrorStatus.INVALID_ARGUMENT
    assert "shared memory" in result.message and not result.output_pools


def test_a_failing_observer_is_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Observer):
        def started(self, call: Call) -> None:
            raise RuntimeError("boom")

    x, session, handle = _owner()
    seen = Recorder()
    x.observe(Broken())
    x.observe(seen)
    result = x.execute(x.method("e"), lambda: Execution(session, handle, _request()))
    assert result.status == ErrorStatus.NONE
    assert [s[0] for s in seen.seen] == ["started", "finished", "answered"]
    assert "an observer's hook failed" in caplog.text
    assert isinstance(x.observer, Observers)


def test_an_observer_is_told_only_the_hooks_it_overrides() -> None:
    class OnlyAnswered(Observer):
        def __init__(self) -> None:
            self.answers: list[str] = []

        def answered(self, call: Call, answer: object) -> None:
            self.answers.append(call.method)

    only = OnlyAnswered()
    both = Observers([only, Recorder()])
    assert both._answered and len(both._answered) == 2
    assert len(both._started) == 1 and len(both._launch_written) == 1  # the Recorder's alone
    x, session, handle = _owner()
    x.observe(only)
    assert x.execute(x.method("e"), lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    assert only.answers == ["e"]


def test_an_observer_of_failures_is_told_only_the_calls_that_failed() -> None:
    class Failures(Recorder):
        failures_only = True

    failures, every = Failures(), Recorder()
    x, session, handle = _owner()
    x.observe(failures)
    assert isinstance(x.observer, Observers) and x.observer.failures_only
    ok = x.execute(x.method("e"), lambda: Execution(session, handle, _request()))
    events = x.execute_async(x.method("a"), lambda: Execution(session, handle, _request()))
    assert [type(e).__name__ for e in events] == ["Launch", "Notify"]
    assert ok.status == ErrorStatus.NONE and failures.seen == []
    x.observe(every)  # one observer of every call: the other still sees failures only
    assert x.observer is not None and not x.observer.failures_only
    assert x.execute(x.method("e"), lambda: Execution(session, handle, _request())).status == ErrorStatus.NONE
    bad = x.execute(x.method("e"), lambda: Execution(session, "missing", _request()))
    assert bad.status == ErrorStatus.INVALID_ARGUMENT
    assert failures.seen == [("finished", "e", ErrorStatus.INVALID_ARGUMENT), ("answered", "e", "Refused")]
    assert [s[0] for s in every.seen] == ["started", "finished", "answered", "finished", "answered"]


def test_a_fenced_execution_and_its_info_are_told_to_the_hooks() -> None:
    x, session, handle = _owner()
    seen = Recorder()
    x.observe(seen)
    call = FencedExecution(session, handle, _request(), (), False, None, 0)
    fence = x.execute_fenced("executeFenced", call)

    class Live:
        def is_active(self) -> bool:
            return True

        def time_remaining(self) -> float | None:
            return 10.0

    info = x.fenced_info(session, fence, True, Live())
    assert info.signalled and info.status == ErrorStatus.NONE
    assert seen.seen == [
        ("finished", "executeFenced", ErrorStatus.NONE),
        ("answered", "executeFenced", "str"),
        ("finished", "getExecutionInfo", ErrorStatus.NONE),
        ("answered", "getExecutionInfo", "FencedExecutionInfo"),
    ]
    with pytest.raises(InvalidArgument):
        x.execute_fenced("executeFenced", FencedExecution(session, "missing", _request(), (), False, None, 0))
    assert seen.seen[-1] == ("answered", "executeFenced", "Refused")


def _huge_array() -> None:
    np.empty(1 << 62, np.uint8)  # numpy's _ArrayMemoryError, a MemoryError


def _raise(err: Exception) -> None:
    raise err


@pytest.mark.parametrize(
    "fail",
    [_huge_array, lambda: _raise(MemoryError()), lambda: _raise(RuntimeError("[ONNXRuntimeError] Arena alloc failed"))],
    ids=["numpy", "MemoryError", "arena"],
)
def test_an_allocation_failure_is_resource_exhausted_never_general_failure(fail: Callable[[], None]) -> None:
    x, _, _ = _owner()

    def build() -> Execution:
        fail()
        raise AssertionError("unreachable")

    result = x.execute(x.method("executeSynchronously_1_3"), build)
    assert isinstance(result, Refused) and result.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    assert "ran out of memory" in result.message

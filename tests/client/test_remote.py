"""The remote adapter without a server: the transport error table, deadline arithmetic, and
the one call path (unary, launch/notify streams, bursts) mapping failures and declaring death.

Fake RpcError objects and fake stubs stand in for gRPC; nothing listens on a socket.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from nnhal.client.remote import (
    DEADLINE_MARGIN,
    DEFAULT_CALL_TIMEOUT,
    ExecutionOptions,
    RemoteSession,
    calls,
    grpc_timeout,
    map_rpc_error,
    remaining_time,
    wait_bound,
)
from nnhal.client.remote.messages import notify_of
from nnhal.client.remote.monitor import SessionMonitor
from nnhal.core import fastanswer
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import (
    DeadObject,
    GeneralFailure,
    MissedDeadlineTransient,
    ResourceExhaustedPersistent,
    ResourceExhaustedTransient,
)
from nnhal.core.types import Request
from nnhal.proto import service_pb2 as spb, types_pb2 as pb
from tests.client.test_callbacks import FakeChannel

SC = grpc.StatusCode


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "details") -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


# -- the table ------------------------------------------------------------------------
def _expected(code: grpc.StatusCode, had_deadline: bool) -> ErrorStatus:
    if code in (SC.UNAVAILABLE, SC.CANCELLED):
        return ErrorStatus.DEAD_OBJECT
    if code == SC.DEADLINE_EXCEEDED:
        return ErrorStatus.MISSED_DEADLINE_TRANSIENT if had_deadline else ErrorStatus.DEAD_OBJECT
    if code == SC.RESOURCE_EXHAUSTED:
        return ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    return ErrorStatus.GENERAL_FAILURE


@pytest.mark.parametrize("had_deadline", [False, True], ids=["no-deadline", "deadline"])
@pytest.mark.parametrize("code", list(grpc.StatusCode), ids=lambda c: c.name)
def test_every_status_code_maps_to_the_documented_error(code: grpc.StatusCode, had_deadline: bool) -> None:
    err = map_rpc_error(FakeRpcError(code, "the details"), had_deadline=had_deadline, what="execute_1_3")
    assert err.error_status == _expected(code, had_deadline)
    assert err.message.startswith("execute_1_3: ") and "the details" in err.message
    if err.error_status == ErrorStatus.GENERAL_FAILURE:
        assert f"transport error {code.name}" in err.message


def test_the_table_in_exception_classes() -> None:
    assert isinstance(map_rpc_error(FakeRpcError(SC.UNAVAILABLE)), DeadObject)
    assert isinstance(map_rpc_error(FakeRpcError(SC.DEADLINE_EXCEEDED), had_deadline=True), MissedDeadlineTransient)
    assert isinstance(map_rpc_error(FakeRpcError(SC.RESOURCE_EXHAUSTED, "quota")), ResourceExhaustedTransient)
    assert isinstance(map_rpc_error(FakeRpcError(SC.INTERNAL)), GeneralFailure)


@pytest.mark.parametrize("had_deadline", [False, True])
def test_message_over_the_size_limit_is_persistent(had_deadline: bool) -> None:
    details = "Sent message larger than max (1073741900 vs. 1073741824)"
    err = map_rpc_error(FakeRpcError(SC.RESOURCE_EXHAUSTED, details), had_deadline=had_deadline, what="execute")
    assert isinstance(err, ResourceExhaustedPersistent) and "size limit" in err.message


def test_an_error_without_a_code_is_a_general_failure() -> None:
    err = map_rpc_error(grpc.RpcError("odd"), what="call")
    assert isinstance(err, GeneralFailure) and "transport error ?" in err.message and "odd" in err.message


# -- deadlines ------------------------------------------------------------------------
def test_remaining_time_takes_the_earlier_of_timeout_and_deadline() -> None:
    assert remaining_time(None, None) is None
    assert remaining_time(1.5, None) == 1.5
    now = time.monotonic()
    assert remaining_time(None, now + 10.0) == pytest.approx(10.0, abs=0.5)
    assert remaining_time(3.0, now + 10.0) == 3.0
    assert remaining_time(30.0, now + 10.0) == pytest.approx(10.0, abs=0.5)
    passed = remaining_time(None, now - 1.0)
    assert passed is not None and passed < 0  # already passed: travels as 0


def test_grpc_timeout_and_wait_bound_add_the_margin() -> None:
    assert grpc_timeout(None) is None
    assert grpc_timeout(1.0) == 1.0 + DEADLINE_MARGIN
    assert grpc_timeout(-5.0) == DEADLINE_MARGIN
    assert wait_bound(None) == DEFAULT_CALL_TIMEOUT
    assert wait_bound(1.0) == 1.0 + 2 * DEADLINE_MARGIN


# -- the launch / notify / end stream ----------------------------------------------------
def _launch() -> spb.ExecuteEvent:
    return spb.ExecuteEvent(launch=spb.StatusMessage())


def _notify(status: int = 0) -> spb.ExecuteEvent:
    return spb.ExecuteEvent(notify=spb.ExecuteResult(status=status))  # type: ignore[arg-type]


def test_notify_of_reads_launch_then_notify() -> None:
    assert notify_of([_launch(), _notify(4)], "execute_1_3").status == 4
    with pytest.raises(GeneralFailure, match="first message was not the launch status"):
        notify_of([_notify(), _notify()], "execute_1_3")
    with pytest.raises(GeneralFailure, match="ended without a notify"):
        notify_of([_launch()], "execute_1_3")
    with pytest.raises(GeneralFailure, match="ended without a notify"):
        notify_of([], "execute_1_3")


# -- the one call path, on a session with fake stubs ----------------------------------------
def _failing_stream(err: grpc.RpcError, first: list[Any] | None = None) -> Iterator[Any]:
    yield from first or []
    raise err


def _offline_session(stubs: Any) -> RemoteSession:
    """A RemoteSession whose stubs are fakes (no channel, no session stream)."""
    session = RemoteSession.__new__(RemoteSession)
    session.address = "fake"
    session._stubs = stubs
    session._monitor = SessionMonitor(FakeChannel(), "nnhal server at fake")  # type: ignore[arg-type]
    session._closed = False
    session._session_id = "s"
    session._session_call = None
    session._ids = threading.local()
    return session


def _stubs(err: grpc.RpcError) -> Any:
    # ``metadata``: the request id every call carries.
    def unary(request: Any, timeout: float, metadata: Any = ()) -> Any:
        raise err

    def stream(request: Any, timeout: float, metadata: Any = ()) -> Iterator[Any]:
        return _failing_stream(err, [_launch()])

    def burst(requests: Iterator[Any], timeout: float, metadata: Any = ()) -> Iterator[Any]:
        return _failing_stream(err)

    pm = SimpleNamespace(executeSynchronously_1_3=unary, execute_1_3=stream, configureExecutionBurst=burst)
    # The burst stream takes its requests serialized (``Stubs.burst_encoded``).
    return SimpleNamespace(device=SimpleNamespace(getType=unary), prepared_model=pm, burst_encoded=burst)


EMPTY = Request((), (), ())
NO_DEADLINE = ExecutionOptions()


def _close(session: RemoteSession) -> None:
    session._monitor.stop()
    session._closed = True


def _via_unary(session: RemoteSession) -> ErrorStatus:
    try:
        session.execute("pm", EMPTY, NO_DEADLINE)
    except Exception as err:
        return err.error_status  # type: ignore[attr-defined, no-any-return]
    raise AssertionError("no error")


def _via_stream(session: RemoteSession) -> ErrorStatus:
    cb = session.launch_execute(calls.execute_launch(session.session_id, "pm", EMPTY, NO_DEADLINE))
    assert cb.wait(5.0)
    # A failure comes back as a result; a death releases the waiter first, with no value.
    assert cb.value.status == cb.status if cb.value is not None else cb.status == ErrorStatus.DEAD_OBJECT
    assert cb.notifications in (1, 2)
    return cb.status


def _via_burst(session: RemoteSession) -> ErrorStatus:
    stream = session.open_burst()
    status = fastanswer.whole(session.burst_answered(stream, "pm", EMPTY, NO_DEADLINE)).status
    session.close_burst(stream)
    return status


@pytest.mark.parametrize("path", [_via_unary, _via_stream, _via_burst], ids=["unary", "stream", "burst"])
@pytest.mark.parametrize(
    ("code", "details", "status"),
    [
        (SC.UNAVAILABLE, "Socket closed", ErrorStatus.DEAD_OBJECT),
        (SC.DEADLINE_EXCEEDED, "Deadline Exceeded", ErrorStatus.DEAD_OBJECT),
        (SC.RESOURCE_EXHAUSTED, "Received message larger than max", ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT),
        (SC.INTERNAL, "boom", ErrorStatus.GENERAL_FAILURE),
    ],
)
def test_every_call_kind_maps_through_the_one_path(
    path: Callable[[RemoteSession], ErrorStatus], code: grpc.StatusCode, details: str, status: ErrorStatus
) -> None:
    session = _offline_session(_stubs(FakeRpcError(code, details)))
    try:
        assert path(session) == status
        # DEAD_OBJECT declares the session dead: every later call fails at once, without the network.
        assert session.dead == (status == ErrorStatus.DEAD_OBJECT)
        if session.dead:
            with pytest.raises(DeadObject):
                session.device_type()
    finally:
        _close(session)


def test_a_hal_deadline_turns_a_transport_timeout_into_missed_deadline() -> None:
    session = _offline_session(_stubs(FakeRpcError(SC.DEADLINE_EXCEEDED)))
    try:
        with pytest.raises(MissedDeadlineTransient):
            session.execute("pm", EMPTY, ExecutionOptions(timeout=0.5))
        assert not session.dead
    finally:
        _close(session)


def test_death_releases_a_pending_stream_waiter_once() -> None:
    release: queue.Queue[None] = queue.Queue()

    def stuck(request: Any, timeout: float, metadata: Any = ()) -> Iterator[Any]:
        yield _launch()
        release.get(timeout=5.0)  # the server never answers until the test lets go
        raise FakeRpcError(SC.UNAVAILABLE)

    stubs = SimpleNamespace(prepared_model=SimpleNamespace(execute_1_3=stuck))
    session = _offline_session(stubs)
    try:
        cb = session.launch_execute(calls.execute_launch(session.session_id, "pm", EMPTY, NO_DEADLINE))
        threading.Timer(0.05, session._monitor.declare_dead, args=("killed",)).start()
        assert cb.wait(5.0) and cb.status == ErrorStatus.DEAD_OBJECT and cb.value is None
        release.put(None)
        time.sleep(0.05)
        assert cb.notifications in (1, 2) and cb.status == ErrorStatus.DEAD_OBJECT  # the late failure is ignored
    finally:
        release.put(None)
        _close(session)


def test_a_closed_session_refuses_calls() -> None:
    session = _offline_session(_stubs(FakeRpcError(SC.INTERNAL)))
    _close(session)
    with pytest.raises(GeneralFailure, match="closed"):
        session.execute("pm", EMPTY, NO_DEADLINE)


def test_execution_messages_carry_the_deadline_and_options() -> None:
    seen: list[tuple[spb.ExecuteRequest, float]] = []

    def unary(request: spb.ExecuteRequest, timeout: float, metadata: Any = ()) -> spb.ExecuteResult:
        seen.append((request, timeout))
        return spb.ExecuteResult()

    session = _offline_session(SimpleNamespace(prepared_model=SimpleNamespace(executeSynchronously_1_3=unary)))
    try:
        session.execute("pm", EMPTY, ExecutionOptions(measure=True, timeout=1.0, loop_timeout_ns=7, profile=True))
        session.execute("pm", EMPTY, NO_DEADLINE)
    finally:
        _close(session)
    (msg, timeout), (plain, plain_timeout) = seen
    assert msg.session == "s" and msg.prepared_model == "pm" and msg.measure == 1 and msg.profile
    assert msg.loop_timeout_ns == 7 and msg.deadline.has_deadline
    assert 0.9e9 < msg.deadline.remaining_ns <= 1e9 and timeout == pytest.approx(1.0 + DEADLINE_MARGIN, abs=0.1)
    assert not plain.deadline.has_deadline and plain_timeout == DEFAULT_CALL_TIMEOUT
    assert isinstance(plain.deadline, pb.Deadline)


def test_a_burst_the_server_ended_answers_with_a_status() -> None:
    """A server refusing a burst past its cap (or draining) ends the stream; the next
    execution on it is a status saying to open a new burst, not a StopIteration."""

    def ended(requests: Iterator[Any], timeout: float, metadata: Any = ()) -> Iterator[Any]:
        return iter(())

    pm = SimpleNamespace(configureExecutionBurst=ended)
    session = _offline_session(SimpleNamespace(device=SimpleNamespace(), prepared_model=pm, burst_encoded=ended))
    try:
        stream = session.open_burst()
        result = fastanswer.whole(session.burst_answered(stream, "pm", EMPTY, NO_DEADLINE))
        assert result.status == ErrorStatus.GENERAL_FAILURE
        assert "open a new burst" in result.message
        assert not session.dead
        session.close_burst(stream)
    finally:
        _close(session)

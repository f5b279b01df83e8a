"""The driver facade in process (nnhal.server.driver): sessions own every object,
jobs give back what they hold, peer locality is the session's."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import numpy as np
import pytest

from nnhal.core import wire_request, wire_status
from nnhal.core.enums import ErrorStatus, ExecutionPreference, Priority
from nnhal.core.errors import DeadObject, InvalidArgument, ResourceExhaustedTransient
from nnhal.core.types import (
    BufferDesc,
    BufferRole,
    DataLocation,
    InlinePool,
    Model,
    Request,
    RequestArgument,
    SharedMemoryPool,
)
from nnhal.proto import service_pb2 as spb
from nnhal.server.driver import DeviceConfig, Driver
from nnhal.server.executions import Executions
from nnhal.server.rpc.prepared_model_servicer import PreparedModelServicer
from nnhal.server.session import VERIFIED_CLIENT, Session
from nnhal.server.shared_regions import SharedMemoryPolicy
from tests.conftest import add_model

LOCAL = "unix:/tmp/nnhal-test.sock"


def _request(value: float = 1.0) -> Request:
    data = np.full(16, value, np.float32).tobytes()
    return Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (InlinePool(data, 64), InlinePool(b"", 32)),
    )


@pytest.fixture
def driver() -> Iterator[Driver]:
    drv = Driver(DeviceConfig(memory_per_client=1 << 20))
    yield drv
    assert drv.scheduler.in_flight == 0, "a test leaked a scheduler ticket"


def _prepare(driver: Driver, session: Session, token: bytes = b"", model: Model | None = None) -> tuple[str, bytes]:
    job = driver.begin_prepare(
        session, model or add_model(), ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None, token
    )
    try:
        return job.run()
    finally:
        job.close()


def test_execution_result_is_canonical(driver: Driver) -> None:
    session = driver.open_session("t", LOCAL)
    handle, _ = _prepare(driver, session)
    job = driver.begin_execute(session, handle, _request(2.0), measure=True, deadline_ns=None, profile=True)
    try:
        result = job.run()
    finally:
        job.close()
    assert result.status == ErrorStatus.NONE and set(result.output_pools) == {1}
    np.testing.assert_array_equal(np.frombuffer(result.output_pools[1], np.float32), np.full(8, 4.0, np.float32))
    assert [p.operation for p in result.profile] == ["ADD"] and result.profile[0].count == 1
    assert driver.stats()["executions"] == 1


def test_closing_a_session_releases_everything(driver: Driver) -> None:
    session = driver.open_session("t", LOCAL)
    other = driver.open_session("u", LOCAL)
    handle, _ = _prepare(driver, session)
    kept, _ = _prepare(driver, other)
    buffer, _token = driver.allocate(session, BufferDesc(), [handle], [BufferRole(0, 0, 1.0)], [])
    driver.buffer_copy_from(session, buffer, InlinePool(bytes(32), 32), ())
    fence = driver.execute_fenced(session, handle, _request(), [], False, None, 0)
    assert driver.fenced_info(session, fence, True, 30).status == ErrorStatus.NONE
    stats = driver.stats()
    assert (stats["prepared_models"], stats["buffers"], stats["fences"], stats["sessions"]) == (2, 1, 1, 2)
    assert stats["bytes_in_use"] > 32

    assert driver.close_session(session.id) == 1
    stats = driver.stats()
    assert (stats["prepared_models"], stats["buffers"], stats["fences"], stats["sessions"]) == (1, 0, 0, 1)
    assert stats["bytes_in_use"] == driver.budget.used(other.id) > 0
    with pytest.raises(InvalidArgument, match="closed session"):
        driver.session(session.id)
    assert driver.close_session(session.id) == 0
    driver.release_prepared(other, kept)
    assert driver.stats()["bytes_in_use"] == 0


def test_a_call_on_a_session_a_stopping_server_ended_is_dead_object(driver: Driver) -> None:
    # A call gRPC took in just before its stop can run after the stop closed the sessions:
    # the server went away, so the client sees DEAD_OBJECT (its proxies' release drops it at
    # the end of a ``with``), not INVALID_ARGUMENT as if it had named a wrong session.
    session = driver.open_session("t", LOCAL)
    driver.lifecycle.stop()
    driver.close_session(session.id)
    with pytest.raises(DeadObject, match="server is stopping"):
        driver.session(session.id)


def test_a_closed_session_takes_no_new_objects(driver: Driver) -> None:
    session = driver.open_session("t", LOCAL)
    handle, _ = _prepare(driver, session)
    job = driver.begin_prepare(session, add_model(), ExecutionPreference.LOW_POWER, Priority.LOW, None)
    driver.close_session(session.id)
    with pytest.raises(InvalidArgument):
        job.run()
    job.close()
    with pytest.raises(InvalidArgument):
        driver.allocate(session, BufferDesc(), [handle], [BufferRole(0, 0, 1.0)], [])
    assert driver.stats()["prepared_models"] == 0 and driver.stats()["bytes_in_use"] == 0


def test_another_sessions_handles_read_like_missing_ones(driver: Driver) -> None:
    mine, theirs = driver.open_session("a", LOCAL), driver.open_session("b", LOCAL)
    handle, _ = _prepare(driver, mine)
    messages = set()
    for session, name in ((theirs, handle), (mine, "0" * 32)):
        with pytest.raises(InvalidArgument) as err:
            driver.begin_execute(session, name, _request(), False, None)
        messages.add(err.value.message)
    assert messages == {"unknown prepared model handle for this session"}


def test_closing_a_job_that_never_ran_gives_its_ticket_back(driver: Driver) -> None:
    session = driver.open_session("t", LOCAL)
    handle, _ = _prepare(driver, session)
    job = driver.begin_execute(session, handle, _request(), False, None)
    assert driver.scheduler.in_flight == 1
    job.close()
    job.close()
    assert driver.scheduler.in_flight == 0 and driver.stats()["executions"] == 0


def test_execute_stream_cancelled_after_launch_leaks_no_ticket(driver: Driver) -> None:
    """Issue #11: the client cancels execute_1_3 between the launch and the notify."""
    session = driver.open_session("t", LOCAL)
    handle, _ = _prepare(driver, session)
    msg = spb.ExecuteRequest(session=session.id, prepared_model=handle)
    wire_request.request_to(_request(), msg.request)
    stream = PreparedModelServicer(Executions(driver)).execute_1_3(msg, None)  # type: ignore[arg-type]
    assert isinstance(stream, Generator)
    launch = next(stream)
    assert launch.WhichOneof("event") == "launch" and wire_status.status_from(launch.launch)[0] == ErrorStatus.NONE
    assert driver.scheduler.in_flight == 0  # admitted only once the launch was written (issue #24)
    assert driver.budget.by_kind()["request data"] > 0  # its request data is held meanwhile, and charged
    stream.close()  # what grpc does to the handler's generator on cancellation
    assert driver.scheduler.in_flight == 0 and driver.budget.by_kind()["request data"] == 0


def test_execute_stream_sends_launch_then_one_notify(driver: Driver) -> None:
    session = driver.open_session("t", LOCAL)
    msg = spb.ExecuteRequest(session=session.id, prepared_model="missing")
    wire_request.request_to(_request(), msg.request)
    events = list(PreparedModelServicer(Executions(driver)).execute_1_3(msg, None))  # type: ignore[arg-type]
    assert [e.WhichOneof("event") for e in events] == ["launch", "notify"]
    statuses = {wire_status.status_from(events[0].launch)[0], wire_status.status_from(events[1].notify)[0]}
    assert statuses == {ErrorStatus.INVALID_ARGUMENT}


def test_shared_pools_only_from_sessions_opened_on_this_host(tmp_path: Path) -> None:
    (tmp_path / "nnhal-r").write_bytes(bytes(64))
    driver = Driver(DeviceConfig(shared_memory=SharedMemoryPolicy(tmp_path)))
    local, remote = driver.open_session("l", LOCAL), driver.open_session("r", "ipv4:10.1.2.3:5000")
    assert local.is_local and not remote.is_local
    shared = Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (SharedMemoryPool("ashmem", "nnhal-r", 0, 64), InlinePool(b"", 32)),
    )
    handle, _ = _prepare(driver, remote)
    with pytest.raises(InvalidArgument, match="only from clients on the server's host"):
        driver.begin_execute(remote, handle, shared, False, None)
    handle, _ = _prepare(driver, local)
    driver.begin_execute(local, handle, shared, False, None).close()
    for s in (local, remote):
        driver.close_session(s.id)
    assert driver.scheduler.in_flight == 0


def test_model_cache_round_trip_and_token_checked_at_launch(driver: Driver) -> None:
    session = driver.open_session("t", LOCAL)
    with pytest.raises(InvalidArgument, match="cache token must be 32 bytes"):
        _prepare(driver, session, b"short")
    token = bytes(range(32))
    _, sealed = _prepare(driver, session, token)
    job = driver.prepare_from_cache(session, [sealed], [], token, None)
    try:
        handle, again = job.run()
    finally:
        job.close()
    assert again == b"" and driver.prepared(session, handle).priority == Priority.MEDIUM
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(InvalidArgument, match="failed authentication"):
        driver.prepare_from_cache(session, [tampered], [], token, None)
    with pytest.raises(InvalidArgument, match="expected 1 model cache"):
        driver.prepare_from_cache(session, [], [], token, None)


def test_sessions_are_capped_per_remote_host_and_identity_not_on_this_host() -> None:
    """Issue #24: one remote host (or one mTLS identity) cannot take every session."""
    driver = Driver(DeviceConfig(max_sessions_per_peer=2))
    a = [driver.open_session("t", f"ipv4:10.0.0.1:{port}") for port in (1000, 1001)]
    with pytest.raises(ResourceExhaustedTransient, match=r"ipv4:10\.0\.0\.1 already has 2 sessions"):
        driver.open_session("t", "ipv4:10.0.0.1:1002")
    driver.open_session("t", "ipv4:10.0.0.2:1000")  # another host
    for port in range(5):  # same-host peers are not capped by this
        driver.open_session("t", f"ipv4:127.0.0.1:{port}")
    driver.close_session(a[0].id)
    driver.open_session("t", "ipv4:10.0.0.1:1003")  # a place was given back
    token = VERIFIED_CLIENT.set("CN=alice")
    try:
        driver.open_session("t", "unix:/tmp/x")
        driver.open_session("t", "unix:/tmp/x")
        with pytest.raises(ResourceExhaustedTransient, match="CN=alice already has 2"):
            driver.open_session("t", "unix:/tmp/x")
    finally:
        VERIFIED_CLIENT.reset(token)


def _releases(driver: Driver) -> tuple[Session, list[int]]:
    """A session of ``driver`` and the bytes its releaser is told were freed (instead of
    counting them towards a heap trim)."""
    freed: list[int] = []
    driver.budget.releaser.released = lambda nbytes: freed.append(nbytes)  # type: ignore[method-assign]
    return driver.open_session("t", LOCAL), freed


def _executed(driver: Driver, session: Session, handle: str, request: Request) -> None:
    """One execution of ``request``, run to its end (NONE) and closed."""
    job = driver.begin_execute(session, handle, request, measure=False, deadline_ns=None)
    try:
        assert job.run().status == ErrorStatus.NONE
    finally:
        job.close()


def test_an_execution_counts_towards_a_heap_trim_what_it_held_not_its_grant() -> None:
    """The executor's grants come in chunks of a MiB or more; the releaser is told what the
    execution held at its peak, so a small model's executions do not trim the heap (a full
    garbage collection) over and over with nothing to give back."""
    driver = Driver(DeviceConfig(memory_per_client=64 << 20, memory_total=256 << 20))
    session, freed = _releases(driver)
    handle, _ = _prepare(driver, session)
    freed.clear()
    _executed(driver, session, handle, _request(2.0))
    assert freed and max(freed) < 1 << 10, freed  # the ADD's 32-byte output, not the 1 MiB grant
    assert driver.budget.total == driver.budget.used(session.id)  # the grant was given back whole


def test_an_execution_of_shared_pools_counts_none_of_their_bytes_towards_a_heap_trim(tmp_path: Path) -> None:
    """A request's shared pools are charged as its data, but their bytes were never on the
    server's heap: giving the charge back counts only the inline pools' copies, so a client
    executing on large shared pools does not have the server collect and trim its heap (with
    the GIL held) over and over with nothing to give back."""
    (tmp_path / "nnhal-r").write_bytes(bytes(1 << 20))
    driver = Driver(DeviceConfig(shared_memory=SharedMemoryPolicy(tmp_path)))
    session, freed = _releases(driver)
    handle, _ = _prepare(driver, session)
    shared = Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (SharedMemoryPool("ashmem", "nnhal-r", 0, 1 << 20), InlinePool(b"", 32)),
    )
    freed.clear()
    _executed(driver, session, handle, shared)
    assert freed and sum(freed) < 1 << 10, freed  # the inline output's bytes, none of the 1 MiB region's
    driver.close_session(session.id)


def test_an_executions_arena_is_not_counted_as_freed_towards_a_heap_trim() -> None:
    """An execution's arena (its operands' buffers) goes back to its pool for the next one:
    charged while the execution runs, but not freed when it ends, so not counted towards a
    heap trim; the results' own copies are."""
    side = 128  # 64 KiB operands: within an arena's (``ARENA_IO_BYTES``)
    driver = Driver(DeviceConfig(memory_per_client=64 << 20, memory_total=256 << 20))
    session, freed = _releases(driver)
    handle, _ = _prepare(driver, session, model=add_model((side, side)))
    nbytes = side * side * 4
    data = np.ones(2 * side * side, np.float32).tobytes()
    request = Request(
        (
            RequestArgument(location=DataLocation(0, 0, nbytes)),
            RequestArgument(location=DataLocation(0, nbytes, nbytes)),
        ),
        (RequestArgument(location=DataLocation(1, 0, nbytes)),),
        (InlinePool(data, 2 * nbytes), InlinePool(b"", nbytes)),
    )
    for _ in range(3):  # the first makes the arena; the next reuse it
        freed.clear()
        _executed(driver, session, handle, request)
        # The request's data (its inline pools' copies) and the result's copy, not the
        # arena of the two inputs and the output (3 x 64 KiB) on top.
        assert sum(freed) <= 4 * nbytes, freed
    driver.close_session(session.id)

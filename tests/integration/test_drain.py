"""Graceful drain (DESIGN.md §12): SIGTERM / SIGINT → health NOT_SERVING, new work
DEVICE_UNAVAILABLE, launched work finishes within ``--drain-seconds`` (or ends with
DEVICE_UNAVAILABLE, its callback notified once), exit 0; the client reports a drain,
not a crash, and a ResilientDevice moves to the restarted server. Plus the lifecycle's
own rules without a server. The tests taking ``connect`` run for the sync client and
for the asyncio one (:mod:`tests.aio_bridge`)."""

from __future__ import annotations

import asyncio
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nnhal.client.callbacks import Callback
from nnhal.client.device import Device
from nnhal.client.remote import (
    DRAINING,
    aio_session as aio_session_module,
    channel as channel_module,
    messages as messages_module,
)
from nnhal.client.resilient import ResilientDevice
from nnhal.core.enums import ErrorStatus, Priority
from nnhal.core.errors import DeadObject, DeviceUnavailable
from nnhal.core.types import BufferDesc, BufferRole, DataLocation, InlinePool, Request, RequestArgument
from nnhal.server.lifecycle import DRAIN_EXPIRED, Lifecycle
from nnhal.server.scheduler import Scheduler
from nnhal.testing import LocalServer
from tests.conftest import Connector, add_model, ones

pytestmark = [pytest.mark.timeout(90)]

#: Generous bounds: the machine may be loaded; nothing here asserts a tight time.
EXIT_BOUND_S = 30.0
WAIT_BOUND_S = 20.0


def _health(address: str) -> str:
    channel = grpc.insecure_channel(address)
    try:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
    finally:
        channel.close()


def _counting(cb: Callback) -> list[int]:  # type: ignore[type-arg]
    fired: list[int] = []
    cb.add_done_callback(lambda _cb: fired.append(1))
    return fired


def _wait_in_flight(dev: Any, n: int = 1) -> None:
    """Until the server holds ``n`` launched executions (bounded): the signal comes after their launch."""
    end = time.monotonic() + WAIT_BOUND_S
    while dev.stats()["queue_depth"] < n:
        assert time.monotonic() < end, "the executions were not launched in time"
        time.sleep(0.02)


@pytest.fixture
def draining_server(request: pytest.FixtureRequest) -> Iterator[LocalServer]:
    srv = LocalServer("--enable-fault-injection", "--drain-seconds", str(request.param))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.integration
@pytest.mark.parametrize("draining_server", [30.0], indirect=True)
def test_sigterm_lets_a_launched_execution_finish(draining_server: LocalServer, connect: Connector) -> None:
    srv = draining_server
    dev = connect(srv.address)
    try:
        pm = dev.prepare_model_sync(add_model())
        burst = pm.burst()
        assert burst.execute(_add_request(1.0)).status == ErrorStatus.NONE
        # Long enough for the checks below to run during the drain on a loaded machine.
        dev.set_faults(execute_delay_ms=5000)
        a, b = np.arange(8, dtype=np.float32).reshape(2, 4), np.full((2, 4), 0.5, np.float32)
        cb = pm.execute_async([a, b])
        fired = _counting(cb)
        _wait_in_flight(dev)
        srv.signal(signal.SIGTERM)
        # Health says NOT_SERVING at once (bounded poll: the signal is handled asynchronously).
        end = time.monotonic() + WAIT_BOUND_S
        while _health(srv.address) != "NOT_SERVING" and time.monotonic() < end:
            time.sleep(0.05)
        assert _health(srv.address) == "NOT_SERVING"
        # New work of every kind is refused with DEVICE_UNAVAILABLE, saying why.
        with pytest.raises(DeviceUnavailable, match="draining"):
            pm.execute([a, b])
        prepare = dev.prepare_model(add_model())
        assert prepare.wait(WAIT_BOUND_S) and prepare.status == ErrorStatus.DEVICE_UNAVAILABLE
        assert "draining" in prepare.message
        refused = burst.execute(_add_request(1.0))
        assert refused.status == ErrorStatus.DEVICE_UNAVAILABLE and "draining" in refused.message
        burst.close()
        with pytest.raises(DeviceUnavailable, match="draining"):
            dev.allocate(BufferDesc(), [pm], [BufferRole(0, 0, 1.0)], [])
        # A new session is refused in-band (protocol 2: the first event's status).
        with pytest.raises(DeviceUnavailable, match="draining"):
            connect(srv.address, timeout=5.0)
        # The launched execution finishes with the right values, then the server exits 0.
        outcome = cb.get(WAIT_BOUND_S)
        assert outcome.status == ErrorStatus.NONE
        np.testing.assert_array_equal(outcome.outputs[0], a + b)
        assert srv.proc.wait(EXIT_BOUND_S) == 0
        # The client reports a drain, not a crash.
        end = time.monotonic() + WAIT_BOUND_S
        while not dev.remote.dead and time.monotonic() < end:
            time.sleep(0.05)
        assert dev.remote.draining
        with pytest.raises(DeadObject) as dead:
            dev.capabilities()
        assert DRAINING in dead.value.message
        assert fired == [1]
    finally:
        dev.close()


@pytest.mark.integration
@pytest.mark.parametrize("draining_server", [5.0], indirect=True)
def test_an_idle_servers_end_is_reported_as_a_drain(draining_server: LocalServer, connect: Connector) -> None:
    dev = connect(draining_server.address)
    try:
        dev.capabilities()
        draining_server.signal(signal.SIGTERM)
        assert draining_server.proc.wait(EXIT_BOUND_S) == 0
        end = time.monotonic() + WAIT_BOUND_S
        while not dev.remote.dead and time.monotonic() < end:
            time.sleep(0.05)
        with pytest.raises(DeadObject) as dead:
            dev.capabilities()
        assert DRAINING in dead.value.message
    finally:
        dev.close()


@pytest.mark.integration
@pytest.mark.parametrize("draining_server", [0.5], indirect=True)
def test_work_left_after_the_drain_time_ends_with_a_status(draining_server: LocalServer, connect: Connector) -> None:
    srv = draining_server
    dev = connect(srv.address)
    try:
        pm = dev.prepare_model_sync(add_model())
        dev.set_faults(execute_delay_ms=30_000)
        cb = pm.execute_async([ones(), ones()])
        fired = _counting(cb)
        _wait_in_flight(dev)
        srv.signal(signal.SIGTERM)
        assert cb.wait(WAIT_BOUND_S)
        assert cb.status == ErrorStatus.DEVICE_UNAVAILABLE
        assert cb.message == DRAIN_EXPIRED
        assert srv.proc.wait(EXIT_BOUND_S) == 0
        time.sleep(0.3)  # a second notify, if there were one, would have arrived by now
        assert fired == [1]
    finally:
        dev.close()


@pytest.mark.integration
@pytest.mark.parametrize("draining_server", [0.5], indirect=True)
def test_a_drain_status_read_after_the_servers_end_still_reaches_its_waiter(
    draining_server: LocalServer, monkeypatch: pytest.MonkeyPatch, connect: Connector
) -> None:
    # The race behind a flake under load: the client read the session stream's end (and
    # released every waiter with DEAD_OBJECT) before the notify the server had sent on the
    # execution's own stream. Here the notify is read only once the end was seen.
    srv = draining_server
    dev = connect(srv.address)
    real_notify_of = messages_module.notify_of  # the function the channel module imported
    real_read_notify = aio_session_module.read_notify

    def read_late(call: Any, what: str) -> Any:
        end = time.monotonic() + WAIT_BOUND_S
        while not dev.remote.dead and time.monotonic() < end:
            time.sleep(0.01)
        return real_notify_of(call, what)

    async def read_late_aio(stream: Any, what: str) -> Any:
        end = time.monotonic() + WAIT_BOUND_S
        while not dev.remote.dead and time.monotonic() < end:
            await asyncio.sleep(0.01)
        return await real_read_notify(stream, what)

    try:
        pm = dev.prepare_model_sync(add_model())
        dev.set_faults(execute_delay_ms=30_000)
        # Patched after the preparation, whose own notify would wait for the end too.
        if connect.client == "sync":
            monkeypatch.setattr(channel_module, "notify_of", read_late)
        else:
            monkeypatch.setattr(aio_session_module, "read_notify", read_late_aio)
        cb = pm.execute_async([ones(), ones()])
        fired = _counting(cb)
        _wait_in_flight(dev)
        srv.signal(signal.SIGTERM)
        assert srv.proc.wait(EXIT_BOUND_S) == 0
        assert cb.wait(WAIT_BOUND_S)
        assert dev.remote.dead and dev.remote.draining
        assert (cb.status, cb.message) == (ErrorStatus.DEVICE_UNAVAILABLE, DRAIN_EXPIRED)
        assert fired == [1]
    finally:
        dev.close()


@pytest.mark.integration
def test_sigint_drains_queued_work_too(connect: Connector) -> None:
    with LocalServer("--enable-fault-injection", "--drain-seconds", "0.5", "--slots", "1") as srv:
        dev = connect(srv.address)
        try:
            pm = dev.prepare_model_sync(add_model())
            dev.set_faults(execute_delay_ms=30_000)
            running = pm.execute_async([ones(), ones()])
            _wait_in_flight(dev)
            queued = pm.execute_async([ones(), ones()])  # waits for the one slot
            _wait_in_flight(dev, 2)
            counts = [_counting(running), _counting(queued)]
            srv.signal(signal.SIGINT)
            for cb in (running, queued):
                assert cb.wait(WAIT_BOUND_S)
                assert cb.status == ErrorStatus.DEVICE_UNAVAILABLE, cb.message
            assert srv.proc.wait(EXIT_BOUND_S) == 0
            time.sleep(0.3)
            assert counts == [[1], [1]]
        finally:
            dev.close()


@pytest.mark.integration
@pytest.mark.parametrize("draining_server", [120.0], indirect=True)
def test_a_second_signal_ends_the_drain_time_at_once(draining_server: LocalServer, connect: Connector) -> None:
    srv = draining_server
    dev = connect(srv.address)
    try:
        pm = dev.prepare_model_sync(add_model())
        dev.set_faults(execute_delay_ms=60_000)
        cb = pm.execute_async([ones(), ones()])
        _wait_in_flight(dev)
        srv.signal(signal.SIGTERM)
        time.sleep(0.5)
        assert not cb.wait(0)  # still draining: the drain time is long
        srv.signal(signal.SIGTERM)
        assert cb.wait(WAIT_BOUND_S)  # far less than the 120 s drain and 60 s delay
        assert cb.status == ErrorStatus.DEVICE_UNAVAILABLE
        assert srv.proc.wait(EXIT_BOUND_S) == 0
        log = srv.log()
        assert "second interrupt: stopping now" in log  # says why the drain ended, not that its time ran out
        assert "the drain time ran out: ending" not in log
    finally:
        dev.close()


def _add_request(value: float) -> Request:
    """a + b on 2x4 inline pools, every element of a and b being ``value``."""
    data = np.full(16, value, np.float32).tobytes()
    return Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (InlinePool(data, 64), InlinePool(b"", 32)),
    )


@pytest.mark.integration
@pytest.mark.parametrize("draining_server", [30.0], indirect=True)
def test_fenced_work_finishes_and_bursts_allocations_and_fences_are_refused(draining_server: LocalServer) -> None:
    srv = draining_server
    dev = Device.connect(srv.address)
    try:
        pm = dev.prepare_model_sync(add_model())
        burst = pm.burst()
        assert burst.execute(_add_request(1.0)).status == ErrorStatus.NONE
        dev.set_faults(execute_delay_ms=5000)
        fenced = pm.execute_fenced(_add_request(3.0))
        _wait_in_flight(dev)
        srv.signal(signal.SIGTERM)
        end = time.monotonic() + WAIT_BOUND_S
        while _health(srv.address) != "NOT_SERVING" and time.monotonic() < end:
            time.sleep(0.05)
        refused = burst.execute(_add_request(1.0))
        assert refused.status == ErrorStatus.DEVICE_UNAVAILABLE and "draining" in refused.message
        with pytest.raises(DeviceUnavailable, match="draining"):
            pm.execute_fenced(_add_request(1.0))
        with pytest.raises(DeviceUnavailable, match="draining"):
            dev.allocate(BufferDesc(), [pm], [BufferRole(0, 0, 1.0)], [])
        # The fenced execution launched before the signal finishes; its outcome can be collected.
        outcome = fenced.get_execution_info(wait=True, timeout=WAIT_BOUND_S)
        assert outcome.status == ErrorStatus.NONE
        np.testing.assert_array_equal(np.frombuffer(outcome.output_pools[1], np.float32), np.full(8, 6.0, np.float32))
        burst.close()
        assert srv.proc.wait(EXIT_BOUND_S) == 0
    finally:
        dev.close()


@pytest.fixture
def unix_address() -> Iterator[str]:
    tmp = tempfile.mkdtemp(prefix="nnd-")  # short: unix socket paths are limited to ~107 bytes
    try:
        yield f"unix:{Path(tmp) / 's.sock'}"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.integration
def test_resilient_device_moves_to_the_restarted_server(unix_address: str) -> None:
    srv = LocalServer("--enable-fault-injection", "--drain-seconds", "5", listen=unix_address)
    rd: ResilientDevice | None = None
    try:
        rd = ResilientDevice.connect(unix_address, recover_timeout=10.0)
        old = rd.device
        pm = rd.prepare_model_sync(add_model())
        a, b = np.arange(8, dtype=np.float32).reshape(2, 4), np.full((2, 4), 2.0, np.float32)
        rd.protect(lambda d: d.set_faults(execute_delay_ms=3000))  # type: ignore[attr-defined]
        in_flight = pm.execute_async([a, b])
        rd.protect(_wait_in_flight)
        srv.signal(signal.SIGTERM)
        # Launched before the signal: it still finishes, with the right values.
        np.testing.assert_array_equal(in_flight.get(WAIT_BOUND_S).outputs[0], a + b)
        assert srv.proc.wait(EXIT_BOUND_S) == 0
        srv.stop()
        srv = LocalServer("--enable-fault-injection", listen=unix_address)
        # The next call finds the old session drained, recovers on the new server, re-prepares.
        np.testing.assert_array_equal(pm.execute([a, b]).outputs[0], a + b)
        assert rd.recoveries == 1 and pm.recoveries == 1
        assert isinstance(old, Device) and old.remote.draining  # the old server's end was a drain
    finally:
        if rd is not None:
            rd.close()
        srv.stop()


# -- the lifecycle's rules, without a server -------------------------------------------


def test_work_is_refused_once_draining_and_counted_until_it_ends() -> None:
    life = Lifecycle()
    life.enter("a preparation")
    assert life.active == 1
    assert life.begin_drain() and not life.begin_drain()
    with pytest.raises(DeviceUnavailable, match="draining"):
        life.enter("an execution")
    with pytest.raises(DeviceUnavailable, match="draining"):
        life.admit("allocate")
    assert life.active == 1  # the refusal counted nothing
    life.check()  # launched work goes on until the drain time ran out
    life.leave()
    assert life.active == 0
    life.expire()
    with pytest.raises(DeviceUnavailable) as err:
        life.check()
    assert err.value.message == DRAIN_EXPIRED


def test_the_drain_waits_for_every_session_to_be_told() -> None:
    life = Lifecycle()
    a, b, late = threading.Event(), threading.Event(), threading.Event()
    life.watch(a)
    life.watch(b)
    assert life.all_told  # nothing to tell before a drain
    life.begin_drain()
    assert not life.all_told
    life.told(a)
    life.watch(late)  # a session opened after the drain began is never refused late: not waited for
    assert not life.all_told
    life.unwatch(b)  # a stream that ended needs no telling
    assert life.all_told


def test_watchers_wake_on_every_change() -> None:
    life = Lifecycle()
    woke = threading.Event()
    life.watch(woke)
    life.begin_drain()
    assert woke.is_set()
    woke.clear()
    life.stop()
    assert woke.is_set() and life.stopping
    life.unwatch(woke)
    woke.clear()
    life.expire()
    assert not woke.is_set()


def test_a_shut_scheduler_releases_queued_executions() -> None:
    sched = Scheduler(slots=1)
    first = sched.admit("a", Priority.MEDIUM)
    sched.acquire(first, None)
    queued = sched.admit("b", Priority.MEDIUM)
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            sched.acquire(queued, None)
        except BaseException as err:
            errors.append(err)

    waiter = threading.Thread(target=wait)
    waiter.start()
    end = time.monotonic() + WAIT_BOUND_S
    while sched.counts()[1] == 0 and time.monotonic() < end:
        time.sleep(0.01)
    assert sched.counts() == (1, 1, 0)
    sched.shut(DRAIN_EXPIRED)
    waiter.join(WAIT_BOUND_S)
    assert not waiter.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], DeviceUnavailable)
    with pytest.raises(DeviceUnavailable):
        sched.acquire(sched.admit("c", Priority.MEDIUM), None)


def test_a_call_after_the_sessions_closed_at_stop_is_dead_object() -> None:
    """At the end of a drain the server closes its sessions; a call sent before its client
    read the session stream's end used to find its session gone (in-band INVALID_ARGUMENT
    "unknown session"). The server refuses new calls before it closes the sessions, so such
    a call gets what a gone server gives (UNAVAILABLE: DEAD_OBJECT to the client). The window
    is opened deterministically: the call is sent on the raw stub once the sessions closed."""
    from nnhal.proto import service_pb2 as spb
    from nnhal.server.rpc.serve import Server
    from nnhal.server.rpc.server_options import ServerOptions

    server = Server(ServerOptions(listen=["127.0.0.1:0"]))
    server.start()
    driver = server.driver
    codes: list[object] = []
    try:
        with Device.connect(server.addresses[0]) as dev:
            pm = dev.prepare_model_sync(add_model())
            stubs, request = dev.remote.stubs, spb.ReleaseRequest(session=dev.remote.session_id, handle=pm.handle)
            stop_sessions = driver.lifecycle.stop

            def stop_then_call() -> None:
                driver.lifecycle.stop = stop_sessions  # type: ignore[method-assign]  # (once)
                stop_sessions()
                end = time.monotonic() + WAIT_BOUND_S
                while driver.stats()["sessions"] and time.monotonic() < end:
                    time.sleep(0.01)
                try:
                    reply = stubs.prepared_model.release(request, timeout=WAIT_BOUND_S)
                    codes.append(ErrorStatus(reply.status))
                except grpc.RpcError as err:
                    codes.append(err.code())

            driver.lifecycle.stop = stop_then_call  # type: ignore[method-assign]
            assert server.drain(0.0)
            server.stop(grace=0.5)
    finally:
        server.stop(grace=0)
    assert codes == [grpc.StatusCode.UNAVAILABLE]

"""One client must not starve the others (issue #11, item 3), and answers fit one message (item 5).

Long-lived calls — idle ``configureExecutionBurst`` streams and
``getExecutionInfo(wait=True)`` calls on a fence that has not signalled — last as long as
the client likes (a fence wait holds a server worker thread, an idle burst memory and a
place). They are capped per client and in total (``executions.LongCalls``);
past a cap the call is refused at once with RESOURCE_EXHAUSTED_TRANSIENT naming the cap.
Across processes: while one session holds 200 of each (1,000 in ``make soak``; most refused), another
client's health check, execution, new connection and stats all answer promptly. The
bound asserted is generous (5 s on a loaded machine); the figures are printed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nnhal.client.device import Device
from nnhal.core import wire
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import ResourceExhaustedTransient
from nnhal.core.types import (
    DataLocation,
    ExecutionResult,
    FencedExecutionInfo,
    InlinePool,
    Request,
    RequestArgument,
)
from nnhal.core.wire import ENVELOPE_BYTES
from nnhal.proto import service_pb2 as spb
from nnhal.server.driver import DeviceConfig
from nnhal.server.executions.long_calls import (
    MAX_BURSTS_PER_CLIENT,
    MAX_FENCE_WAITS_PER_CLIENT,
    LongCalls,
    default_long_call_total,
)
from nnhal.server.executions.refusals import within_limit
from nnhal.testing import LocalServer
from tests.conftest import add_model, soak, until

pytestmark = [pytest.mark.timeout(240)]

#: Of each kind; 1,000 under NNHAL_SOAK (the issue #11 figure). Either count is far past the caps.
CALLS = soak(200, 1000)
#: Generous: measured figures are printed; a loaded 2-core machine must not fail this.
ANSWER_BOUND_S = 5.0
SETTLE_BOUND_S = 60.0


def _add_request() -> Request:
    a = np.arange(8, dtype=np.float32).tobytes()
    b = np.full(8, 0.5, np.float32).tobytes()
    return Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (InlinePool(a + b, 64), InlinePool(b"", 32)),
    )


def _until(predicate: Any, what: str) -> None:
    until(predicate, what, SETTLE_BOUND_S, 0.05)


def _timed(fn: Any) -> float:
    t0 = time.monotonic()
    fn()
    return time.monotonic() - t0


#: The starving server's worker threads: its derived total cap is then 46, reached by 4 clients.
STARVE_THREADS = 128


@pytest.fixture
def starve_server() -> Iterator[LocalServer]:
    srv = LocalServer("--enable-fault-injection", "--max-threads", str(STARVE_THREADS))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.integration
def test_one_sessions_long_calls_do_not_starve_another_client(starve_server: LocalServer) -> None:
    srv = starve_server
    stop = threading.Event()

    def idle() -> Iterator[spb.BurstRequest]:
        stop.wait(SETTLE_BOUND_S * 2)  # an idle burst: sends nothing until the test ends
        return
        yield

    bursts: list[Any] = []
    waits: list[Any] = []
    readers = ThreadPoolExecutor(2 * MAX_BURSTS_PER_CLIENT)
    attacker = Device.connect(srv.address, client_name="attacker")
    try:
        pm = attacker.prepare_model_sync(add_model())
        attacker.set_faults(execute_delay_ms=120_000)  # the fence stays unsignalled for the test
        fence = pm.execute_fenced(_add_request())
        stubs, sid = attacker.remote.stubs, attacker.remote.session_id
        info = spb.FencedInfoRequest(session=sid, callback=fence.callback, wait=True)
        t0 = time.monotonic()
        for _ in range(CALLS):
            waits.append(stubs.fenced.getExecutionInfo.future(info, timeout=SETTLE_BOUND_S * 2))
            bursts.append(stubs.prepared_model.configureExecutionBurst(idle(), timeout=SETTLE_BOUND_S * 2))
        # Past the caps every call is answered at once; those under the caps stay open.
        _until(lambda: sum(f.done() for f in waits) >= CALLS - MAX_FENCE_WAITS_PER_CLIENT, "refused fence waits")
        # A refused burst's one response is read before its end is seen; the bursts under the
        # cap block their reader until the test cancels them (more readers than the cap).
        firsts = [readers.submit(next, call) for call in bursts]
        _until(lambda: sum(f.done() for f in firsts) >= CALLS - MAX_BURSTS_PER_CLIENT, "refused bursts")
        refused_in = time.monotonic() - t0
        refused_waits = [f.result() for f in waits if f.done()]
        assert len(refused_waits) == CALLS - MAX_FENCE_WAITS_PER_CLIENT
        for answer in refused_waits:
            assert answer.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT and not answer.signalled
            assert f"cap per client is {MAX_FENCE_WAITS_PER_CLIENT}" in answer.message
        refused_bursts = [f.result() for f in firsts if f.done()]
        assert len(refused_bursts) == CALLS - MAX_BURSTS_PER_CLIENT
        for first in refused_bursts:
            assert first.result.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
            assert f"cap per client is {MAX_BURSTS_PER_CLIENT}" in first.result.message

        # Another client is unaffected: each of these answers promptly.
        figures: dict[str, float] = {}

        def health() -> None:
            channel = grpc.insecure_channel(srv.address)
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
                assert reply.status == health_pb2.HealthCheckResponse.SERVING
            finally:
                channel.close()

        figures["health"] = _timed(health)
        victim: list[Device] = []
        figures["new connection"] = _timed(lambda: victim.append(Device.connect(srv.address, client_name="victim")))
        with victim[0] as other:
            figures["stats"] = _timed(other.stats)
            other_pm = other.prepare_model_sync(add_model())
            a, b = np.ones((2, 4), np.float32), np.full((2, 4), 2.0, np.float32)
            outputs: list[Any] = []
            figures["execution"] = _timed(lambda: outputs.append(other_pm.execute([a, b], timeout=10)))
            assert outputs[0].status == ErrorStatus.NONE, outputs[0].message
            np.testing.assert_array_equal(outputs[0].outputs[0], a + b)
            # Its own fence waits and bursts are not refused: the caps are per client.
            with other_pm.burst() as burst:
                assert burst.execute(_add_request()).status == ErrorStatus.NONE
            other_pm.release()
        print(
            f"\nrefusals of {2 * CALLS} calls answered in {refused_in:.2f} s; answers: "
            + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in figures.items())
        )
        for what, took in figures.items():
            assert took < ANSWER_BOUND_S, (what, took)
    finally:
        stop.set()
        for call in bursts:
            call.cancel()
        for f in waits:
            f.cancel()
        readers.shutdown(wait=True)
        attacker.close()
    # Once the attacker is gone its calls are given back: a fresh client may hold its own.
    with Device.connect(srv.address, client_name="after") as dev:
        _until(lambda: dev.stats()["sessions"] == 1, "the attacker's session to end")


@pytest.mark.integration
def test_many_sessions_together_stop_at_the_total_cap(starve_server: LocalServer) -> None:
    """4 sessions x 16 idle bursts exceed the total (46 with 128 threads): the rest is refused
    naming the total cap, and health, stats and new connections still answer."""
    srv = starve_server
    total = default_long_call_total(DeviceConfig(max_threads=STARVE_THREADS))
    stop = threading.Event()

    def idle() -> Iterator[spb.BurstRequest]:
        stop.wait(SETTLE_BOUND_S * 2)
        return
        yield

    devices = [Device.connect(srv.address, client_name=f"greedy-{k}") for k in range(4)]
    calls: list[Any] = []
    readers = ThreadPoolExecutor(total + 8)
    try:
        for dev in devices:
            for _ in range(MAX_BURSTS_PER_CLIENT):
                calls.append(
                    dev.remote.stubs.prepared_model.configureExecutionBurst(idle(), timeout=SETTLE_BOUND_S * 2)
                )
        firsts = [readers.submit(next, call) for call in calls]
        refused_count = len(calls) - total
        _until(lambda: sum(f.done() for f in firsts) >= refused_count, "bursts refused at the total cap")
        ended = [f for f in firsts if f.done()]
        # At least those over the total; past the places kept for clients below their fair
        # share (issue #24), a client above its share may be refused before the total is reached,
        # and a client below its share may make room: the newest burst of the client furthest
        # above its share is ended (RESOURCE_EXHAUSTED, saying so).
        assert len(ended) >= refused_count
        for f in ended:
            err = f.exception()
            if err is not None:
                assert isinstance(err, grpc.RpcError)
                assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
                assert "to make room for another client" in err.details()  # type: ignore[attr-defined]
                continue
            first = f.result()
            assert first.result.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
            assert f"the cap is {total}" in first.result.message or "fair share" in first.result.message
        t0 = time.monotonic()
        with Device.connect(srv.address, client_name="newcomer") as other:
            assert other.stats()["sessions"] == 5
        took = time.monotonic() - t0
        print(f"\n{refused_count} of {len(calls)} refused at the total cap {total}; connect+stats {took * 1000:.0f} ms")
        assert took < ANSWER_BOUND_S
    finally:
        stop.set()
        for call in calls:
            call.cancel()
        readers.shutdown(wait=True)
        for dev in devices:
            dev.close()


# -- in process: the caps' arithmetic --------------------------------------------------
def test_caps_per_client_and_in_total() -> None:
    calls = LongCalls({"burst": 2, "fence wait": 1}, total=3)
    calls.enter("burst", "a")
    calls.enter("burst", "a")
    with pytest.raises(ResourceExhaustedTransient, match="cap per client is 2"):
        calls.enter("burst", "a")
    calls.enter("fence wait", "a")
    with pytest.raises(ResourceExhaustedTransient, match="the cap is 3"):
        calls.enter("burst", "b")
    calls.leave("burst", "a")
    with calls.holding("burst", "b"):
        assert calls.in_progress == 3
    calls.leave("burst", "a")
    calls.leave("fence wait", "a")
    assert calls.in_progress == 0 and calls.held("burst", "a") == 0


def test_the_reserve_of_the_total_is_kept_for_clients_below_their_fair_share() -> None:
    """Issue #24: one client holding long-lived calls cannot shut a newcomer out."""
    calls = LongCalls({"burst": 100}, total=16)  # reserve: 2
    for _ in range(13):
        calls.enter("burst", "hog")
    calls.enter("burst", "small")  # 14 of 16: the reserve starts here
    with pytest.raises(ResourceExhaustedTransient, match="fair share"):
        calls.enter("burst", "hog")  # 13 held, far above 16 / 2
    calls.enter("burst", "new")  # a newcomer below its share takes the reserve
    assert calls.in_progress == 15
    alone = LongCalls({"burst": 100}, total=16)
    for _ in range(14):
        alone.enter("burst", "only")  # a client alone uses all but the reserve
    with pytest.raises(ResourceExhaustedTransient, match="fair share"):
        alone.enter("burst", "only")
    alone.enter("burst", "newcomer")
    assert alone.in_progress == 15


def test_default_total_leaves_threads_for_everything_else() -> None:
    config = DeviceConfig()
    total = default_long_call_total(config)
    # 256 threads: 66 admitted executions, 16 spare -> 174 long-lived calls (sessions hold no thread).
    assert total == 256 - 66 - 16
    assert LongCalls.of(config).total == total
    assert default_long_call_total(DeviceConfig(queue_depth=10_000)) == 8  # never below 8


def test_an_answer_over_the_message_limit_becomes_an_in_band_status(monkeypatch: pytest.MonkeyPatch) -> None:
    from nnhal.core import wire as wire_module

    limit = ENVELOPE_BYTES + 4096
    monkeypatch.setattr(wire_module, "MAX_MESSAGE_BYTES", limit)
    small = ExecutionResult(output_pools={1: b"x" * 100})
    assert within_limit(small, wire.max_inline_bytes()) is small
    big = ExecutionResult(output_pools={1: b"x" * 4000, 2: b"x" * 97})  # fits the limit, not the envelope
    answer = within_limit(big, wire.max_inline_bytes())
    assert answer.status == ErrorStatus.INVALID_ARGUMENT and not answer.output_pools
    assert "shared memory" in answer.message
    fenced = FencedExecutionInfo(True, ErrorStatus.NONE, output_pools={0: b"y" * 8192})
    refused = within_limit(fenced, wire.max_inline_bytes())
    assert refused.signalled and refused.status == ErrorStatus.INVALID_ARGUMENT
    assert limit == wire.MAX_MESSAGE_BYTES

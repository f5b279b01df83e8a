"""The asyncio client's bursts on the same-host fast path, across processes.

An ``aio`` burst takes the burst's own shared-memory queue when the server offers it, as the
sync client's does: results equal the gRPC burst's (a repeated layout as compact calls,
timing when asked, error statuses, a request too large for the rings over the gRPC stream);
packets the server cannot trust are refused with a status and the burst serves on; a
SIGKILLed server is DEAD_OBJECT within the gRPC path's bound, a frozen one within the
keepalive bound; closing the burst gives its rings back.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable

import numpy as np
import pytest

from nnhal.client import aio
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote import DEATH_DETECTION_BOUND_S
from nnhal.client.remote.aio_queue_link import AioQueueLink
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.core import fastpacket, fastring
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, HalError, InvalidArgument
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model
from tests.integration.test_fast_burst import _add_request

pytestmark = pytest.mark.integration


def _run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 60))


def _same(fast: ExecutionOutcome, grpc: ExecutionOutcome) -> None:
    assert (fast.status, fast.output_shapes, fast.output_pools) == (grpc.status, grpc.output_shapes, grpc.output_pools)


def _compact_layouts(burst: aio.Burst) -> int:
    fast = burst._fast  # the burst's queue, looked into on purpose
    assert fast is not None
    return fast._link.compact_layouts


def test_results_equal_the_grpc_burst(server: LocalServer) -> None:
    rng = np.random.default_rng(0)

    async def main() -> None:
        async with (
            aio.Device.connect(server.address) as dev,
            await dev.prepare_model(add_model()) as pm,
            pm.burst() as fast,
            pm.burst(fast=False) as grpc,
        ):
            assert fast.fast and not grpc.fast
            for _ in range(5):
                a, b = (rng.random((2, 4), dtype=np.float32) for _ in range(2))
                f, g = await fast.execute(_add_request(a, b)), await grpc.execute(_add_request(a, b))
                assert f.status == ErrorStatus.NONE
                _same(f, g)
                assert np.array_equal(np.frombuffer(f.output_pools[1], np.float32).reshape(2, 4), a + b)
            assert _compact_layouts(fast) == 1  # the repeated layout travels compact
            measured = await fast.execute(_add_request(a, b), measure=True)
            assert measured.status == ErrorStatus.NONE and measured.timing.time_in_driver > 0
            small = _add_request(a, b)
            bad = Request(small.inputs, (RequestArgument(location=DataLocation(1, 0, 8)),), small.pools)
            _same(await fast.execute(bad), await grpc.execute(bad))  # OUTPUT_INSUFFICIENT_SIZE
            late = await fast.execute(_add_request(a, b), timeout=-1.0)
            assert late.status == (await grpc.execute(_add_request(a, b), timeout=-1.0)).status != ErrorStatus.NONE
            assert (await fast.execute(_add_request(a, b))).status == ErrorStatus.NONE

    _run(main)


def test_a_request_too_large_for_the_rings_takes_the_grpc_stream(server: LocalServer) -> None:
    shape = (64, 64)  # 16 KiB per input: more than a 4 KiB ring
    a = np.full(shape, 2.0, np.float32)

    async def main() -> None:
        async with (
            aio.Device.connect(server.address) as dev,
            await dev.prepare_model(add_model(shape)) as pm,
            pm.burst(ring_bytes=fastring.MIN_RING_BYTES) as burst,
        ):
            assert burst.fast
            out = await burst.execute(_add_request(a, a))
            assert out.status == ErrorStatus.NONE
            assert np.array_equal(np.frombuffer(out.output_pools[1], np.float32).reshape(shape), a + a)

    _run(main)


def test_corrupted_packets_are_refused_and_the_burst_serves_on(server: LocalServer) -> None:
    a = np.ones((2, 4), np.float32)
    good = _add_request(a, a)

    async def main() -> None:
        async with aio.Device.connect(server.address) as dev, await dev.prepare_model(add_model()) as pm:
            link = await AioQueueLink.open(dev.remote, 0, pm.handle)
            try:

                async def execute() -> None:
                    packet = link.execution_packet(good, ExecutionOptions(), "", "", b"")
                    assert packet is not None
                    kind, payload, key = packet
                    answer = await link.exchange(kind, payload, 10.0)
                    assert answer is not None
                    result = link.result_of(answer, key)
                    assert result is not None and result.status == ErrorStatus.NONE, "the burst did not recover"

                await execute()
                await execute()  # now a compact call
                assert link.compact_layouts == 1
                body = [p.data for p in good.pools]  # type: ignore[union-attr]
                for kind, payload, why in [
                    (fastring.REQUEST, b"\xff" * 64, "not an ExecuteRequest"),
                    (fastpacket.CALL, fastpacket.encode_call(99, False, None, 0, body), "unknown layout id 99"),
                    (fastpacket.CALL, fastpacket.encode_call(1, False, None, 0, [b"short"]), "layout has"),
                    (fastpacket.CALL, b"\x01\x00\x00", "shorter than its header"),
                ]:
                    answer = await link.exchange(kind, payload, 10.0)
                    assert answer is not None
                    refused = link.result_of(answer, None)
                    assert refused is not None and refused.status == ErrorStatus.INVALID_ARGUMENT, refused
                    assert why in refused.message
                    await execute()
                # A packet whose checksum is wrong: the ring's own check.
                link.requests.write(fastring.REQUEST, b"\x0a\x00", crc=12345)
                link.doorbell.ring()
                refused = link.result_of(await link._await_packet(10.0), None)
                assert refused is not None and refused.status == ErrorStatus.INVALID_ARGUMENT
                assert "checksum" in refused.message
                await execute()
            finally:
                link.close()
            assert await dev.capabilities() is not None  # the server is alive and serving
            async with pm.burst(fast=True) as burst:
                assert (await burst.execute(good)).status == ErrorStatus.NONE

    _run(main)


def test_closing_gives_the_rings_back_and_executions_count_as_same_host() -> None:
    a = np.ones((2, 4), np.float32)

    async def main(address: str) -> None:
        async with aio.Device.connect(address) as dev, await dev.prepare_model(add_model()) as pm:
            before = await dev.stats()
            async with pm.burst() as burst:
                for _ in range(3):
                    assert (await burst.execute(_add_request(a, a))).status == ErrorStatus.NONE
                held = await dev.stats()
                assert held["bytes_in_use"] >= before["bytes_in_use"] + 2 * fastring.DEFAULT_RING_BYTES
            end = time.monotonic() + 8.0
            while (await dev.stats())["bytes_in_use"] != before["bytes_in_use"] and time.monotonic() < end:
                await asyncio.sleep(0.05)
            after = await dev.stats()
            assert after["bytes_in_use"] == before["bytes_in_use"], "the closed burst's rings were not given back"
            assert after["executions_same_host"] - before["executions_same_host"] == 3
            assert after["executions_grpc"] == before["executions_grpc"]
            closed = await burst.execute(_add_request(a, a))
            assert closed.status == ErrorStatus.GENERAL_FAILURE and "closed" in closed.message

    with LocalServer() as srv:
        _run(lambda: main(srv.address))


def test_sigkill_during_a_fast_burst_is_dead_object(own_server: LocalServer) -> None:
    a = np.ones((2, 4), np.float32)

    async def main() -> None:
        async with aio.Device.connect(own_server.address) as dev:
            pm = await dev.prepare_model(add_model())
            burst = pm.burst(fast=True)
            assert (await burst.execute(_add_request(a, a))).status == ErrorStatus.NONE
            assert burst.fast
            await dev.set_faults(execute_delay_ms=10_000)
            task = asyncio.ensure_future(burst.execute(_add_request(a, a)))
            await asyncio.sleep(0.3)
            t0 = time.monotonic()
            own_server.signal(signal.SIGKILL)
            done, _ = await asyncio.wait({task}, timeout=5.0)
            assert done, "the fast burst's waiter was not released"
            assert time.monotonic() - t0 < 1.0, "released later than the gRPC path's bound for a killed server"
            assert task.result().status == ErrorStatus.DEAD_OBJECT
            assert dev.dead
            t1 = time.monotonic()
            assert (await burst.execute(_add_request(a, a))).status == ErrorStatus.DEAD_OBJECT
            with pytest.raises(DeadObject):
                await burst.execute_numpy([a, a])
            assert time.monotonic() - t1 < 0.2, "calls on a dead server must fail at once"
            await burst.close()

    _run(main)


def test_a_frozen_server_is_dead_object_within_the_keepalive_bound(own_server: LocalServer) -> None:
    a = np.ones((2, 4), np.float32)

    async def main() -> None:
        async with aio.Device.connect(own_server.address) as dev:
            pm = await dev.prepare_model(add_model())
            burst = pm.burst(fast=True)
            assert (await burst.execute(_add_request(a, a))).status == ErrorStatus.NONE
            await dev.set_faults(execute_delay_ms=30_000)
            task = asyncio.ensure_future(burst.execute(_add_request(a, a)))
            await asyncio.sleep(0.3)
            t0 = time.monotonic()
            own_server.signal(signal.SIGSTOP)
            try:
                done, _ = await asyncio.wait({task}, timeout=DEATH_DETECTION_BOUND_S + 5.0)
                assert done, "the fast burst's waiter was not released"
                assert time.monotonic() - t0 <= DEATH_DETECTION_BOUND_S, "later than the documented bound"
                assert task.result().status == ErrorStatus.DEAD_OBJECT
            finally:
                own_server.signal(signal.SIGCONT)
            await burst.close()

    _run(main)


def test_a_server_without_the_fast_path_serves_aio_bursts_over_grpc() -> None:
    a = np.ones((2, 4), np.float32)

    async def main(address: str) -> None:
        async with aio.Device.connect(address) as dev, await dev.prepare_model(add_model()) as pm:
            async with pm.burst(fast=True) as required:
                refused = await required.execute(_add_request(a, a))
                assert refused.status == ErrorStatus.GENERAL_FAILURE and "does not offer" in refused.message
            async with pm.burst() as burst:
                assert not burst.fast
                assert (await burst.execute(_add_request(a, a))).status == ErrorStatus.NONE

    with LocalServer("--no-fast-path") as srv:
        _run(lambda: main(srv.address))


def test_an_inline_pool_of_another_size_is_a_new_layout(server: LocalServer) -> None:
    """A burst's second layout (a larger output pool) is learned too; both stay compact."""
    a = np.ones((2, 4), np.float32)

    async def main() -> None:
        async with (
            aio.Device.connect(server.address) as dev,
            await dev.prepare_model(add_model()) as pm,
            pm.burst() as burst,
        ):
            base = _add_request(a, a)
            wider = Request(base.inputs, base.outputs, (base.pools[0], InlinePool(b"", 64)))
            for request in (base, wider, base, wider):
                out = await burst.execute(request)
                assert out.status == ErrorStatus.NONE
                assert np.array_equal(np.frombuffer(out.output_pools[1], np.float32, 8).reshape(2, 4), a + a)
            assert _compact_layouts(burst) == 2

    _run(main)


@pytest.mark.parametrize("fast", [True, False])
def test_numpy_executions_equal_pm_execute(server: LocalServer, fast: bool) -> None:
    """``execute_numpy``: outputs as ``pm.execute``'s; on the fast path a repeated layout goes
    from the arrays to a compact call; outputs of unknown shape are retried with their sizes."""
    rng = np.random.default_rng(2)

    async def main() -> None:
        async with aio.Device.connect(server.address) as dev:
            async with await dev.prepare_model(add_model()) as pm, pm.burst(fast=fast) as burst:
                assert burst.fast is fast
                for k in range(4):
                    a, b = (rng.random((2, 4), dtype=np.float32) for _ in range(2))
                    got = await burst.execute_numpy([a, b], measure=k == 3)
                    assert got.status == ErrorStatus.NONE and np.array_equal(got.outputs[0], a + b)
                    assert np.array_equal(got.outputs[0], (await pm.execute([a, b])).outputs[0])
                assert got.timing.time_in_driver > 0
                if fast:
                    assert _compact_layouts(burst) == 1
                with pytest.raises(HalError) as late:
                    await burst.execute_numpy([a, b], timeout=-1.0)
                assert late.value.error_status != ErrorStatus.NONE
                with pytest.raises(InvalidArgument):
                    await burst.execute_numpy([a])  # the model has two inputs
            async with await dev.prepare_model(add_model((2, 0))) as pm, pm.burst(fast=fast) as burst:
                for _ in range(3):
                    got = await burst.execute_numpy([a, b])
                    assert got.outputs[0].shape == (2, 4) and np.array_equal(got.outputs[0], a + b)

    _run(main)

"""The asyncio client (nnhal.client.aio) against real server processes, in its own idiom.

The sync client's cross-process death, drain and exactly-once tests run for this client
too, from their own modules (the ``connect`` fixture and :mod:`tests.aio_bridge`:
test_death, test_drain, test_faults, test_cache; test_cancellation,
test_client_keepalive and test_channel_close have asyncio counterparts beside theirs).
Here: what only asyncio code does — many calls in flight from one loop, a SIGKILL
releasing waiters of every kind at once, bursts, deadlines, close, TLS and devices.
Each test runs its own event loop (``asyncio.run``).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from nnhal.client import aio
from nnhal.client.remote import request_id_of
from nnhal.core.enums import DeviceStatus, DeviceType, ErrorStatus
from nnhal.core.errors import DeadObject, HalError, InvalidArgument
from nnhal.core.types import BufferDesc, BufferRole, DataLocation, InlinePool, MemoryPool, Request, RequestArgument
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, ones, relu_chain
from tests.integration.test_faults import add_request
from tests.integration.test_tls import Pki, mtls_server, pki  # noqa: F401  (fixtures)
from tests.validation_cases import INVALID_MODELS

pytestmark = pytest.mark.integration


def _run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 60))


def _fired(task: asyncio.Future[Any]) -> list[int]:
    """Count user-visible deliveries of ``task``."""
    count = [0]

    def on_done(_task: object) -> None:
        count[0] += 1

    task.add_done_callback(on_done)
    return count


def test_prepare_and_execute_sync_and_async(server: LocalServer) -> None:
    async def main() -> None:
        async with aio.Device.connect(server.address, client_name="aio") as dev:
            assert (await dev.capabilities()).relaxed_float32_to_float16_performance_scalar is not None
            assert await dev.supported_operations(add_model()) == [True]
            assert await dev.version_string() and await dev.type() == DeviceType.CPU
            assert await dev.status() == DeviceStatus.AVAILABLE and await dev.supported_extensions() == ()
            assert await dev.number_of_cache_files_needed() == (1, 0)
            assert (await dev.stats())["sessions"] >= 1
            a = np.arange(8, dtype=np.float32).reshape(2, 4)
            async with await dev.prepare_model(add_model()) as pm:
                out = await pm.execute([a, a], measure=True)
                np.testing.assert_array_equal(out.outputs[0], a + a)
                task = pm.execute_async([a, 3 * a])
                fired = _fired(task)
                outcome = await task
                assert outcome.status == ErrorStatus.NONE
                np.testing.assert_array_equal(outcome.outputs[0], 4 * a)
                await asyncio.sleep(0.1)
                assert fired[0] == 1
                assert dev.last_request_id
            with pytest.raises(InvalidArgument):  # released: the server no longer knows it
                await pm.execute([a, a])

    _run(main)


def test_unknown_output_shape_and_deadline(server: LocalServer) -> None:
    async def main() -> None:
        async with aio.Device.connect(server.address) as dev:
            pm = await dev.prepare_model(add_model((0, 4)))  # output shape known only at execution
            a = np.ones((3, 4), np.float32)
            np.testing.assert_array_equal((await pm.execute([a, a])).outputs[0], 2 * a)
            slow = await dev.prepare_model(relu_chain(4))
            await dev.set_faults(execute_delay_ms=300)
            try:
                task = slow.execute_async([np.ones((1, 64), np.float32)], timeout=0.1)
                fired = _fired(task)
                outcome = await task
                missed = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
                assert outcome.status in missed, outcome.message
                await asyncio.sleep(0.1)
                assert fired[0] == 1
            finally:
                await dev.set_faults()

    _run(main)


def test_close_releases_waiters_with_general_failure(server: LocalServer) -> None:
    async def main() -> None:
        dev = await aio.Device.connect(server.address)
        pm = await dev.prepare_model(add_model())
        await dev.set_faults(execute_delay_ms=10_000)
        task = pm.execute_async([ones(), ones()])
        fired = _fired(task)
        await asyncio.sleep(0.2)
        await dev.close()
        outcome = await asyncio.wait_for(task, 5)
        assert outcome.status == ErrorStatus.GENERAL_FAILURE and "closed" in outcome.message
        with pytest.raises(HalError, match="closed"):
            await dev.capabilities()
        assert fired[0] == 1 and not dev.dead

    _run(main)


def test_invalid_model_is_invalid_argument_once(server: LocalServer) -> None:
    model, words = INVALID_MODELS[sorted(INVALID_MODELS)[0]]

    async def main() -> None:
        async with aio.Device.connect(server.address) as dev:
            task = asyncio.ensure_future(dev.prepare_model(model))
            fired = _fired(task)
            with pytest.raises(InvalidArgument) as info:
                await task
            assert words in info.value.message
            assert request_id_of(info.value) == dev.last_request_id  # to match the server's log
            await asyncio.sleep(0.1)
            assert fired[0] == 1

    _run(main)


def test_many_concurrent_executions_from_one_loop() -> None:
    """200 executions in flight at once (100 execute_1_3, 100 executeSynchronously_1_3) from one
    loop, all correct. The server's admission bound (slots + queue depth, 66 by default) would
    refuse some with RESOURCE_EXHAUSTED_TRANSIENT, as it would the sync client's 200 threads."""

    async def main(address: str) -> None:
        async with aio.Device.connect(address) as dev:
            pm = await dev.prepare_model(add_model())
            base = ones()
            tasks = [pm.execute_async([k * base, base]) for k in range(100)]
            tasks += [asyncio.ensure_future(pm.execute([k * base, 2 * base])) for k in range(100)]
            outcomes = await asyncio.gather(*tasks)
            for k, outcome in enumerate(outcomes):
                assert outcome.status == ErrorStatus.NONE, outcome.message
                np.testing.assert_array_equal(outcome.outputs[0], (k % 100 + 1 + k // 100) * base)
            await pm.release()

    with LocalServer("--queue-depth", "256", "--max-threads", "512") as srv:
        asyncio.run(asyncio.wait_for(main(srv.address), 60))


async def _dead_at_once(dev: aio.Device, pm: aio.PreparedModel | None) -> None:
    """Calls on a dead server fail with DEAD_OBJECT without waiting."""
    t1 = time.monotonic()
    with pytest.raises(DeadObject):
        await dev.capabilities()
    with pytest.raises(DeadObject):
        await dev.prepare_model(add_model())
    if pm is not None:
        with pytest.raises(DeadObject):
            await pm.execute([ones(), ones()])
        with pytest.raises(DeadObject):
            pm.execute_async([ones(), ones()])
    assert time.monotonic() - t1 < 0.2, "calls on a dead server must fail at once"
    assert dev.dead


def test_sigkill_during_async_execution(own_server: LocalServer) -> None:
    async def main() -> None:
        async with aio.Device.connect(own_server.address) as dev:
            pm = await dev.prepare_model(add_model())
            burst = pm.burst()
            assert (await burst.execute(add_request(ones()))).status == ErrorStatus.NONE
            await dev.set_faults(execute_delay_ms=10_000, prepare_delay_ms=10_000)
            task = pm.execute_async([ones(), ones()])
            fired = _fired(task)
            others: list[asyncio.Future[Any]] = [pm.execute_async([ones(), ones()]) for _ in range(4)]
            others += [asyncio.ensure_future(pm.execute([ones(), ones()])) for _ in range(2)]
            others += [asyncio.ensure_future(dev.prepare_model(add_model())) for _ in range(2)]
            others += [asyncio.ensure_future(burst.execute(add_request(ones())))]
            await asyncio.sleep(0.3)
            t0 = time.monotonic()
            own_server.signal(signal.SIGKILL)
            done, _ = await asyncio.wait({task, *others}, timeout=1.0)
            assert len(done) == 1 + len(others), "execution waiters not released within 1 s"
            assert time.monotonic() - t0 < 1.0
            assert task.result().status == ErrorStatus.DEAD_OBJECT
            for other in others:
                err = other.exception()
                status = err.error_status if isinstance(err, HalError) else other.result().status
                assert status == ErrorStatus.DEAD_OBJECT
            await _dead_at_once(dev, pm)
            t1 = time.monotonic()
            assert (await burst.execute(add_request(ones()))).status == ErrorStatus.DEAD_OBJECT
            with pytest.raises(DeadObject):
                pm.burst()
            assert time.monotonic() - t1 < 0.2
            await burst.close()
            await asyncio.sleep(0.2)
            assert fired[0] == 1

    _run(main)


def test_a_burst_answers_as_executions_do_and_a_cancelled_one_ends_only_itself(server: LocalServer) -> None:
    """Burst results equal execute_request's; cancelling an awaiting burst execution cancels
    the server's execution and ends that burst (GENERAL_FAILURE after), not the session."""

    async def main() -> None:
        async with aio.Device.connect(server.address) as dev, await dev.prepare_model(add_model()) as pm:
            rng = np.random.default_rng(0)
            for fast in (False, None):  # the gRPC stream, then the same-host fast path (the default)
                async with pm.burst(fast=fast) as burst:
                    assert burst.fast is (fast is None)
                    for _ in range(3):
                        x = rng.random((2, 4), dtype=np.float32)
                        got, want = await burst.execute(add_request(x)), await pm.execute_request(add_request(x))
                        assert got.status == ErrorStatus.NONE
                        assert (got.output_shapes, got.output_pools) == (want.output_shapes, want.output_pools)
            await dev.set_faults(execute_delay_ms=5_000)
            try:
                cut = pm.burst()
                task = asyncio.ensure_future(cut.execute(add_request(ones())))
                await asyncio.sleep(0.3)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                after = await cut.execute(add_request(ones()))
                assert after.status == ErrorStatus.GENERAL_FAILURE and "cancelled" in after.message
                await cut.close()
                end = time.monotonic() + 30
                while (await dev.stats())["queue_depth"] and time.monotonic() < end:
                    await asyncio.sleep(0.05)
                assert (await dev.stats())["queue_depth"] == 0, "the cancelled execution still runs"
            finally:
                await dev.set_faults()
            assert not dev.dead
            async with pm.burst() as burst:
                assert (await burst.execute(add_request(ones()))).status == ErrorStatus.NONE

    _run(main)


def test_a_cancelled_preparation_leaves_no_model_behind(server: LocalServer) -> None:
    async def main() -> None:
        async with aio.Device.connect(server.address) as dev:
            before = (await dev.stats())["prepared_models"]
            await dev.set_faults(prepare_delay_ms=300)
            try:
                task = dev.prepare_model_async(add_model())
                await asyncio.sleep(0.1)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                end = time.monotonic() + 30
                while (await dev.stats())["prepared_models"] != before and time.monotonic() < end:
                    await asyncio.sleep(0.05)  # the preparation ends, then its model is released
                assert (await dev.stats())["prepared_models"] == before
            finally:
                await dev.set_faults()

    _run(main)


def test_prepare_from_cache(server: LocalServer) -> None:
    token = bytes(range(32))

    async def main() -> None:
        async with aio.Device.connect(server.address) as dev:
            blob = (await dev.prepare_model(add_model(), cache_token=token)).model_cache
            async with await dev.prepare_model_from_cache(blob, token, add_model()) as pm:
                np.testing.assert_array_equal((await pm.execute([ones(), ones()])).outputs[0], 2 * ones())
            with pytest.raises(InvalidArgument):
                await dev.prepare_model_from_cache(blob[:-1] + bytes([blob[-1] ^ 1]), token)
            task = dev.prepare_model_async(add_model())
            assert isinstance(await task, aio.PreparedModel)

    _run(main)


def test_several_devices_and_mtls(pki: Pki, mtls_server: LocalServer) -> None:  # noqa: F811  (fixtures)
    """``device=`` routes every call to that device (``nnhal-device``); mTLS connects with ``tls=``."""
    a = np.arange(8, dtype=np.float32).reshape(2, 4)

    async def main() -> None:
        async with aio.Device.connect(mtls_server.address, tls=pki.client(pki.a)) as dev:
            pm = await dev.prepare_model(add_model())
            np.testing.assert_array_equal((await pm.execute([a, a])).outputs[0], a + a)
        with LocalServer("--device", "cpu", "--device", "ort", "--cache-secret-file", "none") as two:
            async with aio.Device.connect(two.address, device="ort") as ort:
                assert ort.name == "ort"
                pm = await ort.prepare_model(add_model())
                np.testing.assert_array_equal((await pm.execute([a, a])).outputs[0], a + a)
            with pytest.raises(HalError, match="no device named 'gpu'"):
                await aio.Device.connect(two.address, device="gpu")

    _run(main)


def _at(pool: int, offset: int = 0, length: int = 32) -> RequestArgument:
    """A 2x4 float32 argument in pool ``pool`` (length 0: a driver-managed buffer)."""
    return RequestArgument(location=DataLocation(pool, offset, length))


def test_driver_managed_buffers(server: LocalServer) -> None:
    """allocate, an execution writing its output into a buffer and the next reading it from
    there (no round trip), copyFrom / copyTo; roles that do not fit are INVALID_ARGUMENT."""
    a, b = np.arange(8, dtype=np.float32).reshape(2, 4), np.full((2, 4), 0.5, np.float32)

    async def main() -> None:
        async with aio.Device.connect(server.address) as dev, await dev.prepare_model(add_model()) as pm:
            role = BufferRole(model_index=0, io_index=0, frequency=1.0)
            async with await dev.allocate(BufferDesc(), [pm], [role], [role]) as buf:
                pools: tuple[MemoryPool, ...] = (InlinePool(a.tobytes() + b.tobytes(), 64), buf.pool())
                into = Request((_at(0), _at(0, 32)), (_at(1, length=0),), pools)
                assert (await pm.execute_request(into)).status == ErrorStatus.NONE
                np.testing.assert_array_equal(await buf.copy_to_array(np.float32, (2, 4)), a + b)
                pools = (buf.pool(), InlinePool(b.tobytes(), 32), InlinePool(b"", 32))
                out_of = Request((_at(0, length=0), _at(1)), (_at(2),), pools)
                result = await pm.execute_request(out_of)
                np.testing.assert_array_equal(
                    np.frombuffer(result.output_pools[2], np.float32).reshape(2, 4), a + 2 * b
                )
                await buf.copy_from(3 * a)
                np.testing.assert_array_equal(await buf.copy_to_array(np.float32, (2, 4)), 3 * a)
            with pytest.raises(InvalidArgument):
                await dev.allocate(BufferDesc(), [pm], [BufferRole(0, 5, 1.0)], [])

    _run(main)

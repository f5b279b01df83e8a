"""Planned numpy calls on the session's same-host queue, across processes.

A numpy execution whose layout the queue granted an id goes from the arrays straight to a
compact call and from its answer straight to the outputs (``NumpyIO.planned``,
``SameHostQueue.execute_planned``), for the sync and the asyncio client: other shapes and
a new queue are planned afresh (their first call asks for an id), the outputs are the
caller's own (not views of a ring that is reused), an answer that does not hold together
is refused with GENERAL_FAILURE and the queue serves on, and a SIGKILLed or frozen server
releases a planned call with DEAD_OBJECT within the gRPC path's bounds.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np
import pytest

from nnhal.client import aio
from nnhal.client.device import Device
from nnhal.client.prepared_model import PreparedModel
from nnhal.client.remote.aio_samehost import AioSameHostQueue
from nnhal.client.remote.samehost import SameHostQueue
from nnhal.client.remote.transport import DEATH_DETECTION_BOUND_S
from nnhal.core import fastanswer, fastpacket
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, GeneralFailure, HalError
from nnhal.core.types import NO_TIMING, DataLocation, InlinePool, Request, RequestArgument, Timing
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model

pytestmark = pytest.mark.integration


class _Planned:
    """Counts the planned calls a queue carried (a result, or a failure: not None)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: type[Any]) -> None:
        self.carried = 0
        real = cls.execute_planned
        if asyncio.iscoroutinefunction(real):

            async def spy_async(queue: Any, *args: Any) -> Any:
                try:
                    result = await real(queue, *args)
                except HalError:
                    self.carried += 1  # sent, and failed
                    raise
                self.carried += result is not None
                return result

            monkeypatch.setattr(cls, "execute_planned", spy_async)
        else:

            def spy(queue: Any, *args: Any) -> Any:
                try:
                    result = real(queue, *args)
                except HalError:
                    self.carried += 1  # sent, and failed
                    raise
                self.carried += result is not None
                return result

            monkeypatch.setattr(cls, "execute_planned", spy)


@pytest.fixture
def planned_sync(monkeypatch: pytest.MonkeyPatch) -> _Planned:
    return _Planned(monkeypatch, SameHostQueue)


@pytest.fixture
def planned_aio(monkeypatch: pytest.MonkeyPatch) -> _Planned:
    return _Planned(monkeypatch, AioSameHostQueue)


def _pair(rows: int, k: float) -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    return a, np.full((rows, 4), k, np.float32)


def _base(arr: np.ndarray) -> object:
    """The object whose memory ``arr`` views, at the end of its chain of bases."""
    base: object = arr
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base


@pytest.fixture
def variable_pm(device: Device) -> Iterator[PreparedModel]:
    with device.prepare_model_sync(add_model((0, 4))) as pm:
        yield pm


def test_repeated_layouts_take_planned_calls_and_other_shapes_are_planned_afresh(
    device: Device, variable_pm: PreparedModel, planned_sync: _Planned
) -> None:
    results = []
    for rows in (2, 2, 2, 3, 3, 3, 2, 5):
        a, b = _pair(rows, rows)
        out = variable_pm.execute([a, b]).outputs[0]
        np.testing.assert_array_equal(out, a + b)
        results.append((out, a + b))
    # Each layout's first call asks for its id over the general path; the repeats are planned
    # (the 2 rows again too: its id is still granted), the 5 rows are a layout of their own.
    assert planned_sync.carried == 5
    for out, expected in results:  # later calls left earlier outputs alone
        np.testing.assert_array_equal(out, expected)
        assert isinstance(_base(out), bytes)  # the answer's own bytes, not the ring
    queue = device.remote.same_host
    assert queue is not None and queue.open


def test_a_new_queue_is_planned_afresh(device: Device, planned_sync: _Planned) -> None:
    with device.prepare_model_sync(add_model()) as pm:
        a, b = _pair(2, 1)
        for _ in range(3):
            np.testing.assert_array_equal(pm.execute([a, b]).outputs[0], a + b)
        assert planned_sync.carried == 2
        queue = device.remote.same_host
        assert queue is not None and queue.open_links
        queue._drop(queue.open_links[0])  # as after a call that timed out: a later call opens a new queue
        for k in range(3):
            np.testing.assert_array_equal(pm.execute([a, b + k]).outputs[0], a + b + k)
        # The new queue's first call asked for the layout's id again; the next two were planned.
        assert planned_sync.carried == 4


def _corrupt_next_answer(link: Any, corrupt: Callable[[bytes], bytes]) -> None:
    """Have the link read its next answer through ``corrupt`` (the real packet is consumed, so
    the queue stays in step)."""
    real = link.results.read

    def read() -> tuple[int, bytes] | None:
        packet = real()
        if packet is None:
            return None
        link.results.read = real
        kind, payload = packet
        assert kind == fastpacket.ANSWER
        return kind, corrupt(payload)

    link.results.read = read


def _bigger_shape(payload: bytes) -> bytes:
    """The answer's first output shape made [1000, 1000]: more than its output pool holds."""
    _status, mlen, *_rest = fastanswer.ANSWER_HEADER.unpack_from(payload)
    at = fastanswer.ANSWER_HEADER.size + mlen + 8  # the shape's rank and flag, then its dims
    return payload[:at] + (1000).to_bytes(4, "little") * 2 + payload[at + 8 :]


_CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "shape beyond the pool": _bigger_shape,
    "truncated": lambda p: p[:-1],
    "trailing bytes": lambda p: p + b"\0",
    "unknown status": lambda p: (77).to_bytes(4, "little") + p[4:],
}


@pytest.mark.parametrize("corruption", list(_CORRUPTIONS))
def test_a_planned_answer_that_does_not_hold_together_is_refused(
    device: Device, planned_sync: _Planned, corruption: str
) -> None:
    with device.prepare_model_sync(add_model()) as pm:
        a, b = _pair(2, 1)
        for _ in range(2):
            pm.execute([a, b])
        queue = device.remote.same_host
        assert queue is not None and queue.open_links
        _corrupt_next_answer(queue.open_links[0], _CORRUPTIONS[corruption])
        with pytest.raises(GeneralFailure):
            pm.execute([a, b])
        carried = planned_sync.carried
        np.testing.assert_array_equal(pm.execute([a, b + 1]).outputs[0], a + b + 1)  # serves on
        assert planned_sync.carried == carried + 1  # still planned: the queue stayed in step


def _run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 60))
    # A failed call's traceback (frames that hold the closed session, hence its channel) is a
    # reference cycle: grpc.aio unbinds its poller from this loop only once its last channel is
    # collected, and a poller left bound disturbs the next event loop of this worker process.
    gc.collect()


def test_the_asyncio_client_plans_its_calls_alike(server: LocalServer, planned_aio: _Planned) -> None:
    async def main() -> None:
        async with aio.Device.connect(server.address) as dev, await dev.prepare_model(add_model((0, 4))) as pm:
            results = []
            for rows in (2, 2, 2, 3, 3):
                a, b = _pair(rows, rows)
                out = (await pm.execute([a, b])).outputs[0]
                np.testing.assert_array_equal(out, a + b)
                results.append((out, a + b))
            assert planned_aio.carried == 3
            for out, expected in results:
                np.testing.assert_array_equal(out, expected)
                assert isinstance(_base(out), bytes)
            queue = dev.remote.same_host
            assert queue is not None and queue.open_links
            _corrupt_next_answer(queue.open_links[0], _bigger_shape)
            with pytest.raises(GeneralFailure):
                await pm.execute([a, b])
            carried = planned_aio.carried
            a, b = _pair(3, 7)
            np.testing.assert_array_equal((await pm.execute([a, b])).outputs[0], a + b)
            assert planned_aio.carried == carried + 1  # still planned: the queue stayed in step

    _run(main)


def test_sigkill_during_a_planned_sync_call_is_dead_object(own_server: LocalServer, planned_sync: _Planned) -> None:
    dev = Device.connect(own_server.address)
    try:
        pm = dev.prepare_model_sync(add_model())
        a, b = _pair(2, 1)
        for _ in range(2):
            pm.execute([a, b])
        assert planned_sync.carried == 1
        dev.set_faults(execute_delay_ms=10_000)
        failure: list[BaseException] = []

        def run() -> None:
            try:
                pm.execute([a, b])
            except BaseException as err:  # reported below
                failure.append(err)

        waiter = threading.Thread(target=run)
        waiter.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        own_server.signal(signal.SIGKILL)
        waiter.join(5.0)
        assert not waiter.is_alive(), "the planned call's waiter was not released"
        assert time.monotonic() - t0 < 1.0, "released later than the gRPC path's bound for a killed server"
        assert failure and isinstance(failure[0], DeadObject), failure
        assert planned_sync.carried == 2  # the killed call was planned
        with pytest.raises(DeadObject):
            pm.execute([a, b])
    finally:
        dev.close()


def test_sigkill_during_a_planned_asyncio_call_is_dead_object(own_server: LocalServer, planned_aio: _Planned) -> None:
    async def main() -> None:
        dev = await aio.Device.connect(own_server.address)
        try:
            pm = await dev.prepare_model(add_model())
            a, b = _pair(2, 1)
            for _ in range(2):
                await pm.execute([a, b])
            assert planned_aio.carried == 1
            await dev.set_faults(execute_delay_ms=10_000)
            task = asyncio.ensure_future(pm.execute([a, b]))
            await asyncio.sleep(0.3)
            assert not task.done()
            t0 = time.monotonic()
            own_server.signal(signal.SIGKILL)
            with pytest.raises(DeadObject):
                await asyncio.wait_for(task, 5.0)
            assert time.monotonic() - t0 < 1.0, "released later than the gRPC path's bound for a killed server"
            assert planned_aio.carried == 2  # the killed call was planned
            with pytest.raises(DeadObject):
                await pm.execute([a, b])
        finally:
            await dev.close()

    _run(main)


def test_a_planned_call_past_its_deadline_keeps_the_grpc_mapping(device: Device, planned_sync: _Planned) -> None:
    with device.prepare_model_sync(add_model()) as pm:
        a, b = _pair(2, 1)
        for _ in range(2):
            pm.execute([a, b])
        device.set_faults(execute_delay_ms=1_500)
        try:
            with pytest.raises(HalError) as err:
                pm.execute([a, b], timeout=0.2)
        finally:
            device.set_faults(execute_delay_ms=0)
        assert err.value.error_status in (
            ErrorStatus.MISSED_DEADLINE_TRANSIENT,
            ErrorStatus.MISSED_DEADLINE_PERSISTENT,
        ), err.value
        np.testing.assert_array_equal(pm.execute([a, b]).outputs[0], a + b)


@pytest.mark.parametrize("client", ["sync", "aio"])
def test_a_frozen_server_releases_a_planned_call_within_the_keepalive_bound(
    own_server: LocalServer, client: str, planned_sync: _Planned, planned_aio: _Planned
) -> None:
    a, b = _pair(2, 1)

    def freeze() -> float:
        time.sleep(0.3)
        own_server.signal(signal.SIGSTOP)
        return time.monotonic()

    try:
        if client == "sync":
            with Device.connect(own_server.address) as dev:
                pm = dev.prepare_model_sync(add_model())
                for _ in range(2):
                    pm.execute([a, b])
                dev.set_faults(execute_delay_ms=30_000)
                failure: list[BaseException] = []

                def run() -> None:
                    try:
                        pm.execute([a, b])
                    except BaseException as err:  # reported below
                        failure.append(err)

                waiter = threading.Thread(target=run)
                waiter.start()
                t0 = freeze()
                waiter.join(DEATH_DETECTION_BOUND_S + 5)
                assert not waiter.is_alive(), "the planned call's waiter was not released"
                detected = time.monotonic() - t0
                assert failure and isinstance(failure[0], DeadObject), failure
                assert planned_sync.carried == 2  # the frozen call was planned
        else:

            async def main() -> float:
                async with aio.Device.connect(own_server.address) as dev:
                    pm = await dev.prepare_model(add_model())
                    for _ in range(2):
                        await pm.execute([a, b])
                    await dev.set_faults(execute_delay_ms=30_000)
                    task = asyncio.ensure_future(pm.execute([a, b]))
                    t0 = await asyncio.get_running_loop().run_in_executor(None, freeze)
                    with pytest.raises(DeadObject):
                        await asyncio.wait_for(task, DEATH_DETECTION_BOUND_S + 5)
                    assert planned_aio.carried == 2  # the frozen call was planned
                    return time.monotonic() - t0

            detected = asyncio.run(main())
        assert detected <= DEATH_DETECTION_BOUND_S, f"a frozen server detected after {detected:.1f} s"
    finally:
        own_server.signal(signal.SIGCONT)


def test_closing_the_asyncio_session_ends_a_waiting_queued_call_with_its_end_error(
    own_server: LocalServer, planned_aio: _Planned
) -> None:
    """The queued call is awaited without the session call path's race: closing the session
    still ends it at once, with the error that race gave (the session's end error)."""

    async def main() -> None:
        dev = await aio.Device.connect(own_server.address)
        pm = await dev.prepare_model(add_model())
        a, b = _pair(2, 1)
        for _ in range(2):
            await pm.execute([a, b])
        await dev.set_faults(execute_delay_ms=5_000)
        planned = asyncio.ensure_future(pm.execute([a, b]))
        await asyncio.sleep(0.3)
        assert not planned.done()
        t0 = time.monotonic()
        await dev.close()
        with pytest.raises(GeneralFailure, match="executeSynchronously_1_3: the device proxy is closed"):
            await asyncio.wait_for(planned, 2.0)
        assert time.monotonic() - t0 < 2.0
        assert planned_aio.carried == 2  # the waiting call was planned

    _run(main)


def _measured(outcomes: list[Any], expected: list[np.ndarray]) -> None:
    """Each outcome measured (its own timing, read from its answer), its outputs right and its
    pools its own (no dict nor bytes shared with another call's)."""
    for outcome, want in zip(outcomes, expected):
        assert outcome.timing.time_on_device != NO_TIMING and outcome.timing.time_in_driver != NO_TIMING
        np.testing.assert_array_equal(outcome.outputs[0], want)
    assert len({id(o.output_pools) for o in outcomes}) == len(outcomes)
    assert len({id(_base(o.outputs[0])) for o in outcomes}) == len(outcomes)


def test_measured_planned_calls_carry_their_own_timing_and_pools(device: Device, planned_sync: _Planned) -> None:
    """A planned call's answer is read apart (``fastanswer.Apart``): no result made, but each
    call's timing and output pools its own, on the queue and on a burst's fast path."""
    a, b = _pair(2, 1)
    with device.prepare_model_sync(add_model()) as pm:
        outcomes = [pm.execute([a, b + k], measure=True) for k in range(5)]
        assert planned_sync.carried == 4
        _measured(outcomes, [a + b + k for k in range(5)])
        plain = pm.execute([a, b])  # unmeasured after measured calls: no timing
        assert plain.timing == Timing() and planned_sync.carried == 5
        with pm.burst() as burst:
            outcomes = [burst.execute_numpy([a, b + k], measure=True) for k in range(5)]
            _measured(outcomes, [a + b + k for k in range(5)])
            # A Request's outcome on the burst's fast path is made from its answer read apart too.
            n = a.nbytes
            args = (RequestArgument(location=DataLocation(0, 0, n)), RequestArgument(location=DataLocation(0, n, n)))
            outs = (RequestArgument(location=DataLocation(1, 0, n)),)
            results = []
            for k in range(5):
                pools = (InlinePool(a.tobytes() + (b + k).tobytes(), 2 * n), InlinePool(b"", n))
                outcome = burst.execute(Request(args, outs, pools), measure=True)
                outcome.raise_for_status()
                outcome.outputs = [np.frombuffer(outcome.output_pools[1], np.float32).reshape(a.shape)]
                results.append(outcome)
            _measured(results, [a + b + k for k in range(5)])


def test_the_asyncio_client_reads_measured_planned_answers_alike(server: LocalServer, planned_aio: _Planned) -> None:
    async def main() -> None:
        a, b = _pair(2, 1)
        async with aio.Device.connect(server.address) as dev, await dev.prepare_model(add_model()) as pm:
            outcomes = [await pm.execute([a, b + k], measure=True) for k in range(5)]
            assert planned_aio.carried == 4
            _measured(outcomes, [a + b + k for k in range(5)])
            async with pm.burst() as burst:
                outcomes = [await burst.execute_numpy([a, b + k], measure=True) for k in range(5)]
            _measured(outcomes, [a + b + k for k in range(5)])

    _run(main)

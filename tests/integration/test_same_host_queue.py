"""The session's same-host execution queue across processes: every execution form off gRPC.

A client on the server's host sends every execution form (sync, async, fenced, reusable,
the AIDL forms) through its session's shared-memory queue, transparently: the answers
equal the gRPC path's, the server counts them under ``same_host``; a server started with
``--no-fast-path`` keeps gRPC. Packets the server cannot trust are refused with a status
and it serves on; a client whose results pile up unread loses its queue (rings given
back) and its next calls take a new one; a SIGKILLed server releases a waiting sync or
async execution with DEAD_OBJECT within the gRPC path's bound. The asyncio client does
the same on its own queue (its doorbell a reader of the event loop).
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator

import numpy as np
import pytest

from nnhal.client import aio
from nnhal.client.device import Device
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote import FastBurstLink
from nnhal.client.remote.aio_queue_link import AioQueueLink
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.client.remote.queue_ends import QueueEnded, QueueTimeout
from nnhal.client.remote.samehost import SameHostQueue
from nnhal.core import fastring, samehost, wire_request
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.proto import service_pb2 as spb
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, ones

pytestmark = pytest.mark.integration
#: A killed server's socket closes at once; the waiter is released well under the keepalive
#: bound (5 s) that a frozen server takes. Roomy, as a loaded 2-core machine once took over 1 s.
KILLED_BOUND_S = 3.0


def _add_request(a: np.ndarray, b: np.ndarray) -> Request:
    n = a.nbytes
    return Request(
        (RequestArgument(location=DataLocation(0, 0, n)), RequestArgument(location=DataLocation(0, n, n))),
        (RequestArgument(location=DataLocation(1, 0, n)),),
        (InlinePool(a.tobytes() + b.tobytes(), 2 * n), InlinePool(b"", n)),
    )


def _counts(dev: Device) -> tuple[int, int]:
    stats = dev.stats()
    return stats["executions_same_host"], stats["executions_grpc"]


@pytest.fixture
def grpc_only() -> Iterator[None]:
    """Sessions opened in the test make no queue (the gRPC path, for comparison)."""
    saved = SameHostQueue.ENABLED
    SameHostQueue.ENABLED = False
    try:
        yield
    finally:
        SameHostQueue.ENABLED = saved


def _every_form(dev: Device, a: np.ndarray, b: np.ndarray) -> list[tuple[object, ...]]:
    """One execution of each form; what each answered (comparable across transports)."""
    out: list[tuple[object, ...]] = []
    request = _add_request(a, b)
    with dev.prepare_model_sync(add_model()) as pm:
        sync = pm.execute([a, b])
        out.append(("execute", sync.status, sync.outputs[0].tolist()))
        raw = pm.execute_request(request)
        out.append(("execute_request", raw.status, raw.output_shapes, bytes(raw.output_pools[1])))
        cb = pm.execute_async([a, b])
        assert cb.wait(10)
        assert cb.value is not None
        out.append(("execute_async", cb.status, cb.value.outputs[0].tolist()))
        fenced = pm.execute_fenced(request)
        info = fenced.get_execution_info()
        out.append(("execute_fenced", info.status, bytes(info.output_pools[1])))
        with pm.create_reusable_execution([a, b]) as reusable:
            for _ in range(2):
                run = reusable.compute()
                out.append(("reusable", run.status, run.outputs[0].tolist()))
        config = pm.execute_with_config(request)
        out.append(("config", config.status, bytes(config.output_pools[1])))
        aidl = pm.execute_request_aidl(request)
        out.append(("aidl", aidl.status, bytes(aidl.output_pools[1])))
        bad = Request(request.inputs, (RequestArgument(location=DataLocation(1, 0, 8)),), request.pools)
        small = pm.execute_request(bad)  # an error status travels too
        out.append(("too small", small.status, small.output_shapes))
    return out


def test_every_form_takes_the_queue_and_answers_as_grpc(server: LocalServer, grpc_only: None) -> None:
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 0.5, np.float32)
    with Device.connect(server.address) as plain:
        assert plain.remote.same_host is None
        before = _counts(plain)
        over_grpc = _every_form(plain, a, b)
        middle = _counts(plain)
        SameHostQueue.ENABLED = True
        with Device.connect(server.address) as dev:
            over_queue = _every_form(dev, a, b)
            assert dev.remote.same_host is not None and dev.remote.same_host.open
        after = _counts(plain)
    assert over_queue == over_grpc
    executions = len(over_grpc)  # the refused one (OUTPUT_INSUFFICIENT_SIZE) is launched too
    assert middle[0] - before[0] == 0 and middle[1] - before[1] >= executions
    # Every one of the queued session's executions was counted as same_host, none as gRPC
    # (other tests' sessions on this shared server may add to both meanwhile: at least).
    assert after[0] - middle[0] >= executions


def test_a_server_without_the_fast_path_keeps_grpc() -> None:
    a = np.ones((2, 4), np.float32)
    with LocalServer("--no-fast-path") as srv, Device.connect(srv.address) as dev:
        with dev.prepare_model_sync(add_model()) as pm:
            assert pm.execute([a, a]).status == ErrorStatus.NONE
            cb = pm.execute_async([a, a])
            assert cb.wait(10) and cb.status == ErrorStatus.NONE
        assert dev.remote.same_host is None
        assert _counts(dev) == (0, 2)


def test_corrupted_packets_are_refused_and_the_server_serves_on(device: Device) -> None:
    a = np.ones((2, 4), np.float32)
    with device.prepare_model_sync(add_model()) as pm:
        link = FastBurstLink.open(device.remote, "", executions=True)
        try:
            sid = device.remote.session_id
            good = spb.ExecuteRequest(session=sid, prepared_model=pm.handle).SerializeToString()
            cases = [
                (lambda ring: ring.write(samehost.METHOD, b"\x01\x00", crc=7), "checksum"),
                (lambda ring: ring.write(samehost.METHOD, b"\x01"), "shorter than its header"),
                (lambda ring: ring.write(samehost.METHOD, samehost.encode_method(99, "", good)), "unknown method"),
                (lambda ring: ring.write(samehost.METHOD, samehost.encode_method(3, "", b"\xff" * 40)), "decoded"),
                (
                    lambda ring: ring.write(
                        samehost.METHOD,
                        samehost.encode_method(1, "", spb.ExecuteRequest(session="other").SerializeToString()),
                    ),
                    "another session",
                ),
                (lambda ring: ring.write(samehost.REPLY, b""), "unexpected packet kind"),
            ]
            for write, why in cases:
                refused = link.send_raw(write)  # type: ignore[arg-type]
                assert refused.status == ErrorStatus.INVALID_ARGUMENT, refused.message
                assert why in refused.message
            untagged = link.execute(_add_request(a, a), ExecutionOptions(), pm.handle, sid)
            assert untagged is not None and untagged.status == ErrorStatus.INVALID_ARGUMENT
            assert "tagged packet" in untagged.message
            tag = samehost.encode_tag("test-1")
            ok = link.execute(_add_request(a, a), ExecutionOptions(), pm.handle, sid, tag=tag)
            assert ok is not None and ok.status == ErrorStatus.NONE, "the queue did not recover"
        finally:
            link.close()
        assert pm.execute([a, a]).status == ErrorStatus.NONE  # the session's own queue serves on


def test_a_client_that_stops_reading_loses_its_queue(device: Device) -> None:
    """Results the client never reads fill its result ring: the server ends that queue at
    once (it executes nothing more for it), gives its rings back, and serves on."""
    a = np.ones((2, 4), np.float32)
    with device.prepare_model_sync(add_model()) as pm:
        before = device.stats()["bytes_in_use"]
        link = FastBurstLink.open(device.remote, "", ring_bytes=fastring.MIN_RING_BYTES, executions=True)
        try:
            msg = spb.ExecuteRequest(session=device.remote.session_id, prepared_model=pm.handle)
            wire_request.request_to(_add_request(a, a), msg.request)
            payload = samehost.encode_method(1, "", msg.SerializeToString())
            assert device.stats()["bytes_in_use"] >= before + 2 * fastring.MIN_RING_BYTES
            sent = full = 0
            end = time.monotonic() + 10.0
            while full < 20 and time.monotonic() < end:  # until the server stops taking requests
                try:
                    link.requests.write(samehost.METHOD, payload)
                    sent += 1
                    full = 0
                    link.doorbell.ring()
                except (fastring.RingError, OSError):
                    full += 1
                    time.sleep(0.01)
            # More answers than the result ring holds (at most ~100 bytes each): the queue was
            # ended for that (its last event, below), and took nothing more after it.
            assert sent * 100 > fastring.MIN_RING_BYTES
            end = time.monotonic() + 5.0
            while device.stats()["bytes_in_use"] > before and time.monotonic() < end:
                time.sleep(0.02)
            assert device.stats()["bytes_in_use"] <= before, "the ended queue's rings were not given back"
            ended = link._ended()  # the queue's last event: why the server ended it
            assert ended.status == ErrorStatus.INVALID_ARGUMENT and "result ring" in ended.message
        finally:
            link.close()
        assert pm.execute([a, a]).status == ErrorStatus.NONE


def _flood(requests: fastring.Producer, ring: Callable[[], None], payload: bytes) -> int:
    """Write request packets without reading an answer until the server stops taking them
    (it ended the queue: its answers no longer fit the result ring); how many were sent."""
    sent = full = 0
    end = time.monotonic() + 10.0
    while full < 20 and time.monotonic() < end:
        try:
            requests.write(samehost.METHOD, payload)
            sent += 1
            full = 0
            ring()
        except (fastring.RingError, OSError):
            full += 1
            time.sleep(0.01)
    return sent


def _method_payload(session: str, handle: str) -> bytes:
    a = np.ones((2, 4), np.float32)
    msg = spb.ExecuteRequest(session=session, prepared_model=handle)
    wire_request.request_to(_add_request(a, a), msg.request)
    return samehost.encode_method(1, "", msg.SerializeToString())


def _drain_answers(results: fastring.Consumer[bytes]) -> None:
    while results.read() is not None:
        pass


def test_a_queue_the_server_ends_wakes_its_waiting_sync_client_at_once(device: Device) -> None:
    """The server ends a queue on its own (here: its answers no longer fit): a client waiting on
    it wakes at once — the server's end of the doorbell closing is seen by the waiter — with
    the status the server ended it with, not at its call timeout."""
    with device.prepare_model_sync(add_model()) as pm:
        link = FastBurstLink.open(device.remote, "", ring_bytes=fastring.MIN_RING_BYTES, executions=True)
        try:
            assert _flood(link.requests, link.doorbell.ring, _method_payload(device.remote.session_id, pm.handle))
            _drain_answers(link.results)  # what was answered before the end: not the point here
            t0 = time.monotonic()
            with pytest.raises(QueueEnded) as ended:
                link._await_packet(30.0)
            assert time.monotonic() - t0 < 5.0, "the waiter slept on after the server ended its queue"
            assert ended.value.result.status == ErrorStatus.INVALID_ARGUMENT
            assert "result ring" in ended.value.result.message
        finally:
            link.close()


def test_a_queue_the_server_ends_wakes_its_waiting_asyncio_client_at_once(server: LocalServer) -> None:
    async def main() -> None:
        async with aio.Device.connect(server.address) as dev, await dev.prepare_model(add_model()) as pm:
            link = await AioQueueLink.open(dev.remote, fastring.MIN_RING_BYTES)
            try:
                payload = _method_payload(dev.session_id, pm.handle)
                assert _flood(link.requests, link.doorbell.ring, payload)
                _drain_answers(link.results)
                t0 = time.monotonic()
                with pytest.raises(QueueEnded) as ended:
                    await link._await_packet(30.0)
                assert time.monotonic() - t0 < 5.0, "the waiter slept on after the server ended its queue"
                assert ended.value.result.status == ErrorStatus.INVALID_ARGUMENT
                assert "result ring" in ended.value.result.message
            finally:
                link.close()
            out = await pm.execute([ones(), ones()])  # the session's own queue serves on
            np.testing.assert_array_equal(out.outputs[0], 2 * ones())

    _run(main)


def test_an_asyncio_waits_time_is_its_own_whatever_the_links_timer_was_armed_for(server: LocalServer) -> None:
    """The asyncio link keeps one timer across calls: a call whose time ends before the armed
    timer's is woken at its own end, and one woken early by an earlier call's timer waits on to
    its own end (nothing is sent here: no answer comes)."""

    async def main() -> None:
        async with aio.Device.connect(server.address) as dev:
            link = await AioQueueLink.open(dev.remote, fastring.MIN_RING_BYTES)
            try:
                for armed, own in ((30.0, 0.2), (0.2, 0.6)):
                    earlier = asyncio.ensure_future(link._await_packet(armed))
                    await asyncio.sleep(0.05)
                    earlier.cancel()  # its timer stays armed for the link's next call
                    with pytest.raises(asyncio.CancelledError):
                        await earlier
                    t0 = time.monotonic()
                    with pytest.raises(QueueTimeout):
                        await link._await_packet(own)
                    waited = time.monotonic() - t0
                    assert waited >= own * 0.9, f"a {own} s wait ended after {waited:.3f} s"
                    assert waited < own + 5.0, f"a {own} s wait took {waited:.3f} s"
            finally:
                link.close()

    _run(main)


@pytest.mark.parametrize("form", ["sync", "async"])
def test_sigkill_during_a_same_host_execution_is_dead_object(own_server: LocalServer, form: str) -> None:
    dev = Device.connect(own_server.address)
    try:
        pm = dev.prepare_model_sync(add_model())
        a = np.ones((2, 4), np.float32)
        assert pm.execute([a, a]).status == ErrorStatus.NONE
        queue = dev.remote.same_host
        assert queue is not None and queue.open
        dev.set_faults(execute_delay_ms=10_000)
        outcome: list[ExecutionOutcome | BaseException] = []

        def run() -> None:
            try:
                if form == "sync":
                    outcome.append(pm.execute_request(_add_request(a, a)))
                else:
                    cb = pm.execute_request_async(_add_request(a, a))
                    cb.wait(20)
                    outcome.append(ExecutionOutcome(cb.status, cb.message))
            except BaseException as err:  # reported below
                outcome.append(err)

        waiter = threading.Thread(target=run)
        waiter.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        own_server.signal(signal.SIGKILL)
        waiter.join(5.0)
        assert not waiter.is_alive(), "the same-host execution's waiter was not released"
        assert time.monotonic() - t0 < KILLED_BOUND_S, "released as a keepalive would: the closed socket unseen"
        result = outcome[0]
        assert isinstance(result, ExecutionOutcome) and result.status == ErrorStatus.DEAD_OBJECT, result
        t1 = time.monotonic()
        with pytest.raises(DeadObject):
            pm.execute([a, a])
        assert time.monotonic() - t1 < 0.2, "calls on a dead server must fail at once"
    finally:
        dev.close()


def _run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 60))


async def _every_form_aio(dev: aio.Device, a: np.ndarray, b: np.ndarray) -> list[tuple[object, ...]]:
    """The asyncio client's ``_every_form``."""
    out: list[tuple[object, ...]] = []
    request = _add_request(a, b)
    async with await dev.prepare_model(add_model()) as pm:
        sync = await pm.execute([a, b])
        out.append(("execute", sync.status, sync.outputs[0].tolist()))
        raw = await pm.execute_request(request)
        out.append(("execute_request", raw.status, raw.output_shapes, bytes(raw.output_pools[1])))
        launched = await pm.execute_async([a, b])
        out.append(("execute_async", launched.status, launched.outputs[0].tolist()))
        fenced = await pm.execute_fenced(request)
        info = await fenced.get_execution_info()
        out.append(("execute_fenced", info.status, bytes(info.output_pools[1])))
        reusable = await pm.create_reusable_execution([a, b])
        for _ in range(2):
            run = await reusable.compute()
            out.append(("reusable", run.status, run.outputs[0].tolist()))
        await reusable.release()
        config = await pm.execute_with_config(request)
        out.append(("config", config.status, bytes(config.output_pools[1])))
        aidl = await pm.execute_request_aidl(request)
        out.append(("aidl", aidl.status, bytes(aidl.output_pools[1])))
        fenced_aidl = await pm.execute_fenced_aidl(request)
        info = await fenced_aidl.get_execution_info()
        out.append(("aidl fenced", info.status, bytes(info.output_pools[1])))
        bad = Request(request.inputs, (RequestArgument(location=DataLocation(1, 0, 8)),), request.pools)
        small = await pm.execute_request(bad)
        out.append(("too small", small.status, small.output_shapes))
    return out


def test_every_form_of_the_asyncio_client_takes_the_queue_and_answers_as_grpc(
    server: LocalServer, grpc_only: None
) -> None:
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.full((2, 4), 0.5, np.float32)

    async def main() -> None:
        async with aio.Device.connect(server.address) as plain:
            assert plain.remote.same_host is None
            before = _aio_counts(await plain.stats())
            over_grpc = await _every_form_aio(plain, a, b)
            middle = _aio_counts(await plain.stats())
            SameHostQueue.ENABLED = True
            async with aio.Device.connect(server.address) as dev:
                over_queue = await _every_form_aio(dev, a, b)
                queue = dev.remote.same_host
                assert queue is not None and queue.open
            after = _aio_counts(await plain.stats())
        assert over_queue == over_grpc
        executions = len(over_grpc)
        assert middle[0] - before[0] == 0 and middle[1] - before[1] >= executions
        assert after[0] - middle[0] >= executions

    _run(main)


def _aio_counts(stats: dict[str, int]) -> tuple[int, int]:
    return stats["executions_same_host"], stats["executions_grpc"]


def test_the_asyncio_client_keeps_calls_concurrent_beside_its_queue(server: LocalServer) -> None:
    """Executions started together from one loop all complete, each on a link of the queue
    (``test_same_host_links`` counts them); every result is right."""
    a = np.arange(8, dtype=np.float32).reshape(2, 4)

    async def main() -> None:
        async with aio.Device.connect(server.address) as dev, await dev.prepare_model(add_model()) as pm:
            outs = await asyncio.gather(*(pm.execute([a, np.full_like(a, k)]) for k in range(8)))
            for k, out in enumerate(outs):
                np.testing.assert_array_equal(out.outputs[0], a + k)
            assert dev.remote.same_host is not None and dev.remote.same_host.open

    _run(main)


@pytest.mark.parametrize("form", ["sync", "async"])
def test_sigkill_during_an_asyncio_same_host_execution_is_dead_object(own_server: LocalServer, form: str) -> None:
    async def main() -> None:
        dev = await aio.Device.connect(own_server.address)
        try:
            pm = await dev.prepare_model(add_model())
            a = np.ones((2, 4), np.float32)
            assert (await pm.execute([a, a])).status == ErrorStatus.NONE
            queue = dev.remote.same_host
            assert queue is not None and queue.open
            await dev.set_faults(execute_delay_ms=10_000)
            if form == "sync":
                task = asyncio.ensure_future(pm.execute_request(_add_request(a, a)))
            else:
                task = pm.execute_request_async(_add_request(a, a))
            await asyncio.sleep(0.3)
            assert not task.done()
            t0 = time.monotonic()
            own_server.signal(signal.SIGKILL)
            outcome = await asyncio.wait_for(task, 5.0)
            assert time.monotonic() - t0 < KILLED_BOUND_S, "released as a keepalive would: the closed socket unseen"
            assert outcome.status == ErrorStatus.DEAD_OBJECT, outcome
            t1 = time.monotonic()
            with pytest.raises(DeadObject):
                await pm.execute([a, a])
            assert time.monotonic() - t1 < 0.2, "calls on a dead server must fail at once"
        finally:
            await dev.close()

    _run(main)


def test_cancelling_an_asyncio_queued_execution_closes_the_queue_and_the_next_opens_one(
    own_server: LocalServer,
) -> None:
    """A cancelled call leaves the queue out of step (its answer may still come): the queue is
    closed, the server gives its rings back, and the next call opens a new one."""

    async def main() -> None:
        async with aio.Device.connect(own_server.address) as dev, await dev.prepare_model(add_model()) as pm:
            a = np.ones((2, 4), np.float32)
            assert (await pm.execute([a, a])).status == ErrorStatus.NONE
            queue = dev.remote.same_host
            assert queue is not None and queue.open
            await dev.set_faults(execute_delay_ms=1_000)
            task = asyncio.ensure_future(pm.execute([a, a]))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not queue.open
            await dev.set_faults()
            out = await pm.execute([a, 2 * a])
            np.testing.assert_array_equal(out.outputs[0], 3 * a)
            assert queue.open

    _run(main)

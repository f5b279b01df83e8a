"""Concurrent executions of one session on the same host, across processes: a link each.

A session's same-host queue carries one call at a time per link, so calls made at the same
time (threads of the sync client, tasks of the asyncio one) each take a link of their own,
opened when every link is busy, up to the number the server allows the session (its cap,
said in the first event): every form lands on the same-host queue, none on gRPC. Past the
cap the server refuses a link with RESOURCE_EXHAUSTED_TRANSIENT naming it, charging nothing,
and the call takes gRPC. Layout ids are granted per link, so a planned call only ever uses
an id on the link that granted it. A SIGKILLed server releases the calls waiting on every
link with DEAD_OBJECT; a killed client's links are all torn down and their charges given
back; extra links left unused are closed.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import pytest

from nnhal.client import aio
from nnhal.client.device import Device
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote import FastBurstLink, link_pool, samehost
from nnhal.core import fastring
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, ResourceExhaustedTransient
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model

pytestmark = pytest.mark.integration

#: Threads (or tasks) executing at once on one session.
N = 4
#: Each execution's injected delay: long enough that the N calls overlap on the server
#: (threads released together by a barrier), however loaded the machine.
DELAY_MS = 1000


@pytest.fixture
def srv() -> Iterator[LocalServer]:
    """A server of this test's own: its counters are this test's alone."""
    with LocalServer("--enable-fault-injection") as s:
        yield s


def _counts(stats: dict[str, int]) -> tuple[int, int]:
    return stats["executions_same_host"], stats["executions_grpc"]


def _add_request(a: np.ndarray, b: np.ndarray) -> Request:
    n = a.nbytes
    return Request(
        (RequestArgument(location=DataLocation(0, 0, n)), RequestArgument(location=DataLocation(0, n, n))),
        (RequestArgument(location=DataLocation(1, 0, n)),),
        (InlinePool(a.tobytes() + b.tobytes(), 2 * n), InlinePool(b"", n)),
    )


def _settled_bytes(dev: Device) -> int:
    """The server's ``bytes_in_use`` once the last call's leftovers are given back: a same-host
    call's slot and request data are given back after its answer is written (``Afterwards``), so
    a read right after the answer may still count them. Read until two reads 50 ms apart agree
    (at most 5 s)."""
    last = dev.stats()["bytes_in_use"]
    end = time.monotonic() + 5.0
    while time.monotonic() < end:
        time.sleep(0.05)
        now = dev.stats()["bytes_in_use"]
        if now == last:
            break
        last = now
    return last


def _pair(rows: int, k: float) -> tuple[np.ndarray, np.ndarray]:
    a = np.arange(rows * 4, dtype=np.float32).reshape(rows, 4)
    return a, np.full((rows, 4), k, np.float32)


def _together(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run ``jobs`` on threads of their own, started together; what each returned or raised."""
    out: list[Any] = [None] * len(jobs)
    start = threading.Barrier(len(jobs))

    def run(k: int) -> None:
        try:
            start.wait(10)
            out[k] = jobs[k]()
        except BaseException as err:  # reported by the caller
            out[k] = err

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a concurrent call never returned"
    return out


def _forms(pm: Any, k: int) -> Callable[[], float]:
    """One execution of a form chosen by ``k``: the sum of its output (a + (b = k + 1))."""
    a = np.ones((2, 4), np.float32)
    b = np.full((2, 4), k + 1, np.float32)

    def run() -> float:
        form = k % 5
        if form == 0:
            return float(pm.execute([a, b]).outputs[0].sum())
        if form == 1:
            raw = pm.execute_request(_add_request(a, b))
            return float(np.frombuffer(bytes(raw.output_pools[1]), np.float32).sum())
        if form == 2:
            cb = pm.execute_async([a, b])
            assert cb.wait(30) and cb.value is not None
            return float(cb.value.outputs[0].sum())
        if form == 3:
            info = pm.execute_fenced(_add_request(a, b)).get_execution_info()
            return float(np.frombuffer(bytes(info.output_pools[1]), np.float32).sum())
        with pm.create_reusable_execution([a, b]) as reusable:
            return float(reusable.compute().outputs[0].sum())

    return run


@pytest.mark.parametrize("n", [N, 5])
def test_threads_executing_at_once_all_take_the_same_host_queue(srv: LocalServer, n: int) -> None:
    with Device.connect(srv.address) as dev, dev.prepare_model_sync(add_model()) as pm:
        a = np.ones((2, 4), np.float32)
        assert pm.execute([a, a]).status == ErrorStatus.NONE  # the first link
        dev.set_faults(execute_delay_ms=DELAY_MS)
        before = _counts(dev.stats())
        out = _together([_forms(pm, k) for k in range(n)])
        after = _counts(dev.stats())
        dev.set_faults()
        assert out == [8.0 * (k + 2) for k in range(n)], out
        # Every execution on the same-host queue, none on gRPC: each thread had a link.
        assert after[0] - before[0] == n and after[1] == before[1], (before, after)
        queue = dev.remote.same_host
        assert queue is not None and 1 < len(queue.open_links) <= n
        assert queue.refusals == 0


def test_the_cap_per_session_refuses_a_link_cleanly_and_calls_take_grpc() -> None:
    with (
        LocalServer("--enable-fault-injection", "--max-bursts-per-session", "2") as srv,
        Device.connect(srv.address) as dev,
        dev.prepare_model_sync(add_model()) as pm,
    ):
        a = np.ones((2, 4), np.float32)
        assert pm.execute([a, a]).status == ErrorStatus.NONE
        queue = dev.remote.same_host
        assert queue is not None and len(queue.open_links) == 1
        assert queue.open_links[0].max_queues == 2  # the server said its cap
        other = FastBurstLink.open(dev.remote, "", ring_bytes=fastring.MIN_RING_BYTES, executions=True)
        try:
            charged = _settled_bytes(dev)
            with pytest.raises(ResourceExhaustedTransient, match="cap per session is 2"):
                FastBurstLink.open(dev.remote, "", executions=True)
            assert dev.stats()["bytes_in_use"] == charged  # a refused link is charged nothing
            # The session's queue needs a second link while its first is busy (held here): refused
            # too, so that call takes gRPC, with its right answer.
            held = queue._take()
            assert held is not None
            try:
                before = _counts(dev.stats())
                np.testing.assert_array_equal(pm.execute([a, 2 * a]).outputs[0], 3 * a)
                after = _counts(dev.stats())
            finally:
                queue._give_back(held)
            assert queue.refusals == 1 and len(queue.open_links) == 1
            assert after == (before[0], before[1] + 1), (before, after)  # over gRPC
        finally:
            other.close()
        np.testing.assert_array_equal(pm.execute([a, a]).outputs[0], 2 * a)  # its link serves on


def test_planned_calls_use_only_the_ids_their_own_link_granted(server: LocalServer) -> None:
    """Layout ids are per link (both links grant id 1 here, to different layouts): a layout
    granted on one link travels as a full request on another, which grants its own id."""
    with Device.connect(server.address) as dev, dev.prepare_model_sync(add_model((0, 4))) as pm:
        queue = dev.remote.same_host
        assert queue is not None
        first = queue._take()  # held: the calls below open and use a second link
        assert first is not None
        second = None
        try:
            for k in range(3):  # 2 rows: granted id 1 on the second link, then planned there
                a, b = _pair(2, k)
                np.testing.assert_array_equal(pm.execute([a, b]).outputs[0], a + b)
            second = queue._take()
            assert second is not None and second is not first and second.compact_layouts == 1
            queue._give_back(first)
            for k in range(3):  # 3 rows on the first link: its own id 1
                a, b = _pair(3, k)
                np.testing.assert_array_equal(pm.execute([a, b]).outputs[0], a + b)
            for k in range(3):  # 2 rows on the first link: not the second link's id 1
                a, b = _pair(2, 10 + k)
                np.testing.assert_array_equal(pm.execute([a, b]).outputs[0], a + b)
            assert first.compact_layouts == 2
        finally:
            if second is not None:
                queue._give_back(second)
        # Threads on both links at once, planned on each: every answer right.

        def execute_pair(k: int) -> np.ndarray:
            return pm.execute(list(_pair(2 + k % 2, k))).outputs[0]

        outs = _together([partial(execute_pair, k) for k in range(N)])
        for k, out in enumerate(outs):
            a, b = _pair(2 + k % 2, k)
            np.testing.assert_array_equal(out, a + b)


def test_extra_links_left_unused_are_closed_and_given_back(srv: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(link_pool, "IDLE_S", 0.3)
    opened: list[object] = []
    real_open = FastBurstLink.open

    def counted(*args: Any, **kwargs: Any) -> FastBurstLink:
        link = real_open(*args, **kwargs)
        opened.append(link)
        return link

    monkeypatch.setattr(FastBurstLink, "open", staticmethod(counted))
    with Device.connect(srv.address) as dev, dev.prepare_model_sync(add_model()) as pm:
        a = np.ones((2, 4), np.float32)
        assert pm.execute([a, a]).status == ErrorStatus.NONE
        alone = _settled_bytes(dev)
        dev.set_faults(execute_delay_ms=DELAY_MS)
        _together([_forms(pm, 0) for _ in range(3)])
        dev.set_faults()
        queue = dev.remote.same_host
        assert queue is not None and len(opened) > 1  # extra links (perhaps already closed: see below)
        end = time.monotonic() + 10.0
        while (len(queue.open_links) > 1 or dev.stats()["bytes_in_use"] > alone) and time.monotonic() < end:
            time.sleep(0.05)
        assert len(queue.open_links) == 1, "the extra links were not closed"
        assert dev.stats()["bytes_in_use"] == alone, "the extra links' rings were not given back"
        assert pm.execute([a, a]).status == ErrorStatus.NONE  # the first link serves on


def test_sigkill_releases_the_calls_waiting_on_every_link(own_server: LocalServer) -> None:
    dev = Device.connect(own_server.address)
    try:
        pm = dev.prepare_model_sync(add_model())
        a = np.ones((2, 4), np.float32)
        assert pm.execute([a, a]).status == ErrorStatus.NONE
        dev.set_faults(execute_delay_ms=10_000)
        queue = dev.remote.same_host
        assert queue is not None
        outcome: list[ExecutionOutcome | BaseException] = []

        def run() -> None:
            try:
                outcome.append(pm.execute_request(_add_request(a, a)))
            except BaseException as err:  # reported below
                outcome.append(err)

        waiters = [threading.Thread(target=run) for _ in range(3)]
        for w in waiters:
            w.start()
        end = time.monotonic() + 10.0
        while len(queue.open_links) < 3 and time.monotonic() < end:
            time.sleep(0.02)
        assert len(queue.open_links) == 3
        time.sleep(0.3)  # the calls are in the server's hands
        t0 = time.monotonic()
        own_server.signal(signal.SIGKILL)
        for w in waiters:
            w.join(5.0)
        assert not any(w.is_alive() for w in waiters), "a waiter on a link was not released"
        assert time.monotonic() - t0 < 1.0, "released later than the gRPC path's bound for a killed server"
        assert len(outcome) == 3
        for result in outcome:
            assert isinstance(result, ExecutionOutcome) and result.status == ErrorStatus.DEAD_OBJECT, result
        with pytest.raises(DeadObject):
            pm.execute([a, a])
    finally:
        dev.close()


_CLIENT = textwrap.dedent(
    """
    import sys, threading, time
    import numpy as np
    from nnhal.client.device import Device
    from tests.conftest import add_model
    dev = Device.connect(sys.argv[1], client_name="doomed-links")
    pm = dev.prepare_model_sync(add_model())
    a = np.ones((2, 4), np.float32)
    pm.execute([a, a])
    dev.set_faults(execute_delay_ms=1000)
    start = threading.Barrier(3)
    def run():
        start.wait(10)
        pm.execute([a, a])
    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(len(dev.remote.same_host.open_links), flush=True)
    time.sleep(60)
    """
)


def test_a_killed_clients_links_are_all_given_back(server: LocalServer, device: Device) -> None:
    before = device.stats()["bytes_in_use"]
    proc = subprocess.Popen(
        [sys.executable, "-c", _CLIENT, server.address], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        links = int(proc.stdout.readline().strip())
        assert links >= 2  # 3 when the three calls overlapped, as they do but on a stalled machine
        assert device.stats()["bytes_in_use"] >= before + links * 2 * samehost.RING_BYTES  # their rings
        proc.send_signal(signal.SIGKILL)
        proc.wait(5)
        end = time.monotonic() + 8.0
        while device.stats()["bytes_in_use"] != before and time.monotonic() < end:
            time.sleep(0.05)
        assert device.stats()["bytes_in_use"] == before, "the killed client's links were not given back"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()


def _run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 60))


def test_asyncio_tasks_executing_at_once_all_take_the_same_host_queue(
    srv: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(link_pool, "IDLE_S", 0.3)

    async def main() -> None:
        async with aio.Device.connect(srv.address) as dev, await dev.prepare_model(add_model()) as pm:
            a = np.ones((2, 4), np.float32)
            alone_before = _counts(await dev.stats())
            await dev.set_faults(execute_delay_ms=DELAY_MS)
            request = _add_request(a, a)
            outs = await asyncio.gather(
                *(pm.execute([a, np.full_like(a, k)]) for k in range(N)),
                pm.execute_request(request),
                pm.execute_async([a, a]),
            )
            await dev.set_faults()
            after = _counts(await dev.stats())
            for k in range(N):
                np.testing.assert_array_equal(outs[k].outputs[0], a + k)
            assert all(out.status == ErrorStatus.NONE for out in outs)
            assert after[0] - alone_before[0] == N + 2 and after[1] == alone_before[1], (alone_before, after)
            queue = dev.remote.same_host
            assert queue is not None
            # Extra links left unused are closed; the first stays and serves on.
            end = time.monotonic() + 10.0
            while len(queue.open_links) > 1 and time.monotonic() < end:
                await asyncio.sleep(0.05)
            assert len(queue.open_links) == 1
            np.testing.assert_array_equal((await pm.execute([a, a])).outputs[0], 2 * a)

    _run(main)


def test_sigkill_releases_asyncio_calls_waiting_on_every_link(own_server: LocalServer) -> None:
    async def main() -> None:
        dev = await aio.Device.connect(own_server.address)
        try:
            pm = await dev.prepare_model(add_model())
            a = np.ones((2, 4), np.float32)
            await dev.set_faults(execute_delay_ms=10_000)
            tasks = [asyncio.ensure_future(pm.execute_request(_add_request(a, a))) for _ in range(3)]
            queue = dev.remote.same_host
            assert queue is not None
            end = time.monotonic() + 10.0
            while len(queue.open_links) < 3 and time.monotonic() < end:
                await asyncio.sleep(0.02)
            assert len(queue.open_links) == 3
            await asyncio.sleep(0.3)  # the calls are in the server's hands
            t0 = time.monotonic()
            own_server.signal(signal.SIGKILL)
            outcomes = await asyncio.wait_for(asyncio.gather(*tasks), 5.0)
            assert time.monotonic() - t0 < 1.0, "released later than the gRPC path's bound for a killed server"
            assert [o.status for o in outcomes] == [ErrorStatus.DEAD_OBJECT] * 3
            with pytest.raises(DeadObject):
                await pm.execute([a, a])
        finally:
            await dev.close()

    _run(main)


def test_a_session_whose_queue_is_refused_is_unchanged() -> None:
    """The pool changes nothing for a server without the fast path: concurrent calls over gRPC."""
    with LocalServer("--no-fast-path") as srv, Device.connect(srv.address) as dev:
        with dev.prepare_model_sync(add_model()) as pm:
            out = _together([_forms(pm, k) for k in range(3)])
            assert out == [8.0 * (k + 2) for k in range(3)]
        assert dev.remote.same_host is None
        assert _counts(dev.stats()) == (0, 3)

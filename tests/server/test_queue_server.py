"""The queue server: one thread answers every queue's quick packets in order, hands any
other packet (and the rest of its queue) to a worker, ends a stopped queue, and ends
itself with the last queue; before each wait it looks as long as its lookout allows, and
tells the lookout every wait."""

from __future__ import annotations

import contextvars
import mmap
import os
import resource
import select
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path

import pytest

from nnhal.client.remote.queue_ends import _collect
from nnhal.core import fastpacket, fastring
from nnhal.core.doorbell import EARLY, HERALD, RING as RUNG, Doorbell, announce
from nnhal.core.enums import ErrorStatus
from nnhal.core.lookout import Load, Lookout
from nnhal.server.executions.afterwards import Afterwards
from nnhal.server.fastpath import FastQueue, Refuse
from nnhal.server.queue_server import QueueServer
from tests.conftest import until

RING = 4 * fastring.MIN_RING_BYTES
_BOUND_S = 10.0


class _Client:
    def __init__(self, mm: object, doorbell: Doorbell, ring: int = RING) -> None:
        self.mm = mm
        self.doorbell = doorbell
        self.requests = fastring.Producer(mm, ring, True)  # type: ignore[arg-type]
        self.results = fastring.Consumer(mm, ring, False, (fastring.RESULT,))  # type: ignore[arg-type]

    def send(self, kind: int, payload: bytes) -> None:
        self.requests.write(kind, payload)
        self.doorbell.ring()

    def answers(self, count: int) -> list[bytes]:
        got: list[bytes] = []
        end = time.monotonic() + _BOUND_S
        while len(got) < count and time.monotonic() < end:
            packet = self.results.read()
            if packet is None:
                self.doorbell.wait(0.05)
                continue
            got.append(packet[1])
        return got


@contextmanager
def _queue(directory: Path, ring: int = RING) -> Iterator[tuple[FastQueue, _Client]]:
    queue = FastQueue.create(directory, "t", ring)
    handing = threading.Thread(target=queue.hand_over, args=(_BOUND_S,))
    handing.start()
    mm, doorbell = _collect(str(queue.socket_path), queue.token, ring)
    handing.join(_BOUND_S)
    client = _Client(mm, doorbell, ring)
    try:
        yield queue, client
    finally:
        doorbell.close()
        client.requests.close()
        client.results.close()
        mm.close()
        queue.close()


@contextmanager
def _queues(directory: Path, count: int, ring: int = RING) -> Iterator[list[tuple[FastQueue, _Client]]]:
    """``count`` queues (``_queue``) of ``ring``-byte rings, closed in reverse order."""
    with ExitStack() as stack:
        yield [stack.enter_context(_queue(directory, ring)) for _ in range(count)]


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory for the handover sockets (a unix socket's path is at most 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="nq") as d:
        yield Path(d)


def _refuse(status: ErrorStatus, message: str) -> bytes:
    return message.encode()


def test_quick_packets_on_its_thread_others_on_workers_in_order(sock_dir: Path) -> None:
    where: list[tuple[bytes | memoryview, str]] = []

    def handle(kind: int, payload: bytes | memoryview) -> tuple[int, bytes | memoryview]:
        where.append((payload, threading.current_thread().name))
        return fastring.RESULT, payload

    ended: list[int] = []
    with (
        ThreadPoolExecutor(2, thread_name_prefix="worker") as pool,
        _queue(sock_dir) as (q1, c1),
        _queue(sock_dir) as (q2, c2),
    ):
        server = QueueServer(pool.submit)
        for i, q in enumerate((q1, q2)):
            ctx = contextvars.Context()
            server.serve(q, handle, _refuse, lambda kind: kind == fastpacket.CALL, ctx.run, partial(ended.append, i))
        sent = [(fastpacket.CALL, b"a1"), (fastring.REQUEST, b"a2"), (fastpacket.CALL, b"a3")]
        for kind, payload in sent:
            c1.send(kind, payload)
        c2.send(fastpacket.CALL, b"b1")
        assert c1.answers(3) == [b"a1", b"a2", b"a3"]  # in order, whoever answered
        assert c2.answers(1) == [b"b1"]
        threads = dict(where)
        assert threads[b"a1"] == threads[b"b1"] == "nnhal-queues"
        assert threads[b"a2"].startswith("worker")
        q1.stop()
        q2.stop()
        until(lambda: not server.queues and len(ended) >= 2, "both queues' ends", _BOUND_S)
        assert sorted(ended) == [0, 1] and server.queues == 0
        # The thread ends with the last queue.
        until(lambda: not any(t.name == "nnhal-queues" for t in threading.enumerate()), "the thread's end", _BOUND_S)
        assert not any(t.name == "nnhal-queues" for t in threading.enumerate())


def test_a_malformed_packet_is_refused_and_the_queue_serves_on(sock_dir: Path) -> None:
    def handle(kind: int, payload: bytes | memoryview) -> tuple[int, bytes | memoryview]:
        return fastring.RESULT, payload

    ended: list[bool] = []
    with ThreadPoolExecutor(1) as pool, _queue(sock_dir) as (q, c):
        server = QueueServer(pool.submit)
        server.serve(q, handle, _refuse, lambda kind: True, contextvars.Context().run, lambda: ended.append(True))
        c.requests.write(fastring.RESULT, b"wrong kind")  # not a request kind: refused
        c.doorbell.ring()
        (refusal,) = c.answers(1)
        assert b"malformed fast burst packet" in refusal
        c.send(fastpacket.CALL, b"after")
        assert c.answers(1) == [b"after"]
        q.stop()
        until(lambda: ended, "the queue's end", _BOUND_S)
        assert ended == [True]


def test_a_queue_whose_packets_run_slow_goes_to_the_workers(sock_dir: Path) -> None:
    where: list[str] = []

    def handle(kind: int, payload: bytes | memoryview) -> tuple[int, bytes | memoryview]:
        where.append(threading.current_thread().name)
        if payload == b"slow":
            time.sleep(0.005)  # past INLINE_MAX_NS, on whichever thread
        return fastring.RESULT, payload

    ended: list[bool] = []
    with (
        ThreadPoolExecutor(1, thread_name_prefix="worker") as pool,
        _queue(sock_dir) as (q, c),
        _queue(sock_dir) as (other, _idle),
    ):
        server = QueueServer(pool.submit)
        server.serve(q, handle, _refuse, lambda kind: True, contextvars.Context().run, lambda: ended.append(True))
        # Another queue served: the slow queue's packets would hold it up.
        server.serve(other, handle, _refuse, lambda kind: True, contextvars.Context().run, lambda: ended.append(True))
        for payload in (b"slow", b"slow", b"fast", b"fast"):
            c.send(fastpacket.CALL, payload)
            assert c.answers(1) == [payload]
        # Two slow packets in a row on the queue server's thread, then a worker's (where a
        # fast one brings the queue back, unless the machine's load made it slow too).
        assert where[:2] == ["nnhal-queues", "nnhal-queues"] and where[2].startswith("worker")
        q.stop()
        other.stop()
        until(lambda: len(ended) == 2, "the queues' end", _BOUND_S)
        assert ended == [True, True]


def test_a_sole_queue_stays_on_the_queue_thread_however_slow(sock_dir: Path) -> None:
    where: list[str] = []

    def handle(kind: int, payload: bytes | memoryview) -> tuple[int, bytes | memoryview]:
        where.append(threading.current_thread().name)
        if payload == b"slow":
            time.sleep(0.005)  # past INLINE_MAX_NS
        return fastring.RESULT, payload

    ended: list[bool] = []
    with ThreadPoolExecutor(1, thread_name_prefix="worker") as pool, _queue(sock_dir) as (q, c):
        server = QueueServer(pool.submit)
        server.serve(q, handle, _refuse, lambda kind: True, contextvars.Context().run, lambda: ended.append(True))
        for payload in (b"slow", b"slow", b"slow", b"fast"):
            c.send(fastpacket.CALL, payload)
            assert c.answers(1) == [payload]
        # Nobody waits behind it: no hop to a worker and back.
        assert where == ["nnhal-queues"] * 4
        q.stop()
        until(lambda: ended, "the queue's end", _BOUND_S)
        assert ended == [True]


def test_the_queues_one_wait_reported_are_answered_before_any_is_rung(sock_dir: Path) -> None:
    """Two queues ready at the same wake: neither client is rung before both are answered (nor
    early: ``doorbell.announce``)."""
    holding, gate = threading.Event(), threading.Event()
    rung_before: dict[bytes, bool] = {}
    rung_early: dict[bytes, bool] = {}
    clients: dict[bytes, _Client] = {}

    def handle(kind: int, payload: bytes | memoryview) -> tuple[int, bytes | memoryview]:
        if payload == b"hold":
            holding.set()
            gate.wait(_BOUND_S)  # the thread is busy while the other two queues get their packets
        else:
            other = clients[b"b" if payload == b"a" else b"a"]
            rung_before[bytes(payload)] = bool(select.select([other.doorbell.inbox], [], [], 0)[0])
            HERALD.arm()  # the call asks to be rung early: batched, it is not
            rung_early[bytes(payload)] = HERALD.ring is not None
        return fastring.RESULT, payload

    ended: list[int] = []
    with ThreadPoolExecutor(1) as pool, _queues(sock_dir, 3) as ((q0, c0), (q1, c1), (q2, c2)):
        clients.update({b"a": c1, b"b": c2})
        server = QueueServer(pool.submit)
        for i, q in enumerate((q0, q1, q2)):
            server.serve(q, handle, _refuse, lambda kind: True, contextvars.Context().run, partial(ended.append, i))
        c0.send(fastpacket.CALL, b"hold")
        assert holding.wait(_BOUND_S)
        c1.send(fastpacket.CALL, b"a")
        c2.send(fastpacket.CALL, b"b")
        gate.set()
        assert c0.answers(1) == [b"hold"]
        assert c1.answers(1) == [b"a"] and c2.answers(1) == [b"b"]
        assert rung_before == {b"a": False, b"b": False} == rung_early
        for q in (q0, q1, q2):
            q.stop()
        until(lambda: len(ended) >= 3, "the three queues' ends", _BOUND_S)
        assert sorted(ended) == [0, 1, 2]


class _SpyLookout(Lookout):
    """A forced lookout on a fake two-CPU machine that records the windows it gave and the
    waits it was told of."""

    def __init__(self, window_s: float) -> None:
        super().__init__(window_s, forced=True, load=Load(runnable=lambda: 1, cpus=lambda: 2))
        self.windows: list[float] = []
        self.waits: list[tuple[float, float]] = []
        self.announced: list[bool] = []
        self.spent: list[float] = []

    def window(self, announced: bool = False) -> float:
        given = super().window(announced)
        self.windows.append(given)
        self.announced.append(announced)
        return given

    def spend(self, looked: float) -> None:
        self.spent.append(looked)
        super().spend(looked)

    def waited(self, gap: float, looked: float) -> None:
        self.waits.append((gap, looked))
        super().waited(gap, looked)


def _echo(kind: int, payload: bytes | memoryview) -> tuple[int, bytes | memoryview]:
    return fastring.RESULT, payload


@contextmanager
def _watched_echo(directory: Path, window_s: float) -> Iterator[tuple[FastQueue, _Client, _SpyLookout, list[bool]]]:
    """One queue served by a thread whose lookout is a spy giving ``window_s``, every packet
    answered with its own bytes; the list records the queue's end."""
    ended: list[bool] = []
    with ThreadPoolExecutor(1) as pool, _queue(directory) as (q, c):
        server = QueueServer(pool.submit)
        spy = _SpyLookout(window_s)
        server._lookout = spy
        server.serve(q, _echo, _refuse, lambda kind: True, contextvars.Context().run, lambda: ended.append(True))
        yield q, c, spy, ended


def test_the_queue_thread_looks_while_its_lookout_allows_and_tells_it_every_wait(sock_dir: Path) -> None:
    with _watched_echo(sock_dir, 0.02) as (q, c, spy, ended):

        def call(payload: bytes) -> None:
            asked = len(spy.windows)
            c.send(fastpacket.CALL, payload)
            assert c.answers(1) == [payload]
            # Each answer is followed by the thread's next wait, which asks its lookout first.
            until(lambda: len(spy.windows) > asked, "the next wait", _BOUND_S)

        for i in range(5):
            call(b"look %d" % i)
        assert len(spy.waits) >= 5 and set(spy.windows) == {0.02}
        assert all(0.0 <= looked <= gap for gap, looked in spy.waits)
        spy.window_s = 0.0  # the lookout says no: the thread sleeps at once, and serves alike
        told = len(spy.windows)
        for i in range(3):
            call(b"sleep %d" % i)
        assert spy.windows[told + 1 :] and all(w == 0.0 for w in spy.windows[told + 1 :])
        q.stop()
        until(lambda: ended, "the queue's end", _BOUND_S)
        assert ended == [True]


def test_a_clients_early_ring_makes_the_woken_thread_look_for_its_packet(sock_dir: Path) -> None:
    """A client that rings early (``doorbell.EARLY``: it is writing a large packet) wakes the
    serving thread, whose next wait looks for the packet whatever the lookout's recent waits
    (``window(announced=True)``), is charged to it and not counted as a wait; the packet, rung
    then, is answered as any."""
    with _watched_echo(sock_dir, 0.05) as (q, c, spy, ended):
        until(lambda: spy.windows, "the first wait", _BOUND_S)
        c.doorbell.ring(EARLY)
        until(lambda: True in spy.announced, "the announced wait", _BOUND_S)
        c.send(fastpacket.CALL, b"announced")
        assert c.answers(1) == [b"announced"]
        at = spy.announced.index(True)
        assert spy.windows[at] == 0.05
        until(lambda: spy.spent, "the announced wait's charge", _BOUND_S)
        assert 0.0 <= spy.spent[0] <= 0.05
        q.stop()
        until(lambda: ended, "the queue's end", _BOUND_S)
        assert ended == [True]
        # Every wait ended by now: the announced ones charged (above), the others learned from.
        assert len(spy.spent) == spy.announced.count(True)
        assert len(spy.waits) == spy.announced.count(False)


def test_the_work_a_packet_leaves_runs_after_its_answer_before_the_next_packet(sock_dir: Path) -> None:
    """Answer first, account after: what a packet's handler leaves (``Afterwards``) runs once its
    answer is written and its client rung, before the next packet is handled — and also when the
    handler raised (the queue then ends)."""
    after = Afterwards()
    events: list[str] = []

    def handle(kind: int, payload: bytes | memoryview) -> tuple[int, bytes | memoryview]:
        name = bytes(payload).decode()
        events.append(f"handle {name}")
        after.defer(lambda: events.append(f"after {name}"))
        if name == "bug":
            raise RuntimeError("the test's bug")
        return fastring.RESULT, payload

    ended: list[bool] = []
    with ThreadPoolExecutor(1) as pool, _queue(sock_dir) as (q, c):
        answer = q.answer

        def answered(kind: int, payload: fastring.Payload, refuse: Refuse, ring: bool = True) -> None:
            assert isinstance(payload, (bytes, memoryview))  # what ``handle`` answers here
            answer(kind, payload, refuse, ring)
            events.append(f"answered {bytes(payload).decode()}" + (", rung" if ring else ""))

        q.answer = answered  # type: ignore[method-assign]
        server = QueueServer(pool.submit)
        server.serve(
            q, handle, _refuse, lambda kind: True, contextvars.Context().run, lambda: ended.append(True), after
        )
        c.send(fastpacket.CALL, b"a")
        c.send(fastpacket.CALL, b"b")
        assert c.answers(2) == [b"a", b"b"]
        until(lambda: len(events) >= 6, "the work left for after the answers", _BOUND_S)
        assert events == ["handle a", "answered a, rung", "after a", "handle b", "answered b, rung", "after b"]
        c.send(fastpacket.CALL, b"bug")
        until(lambda: ended, "the queue's end", _BOUND_S)
        assert events[6:] == ["handle bug", "after bug"] and len(after) == 0


def test_a_batched_queues_work_left_runs_before_the_next_queues_turn(sock_dir: Path) -> None:
    """While several queues are served their clients are rung after every queue's turn; what a
    packet left for after its answer runs before the next queue's turn (which may wait for the
    slot it holds), not after the rings."""
    holding, gate = threading.Event(), threading.Event()
    events: list[str] = []
    afters = {b"a": Afterwards(), b"b": Afterwards()}

    def handle(kind: int, payload: bytes | memoryview) -> tuple[int, bytes | memoryview]:
        name = bytes(payload)
        if name == b"hold":
            holding.set()
            gate.wait(_BOUND_S)
        else:
            events.append(f"handle {name.decode()}")
            afters[name].defer(lambda: events.append(f"after {name.decode()}"))
        return fastring.RESULT, payload

    ended: list[int] = []
    with ThreadPoolExecutor(1) as pool, _queues(sock_dir, 3) as ((q0, c0), (q1, c1), (q2, c2)):
        server = QueueServer(pool.submit)
        for i, (q, after) in enumerate(((q0, None), (q1, afters[b"a"]), (q2, afters[b"b"]))):
            ctx = contextvars.Context()
            server.serve(q, handle, _refuse, lambda kind: True, ctx.run, partial(ended.append, i), after)
        c0.send(fastpacket.CALL, b"hold")
        assert holding.wait(_BOUND_S)
        c1.send(fastpacket.CALL, b"a")
        c2.send(fastpacket.CALL, b"b")
        gate.set()
        assert c1.answers(1) == [b"a"] and c2.answers(1) == [b"b"]
        first = events[0][-1]
        second = "b" if first == "a" else "a"
        assert events == [f"handle {first}", f"after {first}", f"handle {second}", f"after {second}"]
        for q in (q0, q1, q2):
            q.stop()
        until(lambda: len(ended) >= 3, "the three queues' ends", _BOUND_S)


def _touch_faults(*regions: mmap.mmap) -> int:
    """Page faults writing one byte into every page of ``regions`` past the indexes."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for region in regions:
        for at in range(fastring.DATA_OFFSET, len(region), mmap.PAGESIZE):
            region[at] = 1
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MADV_POPULATE_WRITE is Linux's")
def test_the_first_large_packet_maps_each_ends_region_at_once(sock_dir: Path) -> None:
    """Issue #27: a fresh ring's first lap page-faulted on every 4 KiB a mid-size packet crossed,
    on each side. The first packet of DIRECT_BYTES or more a side writes or reads faults in that
    side's whole mapping at once (a queue of small packets touches only its few pages), so
    writing through all of both mappings afterwards faults (almost) nothing — lazily, it faults
    once per page."""
    ring = 256 * fastring.MIN_RING_BYTES  # 1 MiB rings: 513 pages per mapping
    pages = fastring.region_bytes(ring) // mmap.PAGESIZE
    with _queues(sock_dir, 2, ring) as ((small_q, small), (queue, client)):
        small.send(fastpacket.CALL, b"small")
        assert small_q.next_packet(_refuse) == (fastpacket.CALL, b"small")
        client.send(fastpacket.CALL, bytes(fastring.DIRECT_BYTES))  # the client's producer populates
        packet = queue.next_packet(_refuse)  # read in place: the server's consumer populates
        assert packet is not None and len(packet[1]) == fastring.DIRECT_BYTES
        assert small.mm is not None and client.mm is not None and queue._mm is not None
        assert _touch_faults(client.mm, queue._mm) < pages // 8  # type: ignore[arg-type]
        assert _touch_faults(small.mm) >= pages // 2  # type: ignore[arg-type]  # small packets only: lazily
        queue.answer(fastring.RESULT, b"done", lambda status, message: b"")


def _doorbell_bytes(client: _Client, count: int) -> bytes:
    """The next ``count`` bytes of ``client``'s doorbell, read raw (in the order rung)."""
    got = b""
    end = time.monotonic() + _BOUND_S
    while len(got) < count and time.monotonic() < end:
        if select.select([client.doorbell.inbox], [], [], 0.05)[0]:
            got += os.read(client.doorbell.inbox, count - len(got))
    return got


def test_a_call_answered_at_once_that_asks_is_rung_early_then_when_answered(sock_dir: Path) -> None:
    armed: list[tuple[bool, bool]] = []

    def handle(kind: int, payload: bytes | memoryview) -> tuple[int, bytes | memoryview]:
        armed.append((HERALD.caller is not None, HERALD.ring is not None))  # nothing left armed
        if payload == b"early":
            HERALD.arm()
        announce()  # its answer is near (a compiled graph's library call returned)
        return fastring.RESULT, payload

    ended: list[bool] = []
    with ThreadPoolExecutor(1) as pool, _queue(sock_dir) as (q, c):
        server = QueueServer(pool.submit)
        server.serve(q, handle, _refuse, lambda kind: True, contextvars.Context().run, lambda: ended.append(True))
        for payload, rung in ((b"early", EARLY + RUNG), (b"plain", RUNG), (b"early", EARLY + RUNG)):
            c.send(fastpacket.CALL, payload)
            assert _doorbell_bytes(c, len(rung)) == rung
            assert c.results.read() == (fastring.RESULT, payload)
        assert armed == [(True, False)] * 3
        q.stop()
        until(lambda: ended, "the queue's end", _BOUND_S)
    assert HERALD.caller is None and HERALD.ring is None  # the test's thread never had one


def test_a_worker_looks_for_its_queues_next_packet_before_handing_it_back(sock_dir: Path) -> None:
    """A worker that answered a packet that is not quick looks for the queue's next packet
    while the queue's lookout allows, answers it itself when it comes (no hand-back to the
    serving thread), and tells the lookout; when the lookout says no, the queue goes back to
    the serving thread at once, which answers its next quick packet."""
    where: list[tuple[bytes, str]] = []

    def handle(kind: int, payload: bytes | memoryview) -> tuple[int, bytes | memoryview]:
        where.append((bytes(payload), threading.current_thread().name))
        return fastring.RESULT, payload

    ended: list[bool] = []
    with ThreadPoolExecutor(1, thread_name_prefix="worker") as pool, _queue(sock_dir) as (q, c):
        server = QueueServer(pool.submit)
        spy = _SpyLookout(5.0)  # the client's next packet comes well within it
        server._worker_lookout = lambda: spy
        server.serve(
            q,
            handle,
            _refuse,
            lambda kind: kind == fastpacket.CALL,
            contextvars.Context().run,
            lambda: ended.append(True),
        )
        served = server._served[q.inbox]
        c.send(fastring.REQUEST, b"r1")
        assert c.answers(1) == [b"r1"]
        until(lambda: spy.windows, "the worker's look", _BOUND_S)
        c.send(fastpacket.CALL, b"c1")
        assert c.answers(1) == [b"c1"]
        assert where[0][1] == where[1][1] and where[0][1].startswith("worker")  # the worker that looked
        until(lambda: spy.waits, "the look's end", _BOUND_S)
        gap, looked = spy.waits[0]
        assert 0.0 <= looked <= gap <= 5.0 and not served.polled  # a hit, and the worker holds the queue still
        spy.window_s = 0.0  # the lookout says no: after the look under way (if any), handed back at once
        c.send(fastpacket.CALL, b"c2")  # answered by whichever thread holds the queue now
        assert c.answers(1) == [b"c2"]
        until(lambda: served.polled, "the queue's hand-back", _BOUND_S)
        c.send(fastpacket.CALL, b"c3")
        assert c.answers(1) == [b"c3"]
        assert where[-1] == (b"c3", "nnhal-queues")
        # The closed look is still taught: the gap to the next packet, nothing looked.
        until(lambda: any(looked == 0.0 for _, looked in spy.waits), "the closed look's wait", _BOUND_S)
        q.stop()
        until(lambda: ended, "the queue's end", _BOUND_S)
        assert ended == [True]

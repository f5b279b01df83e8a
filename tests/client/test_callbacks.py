"""Callback (one-shot values) and DeathMonitor: exactly once, bounded waits, death releases every waiter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import grpc
import pytest

from nnhal.client.callbacks import Callback
from nnhal.client.death import DeathMonitor
from nnhal.client.remote import monitor as monitor_module
from nnhal.client.remote.monitor import DRAIN_NOTIFY_GRACE_S, DRAINING, SessionMonitor
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, GeneralFailure, InvalidArgument

THREADS = 32


def _run_together(n: int, fn: Callable[[int], None]) -> None:
    """Run ``fn(0..n-1)`` on ``n`` threads released at once; joined within a bound."""
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        barrier.wait(5.0)
        fn(i)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10.0)
    assert not any(t.is_alive() for t in threads)


# -- Callback ---------------------------------------------------------------------
def _one_round() -> None:
    cb: Callback[int] = Callback()
    fired: list[int | None] = []
    cb.add_done_callback(lambda c: fired.append(c.value))
    won: list[int] = []
    lock = threading.Lock()

    def notify(i: int) -> None:
        if cb.notify(ErrorStatus.NONE, i):
            with lock:
                won.append(i)

    _run_together(THREADS, notify)
    assert len(won) == 1
    assert cb.notifications == THREADS
    assert fired == won and cb.get(0) == won[0]


def test_exactly_once_under_concurrent_notify() -> None:
    for _round in range(20):
        _one_round()


def test_listener_added_from_many_threads_while_notifying_runs_once_each() -> None:
    cb: Callback[str] = Callback()
    calls: list[int] = []
    lock = threading.Lock()

    def add_or_notify(i: int) -> None:
        if i == THREADS // 2:
            cb.notify(ErrorStatus.NONE, "done")
            return

        def listener(_c: Callback[str]) -> None:
            with lock:
                calls.append(i)

        cb.add_done_callback(listener)

    _run_together(THREADS, add_or_notify)
    assert sorted(calls) == [i for i in range(THREADS) if i != THREADS // 2]


def test_listener_after_done_runs_at_once() -> None:
    cb: Callback[int] = Callback()
    cb.notify(ErrorStatus.NONE, 7)
    seen: list[int | None] = []
    cb.add_done_callback(lambda c: seen.append(c.value))
    assert seen == [7]


def test_wait_and_get_time_out() -> None:
    cb: Callback[int] = Callback()
    t0 = time.monotonic()
    assert not cb.wait(0.05)
    with pytest.raises(GeneralFailure, match=r"no result within 0\.05 s"):
        cb.get(0.05)
    assert time.monotonic() - t0 < 2.0
    assert not cb.done()


def test_wait_returns_when_notified_from_another_thread() -> None:
    cb: Callback[int] = Callback()
    timer = threading.Timer(0.05, cb.notify, args=(ErrorStatus.NONE, 3))
    timer.start()
    try:
        assert cb.wait(5.0) and cb.get(0) == 3
    finally:
        timer.cancel()
        timer.join(5.0)


def test_get_raises_the_status() -> None:
    cb: Callback[int] = Callback()
    cb.notify(ErrorStatus.INVALID_ARGUMENT, None, "bad operand")
    with pytest.raises(InvalidArgument, match="bad operand"):
        cb.get(0)
    assert cb.status == ErrorStatus.INVALID_ARGUMENT and cb.message == "bad operand"


def test_then_converts_once_and_keeps_the_status() -> None:
    source: Callback[int] = Callback()
    derived = source.then(lambda v: str(v * 2))
    assert not derived.done()
    source.notify(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, 21, "too small")
    source.notify(ErrorStatus.NONE, 1)
    assert derived.value == "42" and derived.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    assert derived.message == "too small" and derived.notifications == 1


def test_then_without_value_and_with_a_failing_conversion() -> None:
    dead: Callback[int] = Callback()
    derived = dead.then(str)
    dead.notify(ErrorStatus.DEAD_OBJECT, None, "gone")
    assert derived.status == ErrorStatus.DEAD_OBJECT and derived.value is None and derived.message == "gone"

    def refuse(_v: int) -> str:
        raise InvalidArgument("cannot decode")

    failing: Callback[int] = Callback()
    derived2 = failing.then(refuse)
    failing.notify(ErrorStatus.NONE, 1)
    assert derived2.status == ErrorStatus.INVALID_ARGUMENT and derived2.message == "cannot decode"


# -- DeathMonitor ------------------------------------------------------------------
class FakeChannel:
    """Just the connectivity subscription of a grpc.Channel."""

    def __init__(self) -> None:
        self.listeners: list[Callable[[grpc.ChannelConnectivity], None]] = []

    def subscribe(self, fn: Callable[[grpc.ChannelConnectivity], None], try_to_connect: bool = False) -> None:
        self.listeners.append(fn)

    def unsubscribe(self, fn: Callable[[grpc.ChannelConnectivity], None]) -> None:
        self.listeners.remove(fn)

    def move_to(self, state: grpc.ChannelConnectivity) -> None:
        for fn in list(self.listeners):
            fn(state)


def _monitor() -> tuple[DeathMonitor, FakeChannel]:
    channel = FakeChannel()
    return DeathMonitor(channel, "nnhal server at test"), channel  # type: ignore[arg-type]


def test_death_fails_every_waiter_once_with_dead_object() -> None:
    monitor, _ = _monitor()
    waiters: list[Callback[int]] = [Callback() for _ in range(THREADS)]
    for cb in waiters:
        assert monitor.register(cb)
    hooks: list[str] = []
    monitor.on_death(hooks.append)
    _run_together(8, lambda i: monitor.declare_dead(f"reason {i}"))
    assert monitor.dead and len(hooks) == 1 and monitor.reason == hooks[0]
    for cb in waiters:
        assert cb.status == ErrorStatus.DEAD_OBJECT and cb.notifications == 1
        assert cb.message == f"nnhal server at test: {hooks[0]}"
    with pytest.raises(DeadObject, match="nnhal server at test"):
        monitor.check()
    late: Callback[int] = Callback()
    assert not monitor.register(late)  # already dead: released at once
    assert late.status == ErrorStatus.DEAD_OBJECT
    monitor.stop()


def test_finished_waiters_are_forgotten_and_not_failed() -> None:
    monitor, _ = _monitor()
    finished: Callback[int] = Callback()
    monitor.register(finished)
    finished.notify(ErrorStatus.NONE, 1)
    monitor.declare_dead("gone")
    assert finished.status == ErrorStatus.NONE and finished.notifications == 1
    monitor.stop()


def test_concurrent_register_and_death_releases_everyone() -> None:
    monitor, _ = _monitor()
    waiters: list[Callback[int]] = [Callback() for _ in range(THREADS)]

    def act(i: int) -> None:
        if i == 0:
            monitor.declare_dead("killed")
        else:
            monitor.register(waiters[i])

    _run_together(THREADS, act)
    for cb in waiters[1:]:
        assert cb.wait(1.0) and cb.status == ErrorStatus.DEAD_OBJECT and cb.notifications == 1


def test_leaving_ready_is_death_but_a_first_idle_and_a_closing_shutdown_are_not() -> None:
    monitor, channel = _monitor()
    channel.move_to(grpc.ChannelConnectivity.IDLE)  # never READY yet: still connecting
    channel.move_to(grpc.ChannelConnectivity.CONNECTING)
    assert not monitor.dead
    channel.move_to(grpc.ChannelConnectivity.READY)
    channel.move_to(grpc.ChannelConnectivity.IDLE)  # a killed server: READY -> IDLE
    assert monitor.dead and "left READY (IDLE)" in monitor.reason
    monitor.stop()

    closing, channel2 = _monitor()
    channel2.move_to(grpc.ChannelConnectivity.READY)
    closing.closing()
    channel2.move_to(grpc.ChannelConnectivity.SHUTDOWN)
    closing.declare_dead("closed on purpose")
    assert not closing.dead
    closing.stop()
    assert not channel2.listeners


def test_wait_dead_is_bounded() -> None:
    monitor, _ = _monitor()
    t0 = time.monotonic()
    assert not monitor.wait_dead(0.05)
    assert time.monotonic() - t0 < 2.0
    threading.Timer(0.05, monitor.declare_dead, args=("later",)).start()
    assert monitor.wait_dead(5.0)
    monitor.stop()


def test_a_draining_servers_end_leaves_its_waiters_the_status_their_stream_delivers() -> None:
    # The flake seen under load: the session stream's end was read before a notify the
    # draining server had already sent, and the waiter got DEAD_OBJECT instead of it.
    channel = FakeChannel()
    monitor = SessionMonitor(channel, "nnhal server at test")  # type: ignore[arg-type]
    monitor.mark_draining()
    told, broken = Callback[int](), Callback[int]()
    for cb in (told, broken):
        assert monitor.register(cb)
    monitor.declare_dead("the server ended the session")
    assert monitor.dead and monitor.reason.startswith(DRAINING)
    with pytest.raises(DeadObject, match="draining"):
        monitor.check()  # later calls fail at once
    assert not told.done() and not broken.done()  # their own streams may still deliver
    told.notify(ErrorStatus.DEVICE_UNAVAILABLE, None, "the drain time ran out")  # its notify, read late
    broken.notify(ErrorStatus.DEAD_OBJECT, None, "stream broke")  # its stream broke: DEAD_OBJECT
    for cb in (told, broken):
        assert cb.wait(DRAIN_NOTIFY_GRACE_S + 5.0) and cb.notifications == 1
    assert told.status == ErrorStatus.DEVICE_UNAVAILABLE and broken.status == ErrorStatus.DEAD_OBJECT
    _wait_for_no_release_thread()
    monitor.stop()


def test_a_draining_servers_end_releases_a_silent_waiter_after_the_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(monitor_module, "DRAIN_NOTIFY_GRACE_S", 0.05)
    channel = FakeChannel()
    monitor = SessionMonitor(channel, "nnhal server at test")  # type: ignore[arg-type]
    monitor.mark_draining()
    silent = Callback[int]()
    monitor.register(silent)
    monitor.declare_dead("the server ended the session")
    assert silent.wait(10.0) and silent.status == ErrorStatus.DEAD_OBJECT and silent.notifications == 1
    assert DRAINING in silent.message
    _wait_for_no_release_thread()
    monitor.stop()


def _wait_for_no_release_thread() -> None:
    end = time.monotonic() + 10.0
    while time.monotonic() < end and any(t.name == "nnhal-drain-release" for t in threading.enumerate()):
        time.sleep(0.01)
    assert not [t for t in threading.enumerate() if t.name == "nnhal-drain-release"]


# -- a failing listener or conversion still releases every waiter ----------------------
def test_a_listener_that_raises_does_not_cost_the_next_one_its_notify() -> None:
    cb: Callback[int] = Callback()
    seen: list[int] = []

    def broken(_cb: Callback[int]) -> None:
        raise RuntimeError("a listener's bug")

    cb.add_done_callback(broken)
    cb.add_done_callback(lambda c: seen.append(c.value or 0))
    assert cb.notify(ErrorStatus.NONE, 3)
    assert seen == [3]
    cb.add_done_callback(broken)  # after the notify: runs at once, and still does not raise


def test_then_notifies_its_waiter_when_the_conversion_fails() -> None:
    cb: Callback[int] = Callback()

    def convert(_v: int) -> int:
        raise ValueError("a malformed answer")

    derived = cb.then(convert)
    cb.notify(ErrorStatus.NONE, 1)
    assert derived.wait(1.0)
    assert derived.status == ErrorStatus.GENERAL_FAILURE and "malformed" in derived.message
    assert derived.notifications == 1

"""The same-host waiters' look policy (``nnhal.core.lookout``) on a fake clock and a fake
machine: it looks while looking pays, stops when the peer's packets come later than the
window, comes back when they come within it again (learned from slept waits too), keeps
its looking within a share of the elapsed time, never looks with one CPU allowed, and
stops on a busy machine (also when forced: not with one CPU)."""

from __future__ import annotations

import logging
import random

import pytest

from nnhal.core import lookout
from nnhal.core.lookout import Load, Lookout

WINDOW = 200e-6


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Machine:
    """What the load gauge reads: runnable tasks and CPUs allowed."""

    def __init__(self, runnable: int | None = 1, cpus: int = 2) -> None:
        self.runnable = runnable
        self.cpus = cpus

    def load(self, clock: _Clock) -> Load:
        return Load(clock, lambda: self.runnable, lambda: self.cpus, online=2)


def _lookout(machine: _Machine | None = None, forced: bool = False) -> tuple[Lookout, _Clock, _Machine]:
    clock = _Clock()
    machine = machine or _Machine()
    return Lookout(WINDOW, forced, machine.load(clock), clock), clock, machine


def _wait(watch: Lookout, clock: _Clock, gap: float) -> float:
    """One wait whose packet comes ``gap`` s after it began: the window it was given."""
    window = watch.window()
    looked = min(window, gap)
    clock.now += gap
    watch.waited(gap, looked)
    clock.now += 100e-6  # the turn's work, between two waits
    return window


def test_a_quiet_machine_whose_peer_answers_within_the_window_is_looked_at() -> None:
    watch, clock, _ = _lookout()
    windows = [_wait(watch, clock, 30e-6) for _ in range(200)]
    assert all(w > 0.0 for w in windows)


def test_looking_stops_when_it_does_not_pay_and_comes_back_when_it_does() -> None:
    watch, clock, _ = _lookout()
    late = [_wait(watch, clock, 5e-3) for _ in range(50)]
    assert late[0] > 0.0 and late[-1] == 0.0
    looked = sum(1 for w in late if w > 0.0)
    assert looked < 10  # it backed off after a few misses
    # Slept waits are measured too: calls within the window again bring the look back.
    again = [_wait(watch, clock, 30e-6) for _ in range(50)]
    assert again[0] == 0.0 and again[-1] > 0.0


def test_looking_stays_within_its_share_of_the_elapsed_time() -> None:
    watch, clock, _ = _lookout()
    spent = 0.0
    start = clock.now
    for _ in range(2000):
        window = watch.window()
        clock.now += window  # it looks for the whole window and the packet comes right at its end
        spent += window
        watch.waited(window or WINDOW, window)
    elapsed = clock.now - start
    assert spent <= lookout.LOOK_SHARE * elapsed + lookout.CREDIT_MAX_S


@pytest.mark.parametrize("forced", [False, True])
def test_one_cpu_allowed_never_looks(forced: bool) -> None:
    watch, clock, _ = _lookout(_Machine(cpus=1), forced)
    assert all(_wait(watch, clock, 10e-6) == 0.0 for _ in range(20))


def test_a_busy_machine_stops_the_look_and_a_quiet_one_brings_it_back() -> None:
    machine = _Machine()
    watch, clock, _ = _lookout(machine)
    assert _wait(watch, clock, 10e-6) > 0.0
    machine.runnable = 6  # more runnable tasks than CPUs
    busy = []
    for _ in range(20):
        clock.now += lookout.LOAD_EVERY_S
        busy.append(_wait(watch, clock, 10e-6))
    assert busy[-1] == 0.0
    machine.runnable = 2
    quiet = []
    for _ in range(20):
        clock.now += lookout.LOAD_EVERY_S
        quiet.append(_wait(watch, clock, 10e-6))
    assert quiet[-1] > 0.0


def test_an_announced_packet_is_looked_for_whatever_the_recent_waits_not_the_load_or_credit() -> None:
    """``window(announced=True)``: the peer rang early (its packet is being written), so the
    recent waits that stopped the look do not, but a busy machine and a spent credit still do."""
    machine = _Machine()
    watch, clock, _ = _lookout(machine)
    for _ in range(50):
        _wait(watch, clock, 5e-3)
    assert watch.window() == 0.0 and watch.window(announced=True) == WINDOW
    watch.credit = 0.0
    assert watch.window(announced=True) == 0.0
    clock.now += 1.0  # the credit earned back
    assert watch.window(announced=True) == WINDOW
    machine.runnable = 6
    for _ in range(20):
        clock.now += lookout.LOAD_EVERY_S
        _wait(watch, clock, 10e-6)
    assert watch.window(announced=True) == 0.0


def test_a_cpu_is_idle_only_while_fewer_tasks_than_cpus_run_and_the_machine_is_not_busy() -> None:
    """``Load.idle``: a peer woken now would run beside the sampler (fewer runnable tasks than
    online CPUs in most recent samples, the sampler counted), a stricter ``spare``."""
    machine = _Machine(runnable=1)
    clock = _Clock()
    load = machine.load(clock)

    def settle(runnable: int | None) -> tuple[bool, bool]:
        machine.runnable = runnable
        for _ in range(20):
            clock.now += lookout.LOAD_EVERY_S
            load.spare()
            clock.now += 100e-6
            load.spare()
        return load.spare(), load.idle()

    assert settle(1) == (True, True)
    assert settle(2) == (True, False)  # as many as the CPUs: spare, none idle
    assert settle(3) == (False, False)
    assert settle(None) == (False, False)
    assert settle(1) == (True, True)


def test_an_unknown_load_counts_as_busy() -> None:
    watch, clock, _ = _lookout(_Machine(runnable=None))
    windows = []
    for _ in range(20):
        clock.now += lookout.LOAD_EVERY_S
        windows.append(_wait(watch, clock, 10e-6))
    assert windows[-1] == 0.0


def test_a_forced_lookout_looks_whatever_the_load_and_the_pay() -> None:
    watch, clock, _ = _lookout(_Machine(runnable=9), forced=True)
    for _ in range(30):
        clock.now += lookout.LOAD_EVERY_S
        assert _wait(watch, clock, 5e-3) == WINDOW


def _asking(load: Load, clock: _Clock, seconds: float, every: float = 0.5e-3) -> None:
    """A process at work: ``spare`` asked every ``every`` s for ``seconds``."""
    for _ in range(round(seconds / every)):
        clock.now += every
        load.spare()


def test_the_load_is_sampled_at_most_every_period_and_the_cpus_allowed_count_at_once() -> None:
    clock, machine = _Clock(), _Machine()
    load = machine.load(clock)
    assert load.spare()
    machine.runnable = 9  # busy from now on: seen at the samples only
    clock.now += lookout.LOAD_EVERY_S / 2
    assert load.spare()
    _asking(load, clock, 10 * lookout.LOAD_EVERY_S)
    assert not load.spare()
    machine.runnable, machine.cpus = 1, 1
    _asking(load, clock, 10 * lookout.LOAD_EVERY_S)
    assert not load.spare()  # quiet again, but one CPU allowed
    machine.cpus = 2
    clock.now += lookout.LOAD_EVERY_S
    assert load.may_look()  # a forced lookout's look-up of the CPUs: the gauge's answer follows
    assert load.spare()


def test_a_sample_is_not_taken_at_the_first_ask_after_a_pause() -> None:
    """The threads of whatever ran during a pause are still finishing at its first ask: busy
    for that instant only, which the gauge never counts; a few asks later it samples."""
    clock, machine = _Clock(), _Machine()
    load = machine.load(clock)
    assert load.spare()
    for _ in range(40):
        _asking(load, clock, 2e-3)  # a burst of calls ...
        clock.now += lookout.LOAD_EVERY_S  # ... a pause, other work ...
        machine.runnable = 9  # ... still finishing at the burst's first call
        load.spare()
        machine.runnable = 2
    assert load.busy == 0.0
    assert load.spare()


def test_a_process_that_asks_only_after_pauses_is_still_sampled() -> None:
    clock, machine = _Clock(), _Machine(runnable=9)
    load = machine.load(clock)
    for _ in range(300):
        clock.now += 5e-3  # e.g. one large copy every 5 ms: sampled every STALE_S
        load.spare()
    assert load.busy > 0.9
    assert not load.spare()


@pytest.mark.parametrize("window_s", [WINDOW, 3e-3, 2 * lookout.CREDIT_MAX_S])
def test_the_windows_and_the_credit_follow_the_policy_over_random_waits(window_s: float) -> None:
    """The windows of a lookout, against the policy worked out beside it: the credit earned
    with every window asked for, capped, and charged with every look."""
    rng = random.Random(7)
    clock = _Clock()
    watch = Lookout(window_s, False, _Machine().load(clock), clock)
    credit, last = lookout.CREDIT_MAX_S, clock.now
    for _ in range(2000):
        clock.now += rng.choice((1e-6, 20e-6, 150e-6, 2e-3))
        credit = min(lookout.CREDIT_MAX_S, credit + (clock.now - last) * lookout.LOOK_SHARE)
        last = clock.now
        want = min(window_s, credit) if credit > 0.0 and watch.paid >= lookout.PAID_MIN else 0.0
        got = watch.window()
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
        looked = got * rng.random()
        clock.now += looked
        credit -= looked
        watch.waited(looked + rng.choice((0.0, 1e-3)), looked)


def test_a_lookout_without_a_window_never_looks() -> None:
    clock = _Clock()
    watch = Lookout(0.0, True, _Machine().load(clock), clock)
    assert watch.window() == 0.0


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, (2e-4, False)), ("auto", (2e-4, False)), ("off", (0.0, False)), ("0", (0.0, False)), ("50", (5e-5, True))],
)
def test_a_window_is_read_from_the_environment(value: str | None, expected: tuple[float, bool]) -> None:
    window, on = lookout.window_from_env("X", value, 200, 1000)
    assert window == pytest.approx(expected[0]) and on == expected[1]


@pytest.mark.parametrize("value", ["x", "-1", "1001", "1.5"])
def test_a_bad_window_is_ignored_with_a_warning(value: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=lookout.__name__):
        window, on = lookout.window_from_env("NNHAL_X", value, 200, 1000)
        assert window == pytest.approx(2e-4) and on is False
    assert "NNHAL_X" in caplog.text

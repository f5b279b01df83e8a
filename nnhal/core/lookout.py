"""When a same-host waiter may look for its peer's next packet before it sleeps (the server's
queue thread looking for the next rung doorbell, the sync client watching its result ring),
and for how long: :class:`Lookout` (DESIGN §2; the figures behind it: ``docs/same-host.md``).

Looking is bought with CPU: it pays when the peer's packet comes within the window (no
sleeping thread to wake across cores, which on a virtual machine costs more than a small
call's work), and it only takes a core from other work when it does not. So a lookout looks
only while all of these hold, and sleeps at once otherwise:

- this process may run on at least two CPUs (``os.sched_getaffinity``): on one, the peer
  could only run once the looker gives the core up;
- the machine has a core to spare (:class:`Load`: the runnable tasks, sampled from
  ``/proc/loadavg`` at most every :data:`LOAD_EVERY_S`, do not outnumber the online CPUs
  in most recent samples): on a busy machine a look takes its time from other work. A
  sample is not taken at the first wait after a pause (:data:`PAUSE_S`): the threads of
  whatever ran meanwhile are still finishing then, and a sample there counted them as load
  every time (measured: almost every sample that found a quiet machine busy was taken at
  the first call of a burst after other work);
- most recent waits ended within the window (:data:`PAID_MIN`, a running share, weight
  :data:`PAID_WEIGHT`): every wait is measured, looked or slept, so a lookout that stopped
  looking learns when looking would pay again without spending anything — unless the peer
  announced its packet (``window(announced=True)``: it rang ``doorbell.EARLY`` before
  writing it), whose wait is then expected to end within the window whatever the others did;
- its time spent looking stays within :data:`LOOK_SHARE` of the time elapsed (a credit
  earned with elapsed time, at most :data:`CREDIT_MAX_S`, spent by each look).

``forced`` (an explicit window asked for in the environment) drops the last three
conditions, never the first. A look always yields the core between its glances
(``os.sched_yield``), so that a peer on the same core runs. Not thread-safe: one
waiter owns a lookout (a :class:`Load` may be shared; its races only cost a sample).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: How often the machine's runnable tasks are sampled, at most (seconds).
LOAD_EVERY_S = 0.02
#: A process that asked nothing for this long (seconds) paused: its first ask after that puts
#: a due sample off by :data:`SETTLE_S` ...
PAUSE_S = 0.001
SETTLE_S = 0.001
#: ... unless the last sample is this old (a process whose every ask follows a pause, e.g.
#: one large copy every few milliseconds, is still sampled).
STALE_S = 5 * LOAD_EVERY_S
#: Weight of the latest sample in the share of busy samples; the machine is busy from a half.
LOAD_WEIGHT = 0.25
#: Looking goes on only while at least this share of recent waits ended within the window.
PAID_MIN = 0.5
#: Weight of the latest wait in that share.
PAID_WEIGHT = 0.125
#: The most of the elapsed time a lookout spends looking.
LOOK_SHARE = 0.5
#: The most credit a lookout saves up (seconds of looking).
CREDIT_MAX_S = 0.005


_loadavg: list[int] = []  # the descriptor of /proc/loadavg, kept open once read


def _runnable() -> int | None:
    """Tasks runnable on the machine now (``/proc/loadavg``'s fourth field), None where unknown.
    The file stays open (a read at offset 0 renders it afresh): one system call per sample."""
    try:
        if not _loadavg:
            _loadavg.append(os.open("/proc/loadavg", os.O_RDONLY))
        fields = os.pread(_loadavg[0], 128, 0).split()
        return int(fields[3].split(b"/")[0])
    except (OSError, IndexError, ValueError):
        return None


def allowed_cpus() -> int:
    """CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Load:
    """Whether the machine has a core to spare for a looking waiter, sampled at most every
    :data:`LOAD_EVERY_S` (``clock``, ``runnable`` and ``cpus`` are seams for tests: the
    runnable tasks now, None where unknown — then the machine counts as busy — and the
    CPUs this process may run on)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        runnable: Callable[[], int | None] = _runnable,
        cpus: Callable[[], int] = allowed_cpus,
        online: int | None = None,
    ) -> None:
        self._clock = clock
        self._runnable = runnable
        self._cpus = cpus
        self._online = online or os.cpu_count() or 1
        #: When the next sample is due (``spare``), and the next look-up of the CPUs allowed
        #: (``may_look``).
        self._sample_at = self._check_at = float("-inf")
        #: When ``spare`` was last asked, and when the last sample was taken.
        self._asked = self._sampled = float("-inf")
        #: The share of recent samples that found the machine busy, and that found no CPU idle
        #: (as many runnable tasks as online CPUs or more, the sampler's own thread counted).
        self.busy = self.crowded = 0.0
        #: CPUs this process may run on, at the last sample.
        self.allowed = cpus()
        #: ``spare``'s and ``idle``'s answers until the next sample: they change only with one.
        self._spare = self._idle = False

    def spare(self) -> bool:
        """Whether a waiter may look now: two CPUs allowed and most recent samples not busy."""
        now = self._clock()
        if now >= self._sample_at:
            self._due(now)
        self._asked = now
        return self._spare

    def idle(self) -> bool:
        """Whether a peer this thread wakes now would find a CPU idle (``spare``, and most
        recent samples found fewer runnable tasks than online CPUs, the sampler counted): it
        runs beside this thread, not on its core. Sampled as ``spare`` (the same samples)."""
        return self.spare() and self._idle

    def _due(self, now: float) -> None:
        """A sample is due: taken now, or put off by :data:`SETTLE_S` at the first ask after
        a pause while the last one is recent (module docstring)."""
        if now - self._asked > PAUSE_S and now - self._sampled <= STALE_S:
            self._sample_at = now + SETTLE_S
        else:
            self._sample(now)

    def _sample(self, now: float) -> None:
        self._sample_at = now + LOAD_EVERY_S
        self._sampled = now
        running = self._runnable()
        busy = running is None or running > self._online
        self.busy += (float(busy) - self.busy) * LOAD_WEIGHT
        crowded = running is None or running >= self._online
        self.crowded += (float(crowded) - self.crowded) * LOAD_WEIGHT
        self._look_up_cpus()

    def may_look(self) -> bool:
        """Whether looking is allowed at all, whatever the load (a forced lookout): at least
        two CPUs allowed (looked up again at most every :data:`LOAD_EVERY_S`)."""
        now = self._clock()
        if now >= self._check_at:
            self._check_at = now + LOAD_EVERY_S
            self._look_up_cpus()
        return self.allowed >= 2

    def _look_up_cpus(self) -> None:
        """The CPUs allowed looked up, and ``spare``'s answer with them (the one place it is decided)."""
        self.allowed = self._cpus()
        self._spare = self.allowed >= 2 and self.busy < 0.5
        self._idle = self._spare and self.crowded < 0.5


#: The process's load gauge, shared by its lookouts.
LOAD = Load()


class Lookout:
    """One waiter's policy (module docstring): ``window()`` before each wait — seconds to look
    (0.0: sleep at once) — then ``waited(gap, looked)`` once the peer's packet came ``gap``
    seconds after the wait began, ``looked`` of which were spent looking."""

    def __init__(
        self,
        window_s: float,
        forced: bool = False,
        load: Load | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.forced = forced
        self._load = LOAD if load is None else load
        self._clock = clock
        self._last = clock()
        #: The share of recent waits that ended within the window (optimistic at first).
        self.paid = 1.0
        #: Seconds of looking this lookout may spend now.
        self.credit = CREDIT_MAX_S

    def window(self, announced: bool = False) -> float:
        """Seconds to look before sleeping now; 0.0 to sleep at once. ``announced``: the peer
        said its packet is near (``doorbell.EARLY``), so the recent waits do not decide
        whether this one ends within the window (:data:`PAID_MIN` is not asked); the load
        and the credit still do."""
        if self.window_s <= 0.0:
            return 0.0
        if self.forced:
            return self.window_s if self._load.may_look() else 0.0
        now = self._clock()
        # Conditional expressions, not min() and max(): the same values (NaN too) without a
        # builtin's call, a tenth of a microsecond each on every wait.
        credit = self.credit + (now - self._last) * LOOK_SHARE
        self.credit = credit = credit if credit < CREDIT_MAX_S else CREDIT_MAX_S
        self._last = now
        if (self.paid < PAID_MIN and not announced) or credit <= 0.0 or not self._load.spare():
            return 0.0
        window = self.window_s
        return credit if credit < window else window

    def spend(self, looked: float) -> None:
        """Charge ``looked`` seconds of looking (a waiter that judges whether looking pays on
        its own, the client's hybrid wait, calls only this)."""
        self.credit -= looked

    def waited(self, gap: float, looked: float) -> None:
        """Learn from a wait: the packet came ``gap`` seconds after it began (a slept wait
        measures a little more: the wake-up), ``looked`` seconds of it spent looking."""
        self.credit -= looked
        hit = gap <= self.window_s
        self.paid += (float(hit) - self.paid) * PAID_WEIGHT


def window_from_env(name: str, value: str | None, default_us: int, max_us: int) -> tuple[float, bool]:
    """A lookout's window and whether it is forced, from environment variable ``name``'s
    ``value``: unset, empty or ``auto`` — ``default_us`` µs, adaptive; ``0`` or ``off`` — no
    look; whole microseconds 1..``max_us`` — that window, forced. Anything else is ignored
    with a warning (the default)."""
    text = (value or "").strip().lower()
    if text in ("", "auto"):
        return default_us / 1e6, False
    if text == "off":
        return 0.0, False
    try:
        us = int(text)
    except ValueError:
        us = -1
    if not 0 <= us <= max_us:
        log.warning("%s=%r is not auto, off or 0..%d microseconds: ignored", name, value, max_us)
        return default_us / 1e6, False
    return us / 1e6, us > 0

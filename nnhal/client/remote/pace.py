"""The hybrid wait's knowledge of each kind of call (:mod:`nnhal.client.remote.fastpath`'s
module docstring says how a link waits): how long the server takes to answer, how long a call
waited watching the ring and waiting for the doorbell alone, and which way the next call takes;
and the ``NNHAL_HYBRID_WAIT`` setting."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

#: The most a watch saves a call: the one wake-up of a sleeping waiter it avoids (a pipe's
#: wake-up across this virtual machine's cores measured 20-45 us; docs/same-host.md).
WAKE_SAVED_S = 50e-6
#: How much earlier than the expected answer the watch starts: this share of the expected
#: time, at most POLL_LEAD_MAX_S. An answer already there at the first look halves the
#: estimate, so the watch follows a server that speeds up.
POLL_LEAD_SHARE = 0.5
POLL_LEAD_MAX_S = 100e-6
#: Shorter sleeps than this are not taken (a timer's wake-up costs about as much).
POLL_MIN_NAP_S = 30e-6
#: How long the watch goes on past the expected time, at most (then the doorbell).
POLL_WINDOW_S = 200e-6
#: Most looks at the ring per call; between two the thread yields its core.
POLL_LOOPS = 2000
#: Every this many calls of a kind, one waits the other way (the watch or the doorbell
#: alone), so that both ways' times stay known and the faster one is chosen.
PROBE_EVERY = 16
#: The watch is kept only while its calls wait less than this share of the doorbell's: on a
#: machine whose cores are busy it wins little when it wins, and costs the server its core.
WATCH_GAIN = 0.9
#: The hybrid wait (module docstring): calls expected to take longer than this block at once.
#: Beyond it the wake-up a watch saves is less than WATCH_GAIN asks of a wait, so the watch
#: could never be kept: only its probes would run, and each one's nap wakes the client on
#: the core the server computes on (a face-model call of 0.8 ms watched took 1.5-2.6 ms).
POLL_MAX_S = WAKE_SAVED_S / (1.0 - WATCH_GAIN)
#: Weight of the latest call in the running estimates.
_WEIGHT = 0.25
#: A call that waited longer than this many times a way's estimate teaches that way as if it
#: had waited this many times: one slow call — the first after an idle spell finds the server's
#: thread and both cores asleep, whichever way it waits — must not decide the way of the calls
#: after it (a way that really got slower still doubles its estimate in a few calls).
OUTLIER_FACTOR = 2.0
#: How long a waiter rung early (its answer near, not yet written: ``doorbell.announce``) looks
#: for the answer's own ring before it sleeps again: what a server does between its library's
#: call and the answer's ring (copies, bookkeeping, the answer's bytes) takes tens of µs.
EARLY_LOOK_S = 200e-6
#: The longest a watch looks at the ring (after its nap): its lead and its window.
WATCH_MAX_S = POLL_LEAD_MAX_S + POLL_WINDOW_S


def hybrid_from_env(value: str | None) -> tuple[bool, bool]:
    """Whether links wait the hybrid way and whether whatever the machine's load, from
    ``NNHAL_HYBRID_WAIT``: unset, empty or ``auto`` — yes, while the machine has a core to
    spare and within a share of the elapsed time (:class:`nnhal.core.lookout.Lookout`);
    ``0`` or ``off`` — no (the doorbell alone); ``1`` or ``on`` — yes, whatever the load
    (never with a single CPU allowed). Anything else is ignored with a warning: the default."""
    text = (value or "").strip().lower()
    if text in ("", "auto"):
        return True, False
    if text in ("0", "off"):
        return False, False
    if text in ("1", "on"):
        return True, True
    log.warning("NNHAL_HYBRID_WAIT=%r is not auto, on, off, 1 or 0: ignored", value)
    return True, False


class Pace:
    """What the hybrid wait knows of one kind of call (seconds, 0.0 while unknown): how long
    the server takes to answer, and how long a call waited with the watch and without."""

    __slots__ = ("blocked", "calls", "expected", "watched")

    def __init__(self) -> None:
        self.expected = 0.0
        self.watched = 0.0
        self.blocked = 0.0
        self.calls = 0

    def watch(self) -> bool:
        """Whether this call watches the ring: the faster way so far, the other for a probe."""
        self.calls = calls = self.calls + 1
        if not 0.0 < self.expected <= POLL_MAX_S:
            return False
        if not self.watched or not self.blocked:
            return not self.watched
        better = self.watched < self.blocked * WATCH_GAIN
        return better != (calls % PROBE_EVERY == 0)

    def took(self, watched: bool, waited: float, early: bool) -> None:
        """Learn from a call that ``waited`` seconds for its answer."""
        e = self.expected
        if early:  # it came before the first look, by how much is unknown: halved, as a guess
            self.expected = e * 0.5
        else:
            self.expected = waited if not e else e + (waited - e) * _WEIGHT
        if watched:
            w = self.watched
            # A conditional expression, not min(): the same value without a builtin's call.
            cap = w * OUTLIER_FACTOR
            self.watched = waited if not w else w + ((cap if cap < waited else waited) - w) * _WEIGHT
        elif e:
            bl = self.blocked
            cap = bl * OUTLIER_FACTOR
            self.blocked = waited if not bl else bl + ((cap if cap < waited else waited) - bl) * _WEIGHT

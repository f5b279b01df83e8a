"""Execution admission, fair ordering across clients, priorities within a client.

A fixed number of slots run executions at once. Waiting work is ordered by
client first (the client holding the fewest slots, then the one served least
recently) and by priority within the client (then FIFO), so one client cannot
starve another. Priorities are relative to the same client's other work: while
an execution of a client is in flight (waiting or running), that client's
lower-priority executions do not start, and running ones pause at their next
operation boundary (pre-emption) until the higher-priority work is done, so
it also gets the CPU and the GIL to itself. Executions are deterministic, so a
paused one simply resumes.

Admission: at most ``slots + queue_depth`` executions in flight; beyond that
RESOURCE_EXHAUSTED_TRANSIENT. ``Per-client state (when a client was last served) is dropped by ``forget`` when the
client's session ends, and bounded anyway: past :data:`SERVED_BOUND` entries those of
clients with nothing admitted are dropped (they then rank as never served, which the
least recently served of them were in effect). ``shut`` (the end of a server's drain) makes queued
and later acquisitions fail with DEVICE_UNAVAILABLE. Lock order: the scheduler's lock (and the
condition on it) is a leaf lock (nothing else is acquired while holding it).

Cost: an uncontended execution (one client, nothing waiting) takes the plain lock three times
(admit, acquire, release) — twice through ``try_start`` — and decides nothing (``try_start``
with nothing admitted asks only the shut and whether recent work is above it — nothing waits
or runs then —, and marks a client served again only when another was served since; ``release``
sweeps the hold-offs only when one other than the one it just set is kept, or their top is not
its own); the condition is notified only when someone waits on it, and a checkpoint with nothing
that could outrank its execution takes no lock.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass

from nnhal.core.enums import Priority
from nnhal.core.errors import DeviceUnavailable, MissedDeadlineTransient, ResourceExhaustedTransient


@dataclass(eq=False, slots=True)
class Ticket:
    client: str
    priority: Priority
    seq: int
    running: bool = False
    #: Set when the execution ever waited behind other work (for TRANSIENT vs PERSISTENT).
    delayed: bool = False
    preempted: int = 0


#: After a client's higher-priority execution ends, its lower-priority work stays
#: paused this long: a client issuing HIGH requests back to back keeps the device
#: (and the CPU) between them instead of competing with its own LOW work.
HOLD_OFF_NS = 3_000_000
#: Entries of ``Scheduler._served`` kept before those of idle clients are dropped.
SERVED_BOUND = 1024
#: Per priority, the numbers of the priorities above it: the work of the same client that
#: holds it off (made once: the hold-off is looked at by every execution's launch).
_ABOVE = {p: tuple(range(int(p) + 1, int(Priority.HIGH) + 1)) for p in Priority}
_LOW = int(Priority.LOW)


class Scheduler:
    def __init__(self, slots: int = 2, queue_depth: int = 64) -> None:
        self.slots = max(1, slots)
        self.queue_depth = max(0, queue_depth)
        # A plain lock (nothing here re-enters it), taken directly on the hot paths; the
        # condition on it is only for waiting.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiting: list[Ticket] = []
        self._running: list[Ticket] = []
        #: Every ticket from admission to release (launched, queued or running).
        self._admitted: set[Ticket] = set()
        #: (client, priority) -> when its last execution ended (monotonic ns).
        self._recent: dict[tuple[str, int], int] = {}
        #: At least the highest priority among ``_recent``'s keys (LOW when it holds none): work
        #: at or above it is held off by nothing, which a launch then decides without looking.
        self._recent_top = int(Priority.LOW)
        self.hold_off_ns = HOLD_OFF_NS
        self._served: dict[str, int] = {}
        #: The client ``_mark_served`` marked last (None: none, or its mark was dropped): its mark
        #: is the newest already, so marking it again changes no order (``try_start`` skips it).
        self._latest: str | None = None
        self._seq = itertools.count()
        self._tick = itertools.count()
        #: Set by ``shut``: why no execution may start any more.
        self._shut: str | None = None
        #: When ``release`` next drops expired hold-offs (monotonic ns).
        self._next_sweep_ns = 0

    # -- introspection ----------------------------------------------------
    @property
    def in_flight(self) -> int:
        """Tickets admitted and not yet released (launched, queued or running)."""
        with self._lock:
            return len(self._admitted)

    @property
    def queued(self) -> int:
        """Tickets waiting for a slot (including pre-empted ones)."""
        with self._lock:
            return len(self._waiting)

    def counts(self) -> tuple[int, int, int]:
        """(running, queued, pre-empted and not yet resumed) executions, read together (metrics)."""
        with self._lock:
            return len(self._running), len(self._waiting), sum(1 for t in self._waiting if t.preempted)

    def clients_tracked(self) -> int:
        """Clients with a fairness record (bounded: ``forget``, :data:`SERVED_BOUND`)."""
        with self._lock:
            return len(self._served)

    # -- lifecycle ----------------------------------------------------------
    def forget(self, client: str) -> None:
        """``client``'s session ended: drop its fairness record, unless work of the client is
        still admitted (another session of the same client, or fenced work still ending)."""
        with self._lock:
            if not any(t.client == client for t in self._admitted):
                self._served.pop(client, None)
                if client == self._latest:
                    self._latest = None

    def _mark_served(self, ticket: Ticket) -> None:
        self._served[ticket.client] = next(self._tick)
        self._latest = ticket.client
        if len(self._served) > SERVED_BOUND:
            busy = {t.client for t in self._admitted}
            for client in [c for c in self._served if c not in busy]:
                del self._served[client]

    def shut(self, reason: str) -> None:
        """From now on queued and later acquisitions raise DEVICE_UNAVAILABLE ``reason``."""
        with self._lock:
            self._shut = reason
            self._cond.notify_all()

    def admit(self, client: str, priority: Priority) -> Ticket:
        """A ticket for one execution; RESOURCE_EXHAUSTED_TRANSIENT beyond ``slots + queue_depth``."""
        with self._lock:
            if len(self._admitted) >= self.slots + self.queue_depth:
                raise ResourceExhaustedTransient(
                    f"the device is saturated ({self.slots} running, {len(self._waiting)} queued, "
                    f"queue depth {self.queue_depth}); retry later"
                )
            ticket = Ticket(client, priority, next(self._seq))
            self._admitted.add(ticket)
            return ticket

    def try_start(self, client: str, priority: Priority) -> Ticket | None:
        """Admit and start an execution of ``client`` at ``priority`` in one step when a slot
        is free for it at once (nothing waiting, nothing of the client outranking it, not
        shut); None otherwise, with nothing taken — the caller then goes through ``admit``
        and ``acquire``, which decide, queue or refuse. The ticket is released by ``release``
        as one from ``acquire`` is. One lock, no wait: the lean path of a small execution
        (with nothing admitted and no recent work above ``priority``, nothing can outrank it:
        ``_outranked_at`` is not asked)."""
        with self._lock:
            admitted = self._admitted
            if not admitted:
                # Nothing in flight: nothing waits or runs (every such ticket is admitted), a slot
                # and the queue have room; only the shut and recent work above it may stop it.
                if self._shut is not None or (priority < self._recent_top and self._outranked_at(client, priority)):
                    return None
            elif (
                self._shut is not None
                or self._waiting
                or len(self._running) >= self.slots
                or len(admitted) >= self.slots + self.queue_depth
                or self._outranked_at(client, priority)
            ):
                return None
            ticket = Ticket(client, priority, next(self._seq), True)
            admitted.add(ticket)
            self._running.append(ticket)
            if client != self._latest:  # else its mark is the newest already
                self._mark_served(ticket)
            return ticket

    def acquire(self, ticket: Ticket, deadline_ns: int | None) -> None:
        """Wait for a slot; MISSED_DEADLINE_TRANSIENT if the deadline passes while queued,
        DEVICE_UNAVAILABLE once the scheduler is shut."""
        with self._lock:
            if self._shut is not None:
                raise DeviceUnavailable(self._shut)
            if len(self._running) < self.slots and not self._waiting and not self._outranked(ticket):
                self._running.append(ticket)  # uncontended: no ordering to decide
                ticket.running = True
                self._mark_served(ticket)
                return
            self._waiting.append(ticket)
            try:
                while not (len(self._running) < self.slots and self._next() is ticket):
                    if self._shut is not None:
                        raise DeviceUnavailable(self._shut)
                    ticket.delayed = True
                    timeout = None
                    if deadline_ns is not None:
                        timeout = (deadline_ns - time.monotonic_ns()) / 1e9
                        if timeout <= 0:
                            raise MissedDeadlineTransient(
                                "the deadline passed while the execution waited for the device"
                            )
                    self._cond.wait(
                        min(
                            timeout if timeout is not None else 1.0,
                            1.0,
                            self._hold_off_left(ticket.client, ticket.priority),
                        )
                    )
            except BaseException:
                self._waiting.remove(ticket)
                self._cond.notify_all()
                raise
            self._waiting.remove(ticket)
            self._running.append(ticket)
            ticket.running = True
            self._mark_served(ticket)

    def release(self, ticket: Ticket) -> None:
        """End ``ticket`` wherever it is (launched, queued or running). Idempotent."""
        with self._lock:
            if ticket.running:
                self._running.remove(ticket)
                ticket.running = False
            elif ticket in self._waiting:
                self._waiting.remove(ticket)
            try:
                self._admitted.remove(ticket)
            except KeyError:
                pass  # released before
            else:
                priority = ticket.priority  # an int (IntEnum): a key and a bound as it is
                if priority > _LOW:
                    now = time.monotonic_ns()
                    recent = self._recent
                    recent[(ticket.client, priority)] = now
                    top = self._recent_top
                    # Only this hold-off, just set, and the top its own (the common case): nothing
                    # to raise, drop or lower.
                    if top != priority or len(recent) > 1:
                        if priority > top:
                            self._recent_top = top = priority
                        if (len(recent) > 1 or top != priority) and now >= self._next_sweep_ns:
                            self._sweep(now)
                elif self._recent or self._recent_top != _LOW:
                    now = time.monotonic_ns()
                    if now >= self._next_sweep_ns:
                        self._sweep(now)
            if self._waiting:  # every waiter on the condition is in ``_waiting``
                self._cond.notify_all()

    def _sweep(self, now: int) -> None:
        """Drop the expired hold-offs and keep the highest priority among the rest (``release``,
        at most once per hold-off; expired ones are also dropped where they are read: this
        bounds the rest). Under the lock."""
        self._next_sweep_ns = now + self.hold_off_ns
        # One loop, no comprehension or generator (each a frame of its own).
        recent, top, expired = self._recent, _LOW, now - self.hold_off_ns
        for key, ended in list(recent.items()):
            if ended <= expired:
                del recent[key]
            elif key[1] > top:
                top = key[1]
        self._recent_top = top

    def checkpoint(self, ticket: Ticket, deadline_ns: int | None) -> None:
        """At an operation boundary: pause while higher-priority work of the same client is in flight."""
        # Racy reads, without the lock: a miss delays pre-emption by one operation.
        if len(self._admitted) <= 1 and not self._recently_above(ticket):
            return
        with self._lock:
            if not self._outranked(ticket):
                return
            self._running.remove(ticket)
            ticket.running = False
            ticket.preempted += 1
            self._cond.notify_all()
        self.acquire(ticket, deadline_ns)

    def _recently_above(self, ticket: Ticket) -> bool:
        """Whether the same client has higher-priority work that ended within the hold-off
        (read-only: safe without the lock, for a pre-check)."""
        if ticket.priority >= self._recent_top:  # no recent work above it, of any client
            return False
        now = time.monotonic_ns()
        for p in _ABOVE[ticket.priority]:
            ended = self._recent.get((ticket.client, p))
            if ended is not None and ended + self.hold_off_ns > now:
                return True
        return False

    def _outranked(self, ticket: Ticket) -> bool:
        """Higher-priority work of the same client is in flight, or ended within the hold-off
        (``ticket`` is among the admitted: it alone cannot outrank itself)."""
        return self._outranked_at(ticket.client, ticket.priority, ticket)

    def _outranked_at(self, client: str, priority: Priority, ticket: Ticket | None = None) -> bool:
        """``_outranked`` of a ticket of ``client`` at ``priority``: ``ticket`` when it is among
        the admitted, None for one not made yet."""
        if priority >= Priority.HIGH:
            return False
        if len(self._admitted) > (ticket is not None) and any(
            u is not ticket and u.client == client and u.priority > priority for u in self._admitted
        ):
            return True
        if priority >= self._recent_top:  # no recent work above it, of any client
            return False
        return self._hold_off_left(client, priority) < 1.0

    def _hold_off_left(self, client: str, priority: Priority) -> float:
        """Seconds until ``client``'s recent work above ``priority`` stops holding its work at
        ``priority`` off (1.0 when nothing holds it off). Expired entries are dropped."""
        now = time.monotonic_ns()
        left = 1.0
        for p in _ABOVE[priority]:
            ended = self._recent.get((client, p))
            if ended is None:
                continue
            remaining = ended + self.hold_off_ns - now
            if remaining <= 0:
                del self._recent[(client, p)]
            else:
                left = min(left, remaining / 1e9)
        return left

    # -- ordering ---------------------------------------------------------
    def _next(self) -> Ticket | None:
        if not self._waiting:
            return None
        held: dict[str, int] = {}
        for r in self._running:
            held[r.client] = held.get(r.client, 0) + 1

        def key(t: Ticket) -> tuple[int, int, int, int]:
            return (held.get(t.client, 0), self._served.get(t.client, -1), -int(t.priority), t.seq)

        eligible = [t for t in self._waiting if not self._outranked(t)]
        return min(eligible, key=key) if eligible else None

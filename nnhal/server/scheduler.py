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
RESOURCE_EXHAUSTED_TRANSIENT. Lock order: the scheduler's condition is a leaf
lock (nothing else is acquired while holding it).
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field

from nnhal.core.enums import Priority
from nnhal.core.errors import MissedDeadlineTransient, ResourceExhaustedTransient


@dataclass(eq=False)
class Ticket:
    client: str
    priority: Priority
    seq: int
    running: bool = False
    #: Set when the execution ever waited behind other work (for TRANSIENT vs PERSISTENT).
    delayed: bool = False
    preempted: int = 0
    enqueued_ns: int = field(default_factory=time.monotonic_ns)


class Scheduler:
    def __init__(self, slots: int = 2, queue_depth: int = 64) -> None:
        self.slots = max(1, slots)
        self.queue_depth = max(0, queue_depth)
        self._cond = threading.Condition()
        self._waiting: list[Ticket] = []
        self._running: list[Ticket] = []
        self._served: dict[str, int] = {}
        self._seq = itertools.count()
        self._tick = itertools.count()

    # -- introspection ----------------------------------------------------
    @property
    def in_flight(self) -> int:
        with self._cond:
            return len(self._waiting) + len(self._running)

    # -- lifecycle ----------------------------------------------------------
    def admit(self, client: str, priority: Priority) -> Ticket:
        with self._cond:
            if len(self._waiting) + len(self._running) >= self.slots + self.queue_depth:
                raise ResourceExhaustedTransient(
                    f"the device is saturated ({self.slots} running, {len(self._waiting)} queued, "
                    f"queue depth {self.queue_depth}); retry later"
                )
            return Ticket(client, priority, next(self._seq))

    def acquire(self, ticket: Ticket, deadline_ns: int | None) -> None:
        """Wait for a slot; MISSED_DEADLINE_TRANSIENT if the deadline passes while queued."""
        with self._cond:
            self._waiting.append(ticket)
            try:
                while not (len(self._running) < self.slots and self._next() is ticket):
                    ticket.delayed = True
                    timeout = None
                    if deadline_ns is not None:
                        timeout = (deadline_ns - time.monotonic_ns()) / 1e9
                        if timeout <= 0:
                            raise MissedDeadlineTransient(
                                "the deadline passed while the execution waited for the device"
                            )
                    self._cond.wait(timeout if timeout is None else min(timeout, 1.0))
            except BaseException:
                self._waiting.remove(ticket)
                self._cond.notify_all()
                raise
            self._waiting.remove(ticket)
            self._running.append(ticket)
            ticket.running = True
            self._served[ticket.client] = next(self._tick)

    def release(self, ticket: Ticket) -> None:
        with self._cond:
            if ticket.running:
                self._running.remove(ticket)
                ticket.running = False
            elif ticket in self._waiting:
                self._waiting.remove(ticket)
            self._cond.notify_all()

    def checkpoint(self, ticket: Ticket, deadline_ns: int | None) -> None:
        """At an operation boundary: pause while higher-priority work of the same client is in flight."""
        if len(self._waiting) + len(self._running) <= 1:  # racy read: a miss delays pre-emption by one op
            return
        with self._cond:
            if not self._outranked(ticket):
                return
            self._running.remove(ticket)
            ticket.running = False
            ticket.preempted += 1
            self._cond.notify_all()
        self.acquire(ticket, deadline_ns)

    def _outranked(self, ticket: Ticket) -> bool:
        return any(
            u is not ticket and u.client == ticket.client and u.priority > ticket.priority
            for u in (*self._waiting, *self._running)
        )

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

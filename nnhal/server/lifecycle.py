"""The server's lifecycle: serving, draining, stopping (DESIGN.md §12).

``SERVING`` → ``begin_drain`` (SIGTERM / SIGINT) → ``DRAINING``: work that is
already launched (preparations and executions, whatever their kind) goes on;
new work — ``prepareModel*``, executions of every kind (also a burst's next
execution), ``allocate`` and new sessions — is refused with DEVICE_UNAVAILABLE
and :data:`DRAINING`. Queries, releases, buffer copies and
``getExecutionInfo`` keep working, so launched work can be collected.

When the drain time runs out, ``expire`` ends what is left: executions stop at
their next operation boundary (or while queued, or in an injected delay) with
DEVICE_UNAVAILABLE and :data:`DRAIN_EXPIRED`; each still gets its one notify.
``stop`` then ends the session streams (the sessions' objects are released).

Work is counted by the RPC layer with ``work`` from its launch to its notify,
without a lock (``enter`` counts the work, then looks at the drain: work that slips in
after the drain started is refused, and work counted before it is seen by it). Session
streams ``watch`` with a :class:`Waker` that is set on every change of state. Thread-safe;
the lifecycle's lock is a leaf.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from nnhal.core.errors import DeviceUnavailable
from nnhal.server.counts import Counter

DRAINING = "the server is draining (shutting down); retry once it restarted, or on another server"
DRAIN_EXPIRED = "the server is draining (shutting down) and its drain time ran out before this work finished"


class Waker(Protocol):
    """What a session stream watches with: ``set`` wakes it, from any thread (a
    ``threading.Event``, or one that wakes a coroutine on an event loop)."""

    def set(self) -> None: ...


class Lifecycle:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Work entered and work left (``enter`` / ``leave``): lock-free counts, the active
        #: work their difference (``active``).
        self._entered = Counter()
        self._left = Counter()
        #: End one piece of work counted by ``enter`` (one C call: ``Counter.increment``).
        self.leave: Callable[[], object] = self._left.increment
        self._draining = False
        self._stopping = False
        #: Read on every operation boundary of every execution: a plain attribute, no lock.
        self.expired = False
        self._watchers: set[Waker] = set()
        #: Watchers (session streams) that have not yet told their client about the drain.
        self._untold: set[Waker] = set()

    # -- state -----------------------------------------------------------------
    @property
    def draining(self) -> bool:
        return self._draining

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def active(self) -> int:
        """Work (launch to notify) in progress in the RPC layer. The work left is read before
        the work entered: 0 only when every piece entered by the second reading had left by
        the first, so nothing was in progress between them."""
        left = self._left.value
        return self._entered.value - left

    def begin_drain(self) -> bool:
        """Refuse new work from now on; True the first time."""
        with self._lock:
            first, self._draining = not self._draining, True
            if first:
                self._untold = set(self._watchers)
        self._wake()
        return first

    def expire(self) -> None:
        """The drain time ran out: launched work ends at its next check (``check``)."""
        self.expired = True
        self._wake()

    def stop(self) -> None:
        """End the session streams."""
        with self._lock:
            self._draining = self._stopping = True
        self._wake()

    # -- work ------------------------------------------------------------------
    def admit(self, what: str) -> None:
        """DEVICE_UNAVAILABLE (:data:`DRAINING`) while draining; for calls that are not counted."""
        if self._draining:
            raise DeviceUnavailable(f"{what}: {DRAINING}")

    def enter(self, what: str) -> None:
        """Count one piece of work until ``leave``; DEVICE_UNAVAILABLE (:data:`DRAINING`)
        while draining, and then nothing is counted. No lock: the work is counted first, then
        the drain looked at — a drain that began before the count is seen here (the work is
        refused, and left again), one that begins after it sees the work (``active``)."""
        self._entered.increment()
        if self._draining:
            self._left.increment()
            raise DeviceUnavailable(f"{what}: {DRAINING}")

    @contextmanager
    def work(self, what: str) -> Iterator[None]:
        """``enter`` / ``leave`` around a block."""
        self.enter(what)
        try:
            yield
        finally:
            self.leave()

    def check(self) -> None:
        """DEVICE_UNAVAILABLE (:data:`DRAIN_EXPIRED`) once the drain time ran out."""
        if self.expired:
            raise DeviceUnavailable(DRAIN_EXPIRED)

    # -- session streams ----------------------------------------------------------
    def watch(self, event: Waker) -> None:
        """Set ``event`` on every change of state (until ``unwatch``)."""
        with self._lock:
            self._watchers.add(event)

    def unwatch(self, event: Waker) -> None:
        with self._lock:
            self._watchers.discard(event)
            self._untold.discard(event)

    def told(self, event: Waker) -> None:
        """The session stream watching with ``event`` has sent its client the drain event."""
        with self._lock:
            self._untold.discard(event)

    @property
    def all_told(self) -> bool:
        """Every session stream that was open when the drain began has told its client (or ended)."""
        with self._lock:
            return not self._untold

    def _wake(self) -> None:
        with self._lock:
            watchers = list(self._watchers)
        for event in watchers:
            event.set()

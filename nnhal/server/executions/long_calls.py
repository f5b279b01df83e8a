"""Long-lived calls, capped per client and in total.

An open burst (gRPC or same-host), a streamed execution, a ``getExecutionInfo(wait=True)``
waiting for its fence and a preparation from its launch to its notify last as long as the
client likes (or its model takes). A fence wait holds a worker thread all that time, a
preparation while it works; an idle burst stream (gRPC or same-host) or a parked
preparation holds none but still holds memory and a scheduler record. So they are capped
(:class:`LongCalls`): per client and in total, leaving worker threads for executions,
stats and releases whatever one client does. Past a cap the call is refused at once with
RESOURCE_EXHAUSTED_TRANSIENT naming the cap.

Fair shares of the total: its last :data:`RESERVE_SHARE` is kept for clients holding fewer
long-lived calls than their fair share — the total divided among the clients holding any
plus one, the newcomer it is kept for. One above its share is refused the reserve, so a
newcomer can still prepare while another client sits on the rest; a client alone uses all
but the reserve. Many clients each below its share can still fill the total: then a client
below its share that asks makes room — the newest call that can be ended early (a burst or
a streamed execution: its transport ends it with RESOURCE_EXHAUSTED) of the client furthest above its
share is ended — instead of being refused (work-conserving: nothing is ended while the
total has room).

Some kinds hold no thread and are bounded otherwise (``own_totals``): a session's same-host
execution queue waits on the server's event loop while idle and its rings are charged to
its client's memory. It is capped per holder (its server counts it per session) and by a
total of its own (what the process's descriptors allow), outside the long-call total and
its fair shares.
"""

from __future__ import annotations

import itertools
import logging
import resource
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, Protocol, TypeVar

from nnhal.core.errors import ResourceExhaustedTransient
from nnhal.server.device_config import DeviceConfig

log = logging.getLogger(__name__)

#: Defaults of the caps (``DeviceConfig`` fields override them).
MAX_BURSTS_PER_CLIENT = 16
MAX_FENCE_WAITS_PER_CLIENT = 16
MAX_PREPARATIONS_PER_CLIENT = 16
#: Worker threads kept free of long-lived calls and queued executions: stats, releases
#: and buffer copies always find one (health checks and sessions need none: they are
#: coroutines on the server's loop).
RESERVED_THREADS = 16
#: The total cap is never below this, however the thread budget is configured.
_MIN_TOTAL = 8
#: One in this many places of the total is kept for clients below their fair share.
RESERVE_SHARE = 8
#: The kind of a session's same-host execution queue (outside the total: ``own_totals``).
QUEUE = "same-host queue"
#: Descriptors a same-host queue holds on the server (its doorbell's three, with room for a
#: handover's), and those kept for everything else when deriving the queues' total.
_FDS_PER_QUEUE = 8
_FDS_KEPT = 1024


class Job(Protocol):
    def close(self) -> None: ...


J = TypeVar("J", bound=Job)


def once(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` run at most once, by whichever thread calls first (a stream's end is seen both
    by its generator's ``finally`` and by the transport's termination callback)."""
    lock = threading.Lock()
    done = False

    def run() -> None:
        nonlocal done
        with lock:
            if done:
                return
            done = True
        fn()

    return run


def default_long_call_total(config: DeviceConfig) -> int:
    """The total cap on long-lived calls when none is configured: the worker threads
    (``max_threads``) minus those admitted executions may hold while queued or running
    (``slots + queue_depth``), minus :data:`RESERVED_THREADS`; at least 8. Sessions are
    not counted: a session stream holds no worker thread."""
    busy = config.slots + config.queue_depth + RESERVED_THREADS
    return max(_MIN_TOTAL, config.max_threads - busy)


def default_queue_total() -> int:
    """The cap on same-host queues open at once: what the process's descriptor limit
    (``RLIMIT_NOFILE``) leaves after :data:`_FDS_KEPT`, at :data:`_FDS_PER_QUEUE` each; at
    least 16. (Their memory is bounded apart: the rings are charged to their client.)"""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, (soft - _FDS_KEPT) // _FDS_PER_QUEUE)


class LongCalls:
    """Counts of long-lived calls by kind and client, capped. Thread-safe; its lock is a leaf.

    ``per_client``: kind -> cap for one client (a session's client, or for a burst or a
    streamed execution the mTLS identity, else the connection, that opened it: its session is
    only named by its first request, which an idle stream never sends). ``total``: cap over every
    kind and client but those of ``own_totals``: kind -> its own cap over every client (module
    docstring)."""

    def __init__(self, per_client: dict[str, int], total: int, own_totals: dict[str, int] | None = None) -> None:
        self.per_client = dict(per_client)
        self.total = max(1, total)
        self.own_totals = dict(own_totals or {})
        #: Calls held by kind, for the kinds of ``own_totals``.
        self._own_all: dict[str, int] = {}
        #: Places of the total only clients below their fair share may take.
        self.reserve = self.total // RESERVE_SHARE
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], int] = {}
        #: Calls held by client, every kind together (only clients holding any).
        self._by_client: dict[str, int] = {}
        self._all = 0
        #: Per client, its calls in the order they entered: id -> (kind, how to end it early).
        self._calls: dict[str, dict[int, tuple[str, Callable[[], None] | None]]] = {}
        self._ids = itertools.count(1)
        #: Calls ended to make room for a client below its fair share.
        self.evicted = 0

    @classmethod
    def of(cls, config: DeviceConfig) -> LongCalls:
        per_client = {
            "burst": config.max_bursts_per_session,
            # An open executeStreamed holds a thread as a burst does, and is capped alike.
            "streamed execution": config.max_bursts_per_session,
            # A session's same-host execution queue: threadless while idle, outside the total.
            QUEUE: config.max_bursts_per_session,
            "fence wait": config.max_fence_waits_per_session,
            "preparation": config.max_preparations_per_session,
        }
        total = config.max_long_calls or default_long_call_total(config)
        return cls(per_client, total, {QUEUE: default_queue_total()})

    @property
    def in_progress(self) -> int:
        with self._lock:
            return self._all

    def held_by(self, client: str) -> int:
        """Calls of every kind ``client`` holds."""
        with self._lock:
            return self._by_client.get(client, 0)

    def held(self, kind: str, client: str) -> int:
        with self._lock:
            return self._held.get((kind, client), 0)

    def enter(self, kind: str, client: str, end: Callable[[], None] | None = None) -> int:
        """Count one call; its id (for ``leave``). RESOURCE_EXHAUSTED_TRANSIENT (naming the cap)
        past a cap — unless the client is below its fair share and another, above its own,
        holds a call that can be ended (``end``: thread-safe, ends the call early; None: it
        cannot be): that client's newest such call is ended and its place given to this one."""
        cap = self.per_client[kind]
        ended: list[Callable[[], None]] = []
        try:
            with self._lock:
                mine = self._held.get((kind, client), 0)
                if mine >= cap and kind == QUEUE:  # counted per session (``FastPathServicer``)
                    raise ResourceExhaustedTransient(
                        f"this session already holds {mine} {kind}s (the cap per session is {cap}); "
                        "its other calls take gRPC"
                    )
                if mine >= cap:
                    raise ResourceExhaustedTransient(
                        f"this client already has {mine} {kind}s in progress (the cap per client is {cap}); "
                        "end one first, or retry later"
                    )
                own = self.own_totals.get(kind)
                if own is not None:
                    return self._enter_own(kind, client, mine, own)
                theirs = self._by_client.get(client, 0)
                holders = len(self._by_client) + 1  # one more: the newcomer the reserve is kept for
                share = self.total // holders
                if self._all >= self.total and not self._make_room(client, theirs, share, ended):
                    raise ResourceExhaustedTransient(
                        f"the server already has {self._all} bursts, fence waits and preparations in progress (the "
                        f"cap is {self.total}, so that other calls always find a thread); retry later"
                    )
                if self._all >= self.total - self.reserve and theirs + 1 > share:
                    raise ResourceExhaustedTransient(
                        f"this client holds {theirs} long-lived calls, its fair share of the server's {self.total} "
                        f"among {holders} clients is {share}, and the last {self.reserve} are kept for clients "
                        "below theirs; end one first, or retry later"
                    )
                self._held[(kind, client)] = mine + 1
                self._by_client[client] = theirs + 1
                self._all += 1
                cid = next(self._ids)
                self._calls.setdefault(client, {})[cid] = (kind, end)
                return cid
        finally:
            for fn in ended:  # outside the lock: ending a call may take it (its leave)
                fn()

    def _enter_own(self, kind: str, client: str, mine: int, cap: int) -> int:
        """``enter`` of a kind with a total of its own (``own_totals``). Holds ``_lock``."""
        open_now = self._own_all.get(kind, 0)
        if open_now >= cap:
            raise ResourceExhaustedTransient(
                f"the server already has {open_now} {kind}s open (the cap is {cap}); retry later"
            )
        self._held[(kind, client)] = mine + 1
        self._own_all[kind] = open_now + 1
        cid = next(self._ids)
        self._calls.setdefault(client, {})[cid] = (kind, None)
        return cid

    def _make_room(self, client: str, theirs: int, share: int, ended: list[Callable[[], None]]) -> bool:
        """With ``client`` (holding ``theirs``) below ``share``: uncount the newest call that can
        be ended of the client furthest above its share, its ``end`` put in ``ended``; True when
        one was. Holds ``_lock``."""
        if theirs + 1 > share:
            return False
        over = [
            (held - share, other)
            for other, held in self._by_client.items()
            if other != client and held > share and any(e is not None for _, e in self._calls.get(other, {}).values())
        ]
        if not over:
            return False
        _, victim = max(over)
        calls = self._calls[victim]
        cid = next(c for c in reversed(calls) if calls[c][1] is not None)
        kind, end = calls[cid]
        self._forget(kind, victim, cid)
        assert end is not None
        ended.append(end)
        self.evicted += 1
        log.warning("ended a %s of client %s (above its fair share) to make room for client %s", kind, victim, client)
        return True

    def _forget(self, kind: str, client: str, cid: int | None) -> bool:
        """Uncount call ``cid`` of ``client`` (None: its newest of ``kind``); False when it was
        not counted (ended to make room already). Holds ``_lock``."""
        calls = self._calls.get(client, {})
        if cid is None:
            cid = next((c for c in reversed(calls) if calls[c][0] == kind), None)
        if cid is None or calls.pop(cid, None) is None:
            return False
        if not calls:
            self._calls.pop(client, None)
        left = self._held.get((kind, client), 0) - 1
        if left > 0:
            self._held[(kind, client)] = left
        else:
            self._held.pop((kind, client), None)  # nothing is kept for a client holding none
        if kind in self.own_totals:
            self._own_all[kind] -= 1
            return True
        theirs = self._by_client.get(client, 0) - 1
        if theirs > 0:
            self._by_client[client] = theirs
        else:
            self._by_client.pop(client, None)
        self._all -= 1
        return True

    def leave(self, kind: str, client: str, cid: int | None = None) -> None:
        """Uncount call ``cid`` (``enter``'s id; None: the client's newest of ``kind``); nothing
        when it was ended to make room (uncounted then)."""
        with self._lock:
            self._forget(kind, client, cid)

    def open(self, kind: str, client: str, end: Callable[[], None] | None = None) -> Callable[[], None]:
        """``enter``; returns the ``leave`` of this call, which runs at most once (a stream
        gives its place back both when it ends and when the transport sees it end)."""
        cid = self.enter(kind, client, end)
        return once(lambda: self.leave(kind, client, cid))

    @contextmanager
    def holding(self, kind: str, client: str) -> Iterator[None]:
        """``enter`` / ``leave`` around a block."""
        cid = self.enter(kind, client)
        try:
            yield
        finally:
            self.leave(kind, client, cid)


class Held(Generic[J]):
    """A launched job holding a place among the long-lived calls until it is closed."""

    def __init__(self, job: J, release: Callable[[], None]) -> None:
        self.job = job
        self._release = once(release)

    def close(self) -> None:
        try:
            self.job.close()
        finally:
            self._release()


def held(calls: LongCalls, kind: str, client: str, launch: Callable[[], J]) -> Held[J]:
    """``launch()`` counted as a long-lived call of ``kind`` until the result is closed
    (RESOURCE_EXHAUSTED_TRANSIENT past a cap, before launching anything)."""
    cid = calls.enter(kind, client)
    try:
        job = launch()
    except BaseException:
        calls.leave(kind, client, cid)
        raise
    return Held(job, lambda: calls.leave(kind, client, cid))

"""Memory accounting: bytes per client session and in total (DESIGN.md §5).

Model constants, driver-managed buffer contents and in-flight request data are
charged while they live. A charge that alone exceeds a limit can never succeed:
RESOURCE_EXHAUSTED_PERSISTENT; one that would fit once other work gives memory
back: RESOURCE_EXHAUSTED_TRANSIENT. A limit of 0 means unlimited.

Fair shares of the total (issue #24): the last :data:`RESERVE_SHARE` of the total limit is
kept for sessions holding less than their fair share — the total divided among the
sessions holding memory plus one, the newcomer it is kept for. A session above its share
is refused the reserve (TRANSIENT), so a newcomer or a small client still finds room while
one client sits on the rest; a session alone uses all but the reserve. Without TLS each
session is a client: many sessions each below its share can still fill the total.

A session's account opens with the session and closes with it: closing gives
back everything it held, later uncharges of that session are ignored (the
objects they belonged to were released wholesale) and later charges are
INVALID_ARGUMENT. Bytes are also kept by kind (the ``what`` of a charge: "model
constants", "buffer contents", "request data"; an uncharge names the same kind)
for the metrics. Thread-safe; the budget's lock is a leaf.

What is given back is told to a ``memory_release.Releaser``, which returns the C heap's
free pages to the kernel once enough was released (the process gives freed memory back).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

from nnhal.core.errors import InvalidArgument, ResourceExhaustedPersistent, ResourceExhaustedTransient
from nnhal.server.memory_release import Releaser
from nnhal.server.session import CLOSED

#: The share of the total limit kept for sessions below their fair share (module docstring).
RESERVE_SHARE = 8
#: The kind of what an execution allocates (intermediates, outputs, scratch).
EXECUTION_TENSORS = "execution tensors"


class _Account:
    """One open session's account: the bytes it holds, and those bytes by kind (only kinds it
    ever charged). One record per session, so that a charge finds both with one look-up."""

    __slots__ = ("kinds", "used")

    def __init__(self) -> None:
        self.used = 0
        self.kinds: dict[str, int] = {}


class MemoryBudget:
    def __init__(self, per_client: int = 0, total: int = 0) -> None:
        self.per_client = per_client
        self.limit_total = total
        #: Bytes of the total only sessions below their fair share may take.
        self.reserve = total // RESERVE_SHARE
        #: Sessions holding any bytes (the fair share divides the total among them).
        self._holders = 0
        self._lock = threading.Lock()
        #: The open sessions' accounts. The totals by kind are summed from theirs when read
        #: (``by_kind``, a scrape's), not kept per charge: an execution's request data is one
        #: look-up and one dict update on its charge, and the same on its uncharge.
        self._accounts: dict[str, _Account] = {}
        self._total = 0
        #: Bytes by kind charged outside any session (``charge_working``).
        self._working_by_kind: dict[str, int] = {}
        #: The kinds of sessions now closed: still reported, at what the open ones hold.
        self._closed_kinds: set[str] = set()
        #: Told of every byte given back (outside the lock).
        self.releaser = Releaser()
        #: What an execution's control reserves its tensors with (``ExecutionControl.reserve``:
        #: ``charge_working`` of :data:`EXECUTION_TENSORS`) and gives them back with (``release``:
        #: ``uncharge_working``), made once; None without a total limit: nothing is counted.
        self.reserve_tensors: Callable[[int], None] | None = None
        self.release_tensors: Callable[..., None] | None = None
        if total:
            self.reserve_tensors = partial(self.charge_working, what=EXECUTION_TENSORS)
            self.release_tensors = partial(self.uncharge_working, what=EXECUTION_TENSORS)

    @property
    def total(self) -> int:
        """Bytes charged across every open session."""
        with self._lock:
            return self._total

    def by_kind(self) -> dict[str, int]:
        """Bytes charged across every open session, by kind (every kind ever charged: 0 when
        nothing of it is held now)."""
        with self._lock:
            totals = dict.fromkeys(self._closed_kinds, 0)
            for kinds in (self._working_by_kind, *(a.kinds for a in self._accounts.values())):
                for kind, nbytes in kinds.items():
                    totals[kind] = totals.get(kind, 0) + nbytes
            return totals

    def used(self, session: str) -> int:
        with self._lock:
            account = self._accounts.get(session)
            return account.used if account is not None else 0

    def open_session(self, session: str) -> None:
        with self._lock:
            if session not in self._accounts:
                self._accounts[session] = _Account()

    def open_client_session(self, session: str, client: str | None) -> None:
        """Open ``session``'s account; ``client`` (its verified identity, or None) matters only
        to a per-client limit across sessions (``client_quotas.ClientQuotas``): none here."""
        self.open_session(session)

    def close_session(self, session: str) -> int:
        """Give back everything ``session`` held; returns how many bytes that was."""
        with self._lock:
            account = self._accounts.pop(session, None)
            freed = 0
            if account is not None:
                freed = account.used
                self._closed_kinds.update(account.kinds)
            if freed > 0:
                self._holders -= 1
            self._total -= freed
        self.releaser.session_closed(freed)
        return freed

    def charge_working(self, nbytes: int, what: str, keep_reserve: bool = False) -> None:
        """Reserve ``nbytes`` of an execution's working memory (its tensors while it runs)
        against the total limit only: the per-client quota is what a client holds between
        calls (models, buffers, request data), the total is what protects the host.
        ``keep_reserve``: bytes held for a client that may not read them (messages in flight,
        answers waiting to be written) leave the fair-share reserve to the sessions' own
        charges. Raises RESOURCE_EXHAUSTED_PERSISTENT (over the limit on its own) or _TRANSIENT."""
        total = self.limit_total
        if total and nbytes > total:
            raise ResourceExhaustedPersistent(
                f"{what} need {nbytes} bytes, more than the server's total limit of {total}"
            )
        with self._lock:
            if keep_reserve and total and nbytes and self._total + nbytes > total - self.reserve:
                raise ResourceExhaustedTransient(
                    f"{what} need {nbytes} bytes; the server has {max(0, total - self.reserve - self._total)} of "
                    f"{total} free for them (the last {self.reserve} are kept for the sessions); retry later"
                )
            self._take_total(nbytes, what)
            working = self._working_by_kind
            working[what] = working.get(what, 0) + nbytes

    def uncharge_working(self, nbytes: int, what: str, freed: int | None = None) -> None:
        """Give back what ``charge_working`` reserved. ``freed``: how many of those bytes were
        really allocated and are now free (default: all), what the releaser counts towards a trim."""
        with self._lock:
            self._total -= nbytes
            working = self._working_by_kind
            working[what] = working.get(what, 0) - nbytes
        self.releaser.released(nbytes if freed is None else freed)

    def charge(self, session: str, nbytes: int, what: str = "model constants") -> None:
        """Reserve ``nbytes`` for ``session``. Raises RESOURCE_EXHAUSTED_PERSISTENT (over a
        limit on its own), RESOURCE_EXHAUSTED_TRANSIENT (over what is free now) or
        INVALID_ARGUMENT (the session is closed)."""
        per_client, total = self.per_client, self.limit_total
        if (per_client and nbytes > per_client) or (total and nbytes > total):
            raise ResourceExhaustedPersistent(
                f"{what} need {nbytes} bytes, more than the server's limits "
                f"(per client {per_client or 'unlimited'}, total {total or 'unlimited'})"
            )
        with self._lock:
            account = self._accounts.get(session)
            if account is None:
                raise InvalidArgument(CLOSED)
            used = account.used
            if per_client and used + nbytes > per_client:
                raise ResourceExhaustedTransient(
                    f"{what} need {nbytes} bytes; this client already uses {used} "
                    f"of its {per_client}; release prepared models or buffers and retry"
                )
            if total and self._total + nbytes > total - self.reserve:
                # Into the reserve (or past the total): the share's and the total's checks.
                if nbytes:
                    self._check_share(used, nbytes, what)
                self._take_total(nbytes, what)
            else:  # within the total less its reserve: neither check can refuse it
                self._total += nbytes
            if not used and nbytes:
                self._holders += 1
            account.used = used + nbytes
            kinds = account.kinds
            kinds[what] = kinds.get(what, 0) + nbytes

    def _check_share(self, used: int, nbytes: int, what: str) -> None:
        """RESOURCE_EXHAUSTED_TRANSIENT when a session holding ``used`` bytes would go past its
        fair share by taking ``nbytes`` of the reserve. Holds ``_lock``."""
        holders = self._holders + 1  # one more: the newcomer the reserve is kept for (or this one)
        share = self.limit_total // holders
        if used + nbytes > share:
            raise ResourceExhaustedTransient(
                f"{what} need {nbytes} bytes; this client holds {used}, and past its fair share "
                f"({share} of the server's {self.limit_total} among {holders} clients) the last "
                f"{self.reserve} are kept for clients below theirs; release memory or retry later"
            )

    def _take_total(self, nbytes: int, what: str) -> None:
        """Count ``nbytes`` against the total, or RESOURCE_EXHAUSTED_TRANSIENT. Holds ``_lock``."""
        total = self.limit_total
        if total and self._total + nbytes > total:
            raise ResourceExhaustedTransient(
                f"{what} need {nbytes} bytes; the server has {total - self._total} of {total} free; retry later"
            )
        self._total += nbytes

    def uncharge(self, session: str, nbytes: int, what: str = "model constants", freed: int | None = None) -> None:
        """Give back ``nbytes`` of kind ``what`` of ``session``; nothing when the session is closed.
        ``freed``: how many of those bytes were on the heap and are now free (default: all), what
        the releaser counts towards a trim (a shared pool's bytes never were: its trims would
        be a collection and a ``malloc_trim`` with nothing to return, the GIL held meanwhile)."""
        with self._lock:
            account = self._accounts.get(session)
            if account is None:
                return
            used = account.used
            account.used = used - nbytes
            if used > 0 and used - nbytes <= 0:
                self._holders -= 1
            self._total -= nbytes
            kinds = account.kinds
            kinds[what] = kinds.get(what, 0) - nbytes
        self.releaser.released(nbytes if freed is None else freed)

    def account(self, session: str, delta: int, what: str) -> None:
        """Charge a positive ``delta``, give back a negative one (a buffer's contents changing size)."""
        if delta > 0:
            self.charge(session, delta, what)
        elif delta < 0:
            self.uncharge(session, -delta, what)

"""Which of a session's same-host queue links are open and free, for both clients.

A link (:class:`~nnhal.client.remote.fastpath.FastBurstLink`, or the asyncio client's
``AioQueueLink``) carries one call at a time; the pool says which link a call takes, or
whether it may open another (:mod:`nnhal.client.remote.samehost` says why and when). It
knows nothing of how a link is opened, waited on or closed: its owner does that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError

#: Seconds an extra link (beyond a session's first) stays open unused before it is closed.
IDLE_S = 10.0
#: Seconds a session opens no other link after the server refused one (its cap, its budget).
BACKOFF_S = 2.0
#: Links a session opens at most, whatever its server allows (each holds descriptors here).
MAX_LINKS = 32


L = TypeVar("L")


class LinkPool(Generic[L]):
    """Which of a session's queue links are open and free (module docstring), for both
    clients. Not thread-safe: its owner serialises the calls (a lock, or the event loop).

    A call :meth:`take`s a free link or the right to open one (:meth:`opened` or
    :meth:`failed` when done), and :meth:`give_back`s the link after its call; a link that
    can no longer be used is :meth:`drop`ped (its owner closes it)."""

    def __init__(self) -> None:
        #: Every open link, the first opened first.
        self.links: list[L] = []
        #: The open links no call uses, with when each was given back (the latest last).
        self._idle: list[tuple[L, float]] = []
        #: Links being opened now.
        self.opening = 0
        #: How many links the session may hold (the server's ``max_queues`` once a link said
        #: it; until then the server's refusal is the cap).
        self.cap = MAX_LINKS
        #: The first link was refused: every call takes gRPC.
        self.refused = False
        self.closed = False
        #: No link is opened before this (``time.monotonic``): the server refused one.
        self._quiet_until = 0.0
        #: Links the server refused while the session held one (its cap, its budget).
        self.refusals = 0

    def take(self, now: float) -> tuple[L | None, bool]:
        """A free link (the latest given back), or (None, True): the caller opens one, or
        (None, False): the call takes gRPC (none free and none may be opened now)."""
        if self._idle:
            return self._idle.pop()[0], False
        if self.refused or self.closed or now < self._quiet_until:
            return None, False
        # One per call that finds every link busy, up to the cap (calls that start together
        # on a new session each open one: none waits for another's).
        if len(self.links) + self.opening < self.cap:
            self.opening += 1
            return None, True
        return None, False

    def take_idle(self, fits: Callable[[L, Any, str], int], planned: Any, handle: str) -> L | None:
        """The latest given back of the free links for which ``fits(link, planned, handle)``
        (a layout id it granted: not 0), taken; None when none is."""
        idle = self._idle
        if idle and fits(idle[-1][0], planned, handle):  # most calls: the one link, or the latest
            return idle.pop()[0]
        for i in range(len(idle) - 2, -1, -1):
            link = idle[i][0]
            if fits(link, planned, handle):
                del idle[i]
                return link
        return None

    def opened(self, link: L, max_queues: int) -> bool:
        """Count a link the caller opened (its first event said ``max_queues``; 0: not said);
        False when the pool was closed meanwhile (the caller closes the link)."""
        self.opening -= 1
        if self.closed:
            return False
        self.links.append(link)
        self.refused = False  # another call's refusal at the same time was not the last word
        if max_queues:
            self.cap = min(max_queues, MAX_LINKS)
        return True

    def failed(self, err: HalError, now: float) -> None:
        """A link the caller tried to open was refused with ``err``: a refusal of the only
        link tried (the fast path is not offered) is final, one past the server's cap or
        budget (RESOURCE_EXHAUSTED_TRANSIENT, or while a link is held) holds further links
        back for :data:`BACKOFF_S`."""
        self.opening -= 1
        if self.links or err.error_status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT:
            self.refusals += 1
            self._quiet_until = now + BACKOFF_S
        else:
            self.refused = True

    def give_back(self, link: L, now: float) -> None:
        """The call using ``link`` ended (nothing when the link was dropped meanwhile)."""
        if not self.closed and link in self.links:
            self._idle.append((link, now))

    def drop(self, link: L) -> bool:
        """Forget ``link`` (it can no longer be used); whether it was held."""
        self._idle = [(held, t) for held, t in self._idle if held is not link]
        if link in self.links:
            self.links.remove(link)
            return True
        return False

    @property
    def extras(self) -> bool:
        """Whether the session holds more than its first link."""
        return len(self.links) > 1

    def stale(self, now: float) -> list[L]:
        """The extra links unused for :data:`IDLE_S` or more, forgotten (close them); one
        link always stays."""
        out: list[L] = []
        idle = self._idle
        while idle and len(self.links) > 1 and now - idle[0][1] >= IDLE_S:
            link = idle.pop(0)[0]
            self.links.remove(link)
            out.append(link)
        return out

    def close(self) -> list[L]:
        """Every link, forgotten (close them); no link is opened from now on."""
        self.closed = True
        links, self.links, self._idle = self.links, [], []
        return links

"""The reads of request messages in progress on one event loop (:class:`ReadClock`): each
holds a place among the bytes reads may hold, first come first served, and has a time: a
read not finished within it has its call ended (``ending.CallEnder.end``, with the clock's
reason). Loop-only."""

from __future__ import annotations

import asyncio
import collections

from nnhal.server.rpc.ending import CallEnder


class ReadClock:
    """The reads in progress on one event loop, one read per call at a time: their places and
    their deadlines, taken and given back together (``enter``, ``leave``: one step each per
    read).

    **Places**: a read holds ``place`` bytes among ``read_bytes`` until it ``leave``s; a read
    that finds none free (or reads waiting before it) waits, first come first served (``wait``),
    and one read may always start (``read_bytes`` is at least a place).

    **Time**: every read gets the same time, so reads expire in the order they started: one
    timer, armed for the oldest read still open, stands for all of them. (A timer per read,
    ``asyncio.timeout``, costs every call a timer handle pushed on the loop's heap and its
    cancellation.) A read is its call's ender: its deadline is one dict entry, the reads open
    kept in the order they started (the dict's). A read that expires is its call ended with
    ``reason`` (its task cancelled, ``CallEnder.reason`` set: the read's cancellation is the
    clock's when the ender has a reason). A read's time runs from its place taken to its
    ``leave``: the parse of its message after the read too, which the loop cannot interrupt.
    Loop-only."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, seconds: float, reason: str, place: int, read_bytes: int
    ) -> None:
        self.loop = loop
        self._seconds = seconds
        self._reason = reason
        self._place = place
        #: One more read fits while the reads in progress hold no more than this.
        self._fits_below = max(place, read_bytes) - place
        self._reading = 0
        self._waiting: collections.deque[tuple[asyncio.Future[None], CallEnder]] = collections.deque()
        #: The reads open, oldest first: their call's ender and deadline.
        self._reads: dict[CallEnder, float] = {}
        self._timer: asyncio.TimerHandle | None = None

    def enter(self, read: CallEnder) -> bool:
        """``read``'s call starting its read now — its place taken, its time running — when
        none waits before it and a place is free; False otherwise (``wait``)."""
        if self._waiting or self._reading > self._fits_below:
            return False
        self._take(read)
        return True

    def _take(self, read: CallEnder) -> None:
        """``read``'s place taken and its time started."""
        self._reading += self._place
        deadline = self._reads[read] = self.loop.time() + self._seconds
        if self._timer is None:
            self._timer = self.loop.call_at(deadline, self._expire)

    async def wait(self, read: CallEnder) -> None:
        """Wait for ``read``'s place, first come first served (``leave`` hands it over and
        starts its time); on a cancellation meanwhile, a place handed over is passed on."""
        waiter = self.loop.create_future()
        entry = (waiter, read)
        self._waiting.append(entry)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.leave(read)  # the place was handed over as the call ended: pass it on
            else:
                self._waiting.remove(entry)
            raise

    def leave(self, read: CallEnder) -> None:
        """``read``'s read is over, in time or not: its time stopped (the clock holds no call
        past its read), its place given back and handed to the reads waiting, first come first
        served."""
        self._reads.pop(read, None)
        self._reading -= self._place
        waiting = self._waiting
        while waiting and self._reading <= self._fits_below:
            waiter, next_read = waiting.popleft()
            if not waiter.done():
                self._take(next_read)
                waiter.set_result(None)

    def _expire(self) -> None:
        self._timer = None
        reads, now = self._reads, self.loop.time()
        while reads:
            read = next(iter(reads))
            deadline = reads[read]
            if deadline > now:
                self._timer = self.loop.call_at(deadline, self._expire)
                return
            del reads[read]
            read.end(self._reason)

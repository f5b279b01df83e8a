"""The deadlines of the reads of request messages in progress on one event loop
(:class:`ReadClock`): a read not finished within the clock's time has its task cancelled
and is marked expired. Loop-only."""

from __future__ import annotations

import asyncio
from typing import Any


class ReadClock:
    """The deadlines of the reads in progress on one event loop, one read per task at a time.
    Every read gets the same time, so reads expire in the order they started: one timer,
    armed for the oldest read still open, stands for all of them. (A timer per read,
    ``asyncio.timeout``, costs every call a timer handle pushed on the loop's heap and its
    cancellation.) A read is its task: ``start`` and ``finish`` are one dict entry each, the
    reads open kept in the order they started (the dict's). Loop-only."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.loop = loop
        self._seconds = seconds
        #: The reads open, oldest first: their task and deadline.
        self._reads: dict[asyncio.Task[Any], float] = {}
        #: The tasks the clock cancelled, until ``expired`` takes them back.
        self._expired: set[asyncio.Task[Any]] = set()
        self._timer: asyncio.TimerHandle | None = None

    def start(self, task: asyncio.Task[Any] | None = None) -> asyncio.Task[Any]:
        """A read of ``task`` (the current task, the caller's when it has it: None, looked up)
        starting now, returned for ``finish`` and ``expired``: the task is cancelled (and the
        read marked expired) if it has not ``finish``ed within the clock's time."""
        if task is None:
            task = asyncio.current_task(self.loop)
            if task is None:
                raise RuntimeError("a read is timed on a task")
        deadline = self._reads[task] = self.loop.time() + self._seconds
        if self._timer is None:
            self._timer = self.loop.call_at(deadline, self._expire)
        return task

    def finish(self, read: asyncio.Task[Any]) -> None:
        """The read of ``read`` (``start``'s) is over, in time or not. A mark the read's
        cancellation did not take back (the read had returned when the cancellation came) goes
        too: the clock holds no task past its read."""
        self._reads.pop(read, None)
        if self._expired:
            self._expired.discard(read)

    def expired(self, read: asyncio.Task[Any]) -> bool:
        """Whether the clock cancelled the read of ``read`` (``start``'s); asked once, in the
        read's cancellation (the mark is taken back)."""
        try:
            self._expired.remove(read)
        except KeyError:
            return False
        return True

    def _expire(self) -> None:
        self._timer = None
        reads, now = self._reads, self.loop.time()
        while reads:
            task = next(iter(reads))
            deadline = reads[task]
            if deadline > now:
                self._timer = self.loop.call_at(deadline, self._expire)
                return
            del reads[task]
            self._expired.add(task)
            task.cancel()

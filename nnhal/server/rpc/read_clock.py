"""The deadlines of the reads of request messages in progress on one event loop
(:class:`ReadClock`): a read not finished within the clock's time has its task cancelled
and is marked ``expired``. Loop-only."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Any


@dataclass(eq=False, slots=True)
class Read:
    """One read in progress: when it expires, and the task to end then (None once done)."""

    deadline: float
    task: asyncio.Task[Any] | None
    expired: bool = False


class ReadClock:
    """The deadlines of the reads in progress on one event loop. Every read gets the same
    time, so reads expire in the order they started: one timer, armed for the oldest read
    still open, stands for all of them. (A timer per read, ``asyncio.timeout``, costs every
    call a timer handle pushed on the loop's heap and its cancellation.) Loop-only."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.loop = loop
        self._seconds = seconds
        self._reads: collections.deque[Read] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> Read:
        """A read of the current task starting now: the task is cancelled (and the read marked
        ``expired``) if it has not ``finish``ed within the clock's time."""
        read = Read(self.loop.time() + self._seconds, asyncio.current_task())
        self._reads.append(read)
        if self._timer is None:
            self._timer = self.loop.call_at(read.deadline, self._expire)
        return read

    def finish(self, read: Read) -> None:
        read.task = None
        reads = self._reads
        while reads and reads[0].task is None:
            reads.popleft()

    def _expire(self) -> None:
        self._timer = None
        reads, now = self._reads, self.loop.time()
        while reads and (reads[0].task is None or reads[0].deadline <= now):
            read = reads.popleft()
            if read.task is not None:
                read.expired = True
                read.task.cancel()
                read.task = None
        if reads:
            self._timer = self.loop.call_at(reads[0].deadline, self._expire)

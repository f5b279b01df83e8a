"""The chunk reads of one streamed request, each charged before gRPC is asked for it.

With BDP probing off (``channel_args.SERVER_OPTIONS``) the HTTP/2 transport grants a stream's
sender more than its 64 KiB window only while a read of that stream is pending, and then
for the message being read. Read one after the other, each chunk of a streamed request
waits until the server has worked on the chunk before (copied it into its pool). A
:class:`ChunkReads` can ask for the next chunk while the current one is worked on
(:meth:`ChunkReads.ahead`), so the sender is granted its window meanwhile.

Every byte held for a client is charged to it before it is held (DESIGN.md §5): a read
asked for ahead first charges the bytes its chunk is expected to carry (the size of the
stream's chunk before, at first ``wire_stream.CHUNK_BYTES``, at most what the head
declared and has not arrived yet) to the stream's session. A session whose charge is
refused gets no read ahead: its next chunk is read once asked for (:meth:`ChunkReads.next`),
also charged before when the budget allows, else charged as it arrives, where a refusal
ends the stream. A chunk carrying more than was charged for it is charged the difference
as it arrives; one carrying less gives the rest back. :meth:`ChunkReads.close` cancels a
read still pending and gives back everything charged.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from nnhal.core import wire_stream
from nnhal.core.errors import HalError
from nnhal.server.budget import MemoryBudget

_ONLY_CHUNKS = "a streamed execution has one head, then only chunks"


class ChunkReads:
    """The chunks after a streamed request's head, read from ``parts`` with their data bytes
    charged to ``session`` in ``budget`` as kind ``what`` (module docstring). ``declared``:
    the bytes the head's chunked pools declare, which bounds what a read is charged ahead.
    Used on one event loop, by one handler."""

    def __init__(self, parts: AsyncIterator[Any], budget: MemoryBudget, session: str, what: str, declared: int) -> None:
        self._parts = parts
        self._budget = budget
        self._session = session
        self._what = what
        self._declared = declared
        #: Bytes charged: the chunks received so far and the pending read's reservation.
        self.charged = 0
        #: Of ``charged``, what the read asked for and not yet answered was charged ahead.
        self._reserved = 0
        #: Data bytes of the chunks received.
        self._received = 0
        #: What the next chunk is expected to carry: the size of the one before.
        self._expected = wire_stream.CHUNK_BYTES
        self._pending: asyncio.Future[Any] | None = None
        self._ended = False

    @property
    def reserved(self) -> int:
        """Bytes charged for the chunk of the read pending (0 without one)."""
        return self._reserved

    def _reserve(self) -> bool:
        """Charge what the next chunk is expected to carry; False if the budget refuses."""
        want = min(self._expected, max(0, self._declared - self._received))
        if want:
            try:
                self._budget.charge(self._session, want, self._what)
            except HalError:
                return False
        self.charged += want
        self._reserved = want
        return True

    def ahead(self) -> bool:
        """Ask gRPC for the next chunk now if its bytes can be charged first; True if a read is
        pending after this. Nothing when the stream has ended or the budget refuses (the next
        :meth:`next` reads it then). The read's task runs at the loop's next turn: the caller
        yields once (``await asyncio.sleep(0)``) to have the read asked for before it works."""
        if self._pending is not None:
            return True
        if self._ended or not self._reserve():
            return False
        self._pending = asyncio.ensure_future(anext(self._parts, None))
        return True

    async def next(self) -> Any | None:
        """The next chunk, its bytes charged; None once the stream has ended. Raises the read's
        error, InvalidArgument for a message that is no chunk, or the budget's refusal of bytes
        beyond what was charged ahead."""
        if self._ended:
            return None
        task, self._pending = self._pending, None
        if task is None:
            self._reserve()  # refused: charged as it arrives (below), as a read that is not ahead
            part = await anext(self._parts, None)
        else:
            part = await task
        reserved, self._reserved = self._reserved, 0
        if part is None:
            self._ended = True
            self._give(reserved)
            return None
        nbytes = len(wire_stream.chunk_of(part, _ONLY_CHUNKS).data)
        if nbytes > reserved:  # (refused: the reservation stays in ``charged`` until ``close``)
            self._budget.charge(self._session, nbytes - reserved, self._what)
            self.charged += nbytes - reserved
        else:
            self._give(reserved - nbytes)
        self._received += nbytes
        self._expected = nbytes
        return part

    def _give(self, nbytes: int) -> None:
        if nbytes:
            self._budget.uncharge(self._session, nbytes, self._what)
            self.charged -= nbytes

    async def close(self) -> None:
        """Cancel a read still pending (awaited) and give back everything charged. Idempotent."""
        task, self._pending = self._pending, None
        self._ended = True
        try:
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():  # ours, not the read's
                        raise
                except Exception:  # the read's own end: nothing of it is kept
                    pass
            elif task is not None and not task.cancelled():
                task.exception()  # retrieved: a read that failed after the caller stopped is not logged
        finally:
            self._reserved = 0
            self._give(self.charged)

"""The asyncio client's IBuffer: a driver-managed buffer (memory domain) living in the server.

``await dev.allocate(desc, [pm], input_roles, output_roles)`` returns one; a request names it
with ``buf.pool()`` (its argument takes offset 0, length 0), so an output written into it can
be the next execution's input with no round trip. ``copy_from`` / ``copy_to`` /
``copy_to_array`` take numpy arrays (inline bytes) or a ``SharedMemory`` region (same host),
as the sync :class:`nnhal.client.buffer.Buffer`, whose pure helpers it shares. Coroutines raise
the HalError the server answers (DEAD_OBJECT for a dead server). Release with ``await
release()`` or ``async with``; the session's end releases it anyway.
"""

from __future__ import annotations

import numpy as np

from nnhal.client.buffer import array_of, array_room, copy_source
from nnhal.client.memory import SharedMemory
from nnhal.client.release import AsyncReleasable
from nnhal.client.remote import calls
from nnhal.client.remote.aio_session import AioSession
from nnhal.core.errors import HalError
from nnhal.core.types import BufferTokenPool, MemoryPool


class Buffer(AsyncReleasable):
    """A driver-managed buffer of one session."""

    #: A dead or closed session freed the buffer: leaving ``async with`` drops any error of its release.
    SWALLOWED = (HalError,)

    def __init__(self, session: AioSession, handle: str, token: int) -> None:
        self._session = session
        self.handle = handle
        self.token = token
        self._released = False

    def pool(self) -> BufferTokenPool:
        """The request pool naming this buffer."""
        return BufferTokenPool(self.token)

    async def copy_from(self, src: np.ndarray | SharedMemory, dimensions: tuple[int, ...] | None = None) -> None:
        """IBuffer::copyFrom. ``dimensions`` default to an array's shape (``()``: the buffer's own)."""
        pool, dims = copy_source(src, dimensions)
        await self._session.run(calls.buffer_copy_from(self._session.session_id, self.handle, pool, dims))

    async def copy_to(self, dst: SharedMemory) -> None:
        """IBuffer::copyTo into a shared region (its size must equal the buffer's)."""
        await self._copy_to(dst.pool())

    async def copy_to_array(self, dtype: np.dtype | type, shape: tuple[int, ...]) -> np.ndarray:
        """IBuffer::copyTo into a new array of ``shape`` (which must match the buffer's size)."""
        return array_of(await self._copy_to(array_room(dtype, shape)), dtype, shape)

    async def _copy_to(self, dst: MemoryPool) -> bytes:
        return await self._session.run(calls.buffer_copy_to(self._session.session_id, self.handle, dst))

    async def release(self) -> None:
        """Free the buffer in the server (idempotent; nothing to do once the session ended)."""
        if self._released or self._session.dead or self._session.closed:
            return
        self._released = True
        await self._session.run(calls.release_buffer(self._session.session_id, self.handle))

    def __repr__(self) -> str:
        return f"Buffer(token={self.token})"

"""The client side of IBuffer: a driver-managed buffer (memory domain) that lives in
the server, named in requests by its token and filled or read with copies.

``Device.allocate`` returns one. Tensor bytes stay in the server between
executions: an output written into a buffer can be the next execution's input
with no round trip. ``copy_from`` / ``copy_to`` take numpy arrays (inline
bytes through gRPC) or a ``SharedMemory`` region (same host: the server copies
straight from or into the region).
"""

from __future__ import annotations

import weakref

import numpy as np

from nnhal.client.memory import SharedMemory
from nnhal.client.release import Releasable
from nnhal.client.remote import RemoteSession
from nnhal.core.errors import HalError
from nnhal.core.types import BufferTokenPool, InlinePool, SharedMemoryPool


def copy_source(
    src: np.ndarray | SharedMemory, dimensions: tuple[int, ...] | None
) -> tuple[InlinePool | SharedMemoryPool, tuple[int, ...]]:
    """What copyFrom sends for ``src``: its pool and dimensions (an array's shape by default;
    ``()`` means the buffer's own). Shared by the sync and asyncio buffers."""
    if isinstance(src, SharedMemory):
        return src.pool(), dimensions or ()
    if dimensions is None:  # before ascontiguousarray, which turns a 0-d array into 1-d
        dimensions = tuple(int(d) for d in np.shape(src))
    data = np.ascontiguousarray(src)
    return InlinePool(data.tobytes(), data.nbytes), dimensions


def array_room(dtype: np.dtype | type, shape: tuple[int, ...]) -> InlinePool:
    """The inline destination of a copyTo into an array of ``dtype`` and ``shape``."""
    return InlinePool(b"", int(np.dtype(dtype).itemsize * np.prod(shape, dtype=np.int64)))


def array_of(data: bytes, dtype: np.dtype | type, shape: tuple[int, ...]) -> np.ndarray:
    """The array a copyTo's bytes hold (a copy: the caller owns it)."""
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


class Buffer(Releasable):
    """A driver-managed buffer. Use as a context manager or call ``release``."""

    #: A dead or closed session freed the buffer: leaving ``with`` drops any error of its release.
    SWALLOWED = (HalError,)

    def __init__(self, remote: RemoteSession, handle: str, token: int) -> None:
        self.handle = handle
        self.token = token
        self._remote = remote
        self._released = False
        # The server drops the buffer with the session anyway; releasing earlier frees it sooner.
        self._finalizer = weakref.finalize(self, Buffer._release_remote, weakref.ref(remote), handle)

    @staticmethod
    def _release_remote(remote_ref: weakref.ref[RemoteSession], handle: str) -> None:
        remote = remote_ref()
        if remote is None:
            return
        try:
            remote.release_buffer(handle)
        except HalError:
            pass  # the server or the session is gone, and the buffer with it

    def pool(self) -> BufferTokenPool:
        """The request pool naming this buffer (its argument takes offset 0, length 0)."""
        return BufferTokenPool(self.token)

    def copy_from(self, src: np.ndarray | SharedMemory, dimensions: tuple[int, ...] | None = None) -> None:
        """IBuffer::copyFrom. ``dimensions`` default to an array's shape (``()`` means the
        buffer's own); the server checks them against the buffer's and the byte count."""
        self._remote.buffer_copy_from(self.handle, *copy_source(src, dimensions))

    def copy_to(self, dst: SharedMemory) -> None:
        """IBuffer::copyTo into a shared region (its size must equal the buffer's)."""
        self._remote.buffer_copy_to(self.handle, dst.pool())

    def copy_to_array(self, dtype: np.dtype | type, shape: tuple[int, ...]) -> np.ndarray:
        """IBuffer::copyTo into a new array of ``shape`` (which must match the buffer's size)."""
        return array_of(self._remote.buffer_copy_to(self.handle, array_room(dtype, shape)), dtype, shape)

    def release(self) -> None:
        """Free the buffer in the server (idempotent)."""
        if not self._released:
            self._released = True
            self._finalizer.detach()
            self._remote.release_buffer(self.handle)

    def __repr__(self) -> str:
        return f"Buffer(token={self.token})"

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
from typing import TYPE_CHECKING, Any

import numpy as np

from nnhal.core import wire
from nnhal.core.errors import HalError
from nnhal.core.types import BufferTokenPool, InlinePool
from nnhal.proto import service_pb2 as spb

if TYPE_CHECKING:
    from nnhal.client.device import Device
    from nnhal.client.memory import SharedMemory


class Buffer:
    """A driver-managed buffer. Use as a context manager or call ``release``."""

    def __init__(self, device: Device, handle: str, token: int) -> None:
        self.handle = handle
        self.token = token
        self._device = device
        self._released = False
        # The server drops the buffer with the session anyway; releasing earlier frees it sooner.
        self._finalizer = weakref.finalize(self, Buffer._release_remote, weakref.ref(device), handle)

    @staticmethod
    def _release_remote(device_ref: Any, handle: str) -> None:
        device = device_ref()
        if device is None:
            return
        try:
            device.release_buffer(handle)
        except HalError:
            pass  # the server or the session is gone, and the buffer with it

    def pool(self) -> BufferTokenPool:
        """The request pool naming this buffer (its argument takes offset 0, length 0)."""
        return BufferTokenPool(self.token)

    def copy_from(self, src: np.ndarray | SharedMemory, dimensions: tuple[int, ...] | None = None) -> None:
        """IBuffer::copyFrom. ``dimensions`` default to an array's shape (``()`` means the
        buffer's own); the server checks them against the buffer's and the byte count."""
        from nnhal.client.memory import SharedMemory

        req = spb.CopyFromRequest(session=self._device.session, buffer=self.handle)
        if isinstance(src, SharedMemory):
            wire.pool_to(src.pool(), req.src)
        else:
            if dimensions is None:  # before ascontiguousarray, which turns a 0-d array into 1-d
                dimensions = tuple(int(d) for d in np.shape(src))
            data = np.ascontiguousarray(src)
            wire.pool_to(InlinePool(data.tobytes(), data.nbytes), req.src)
        req.dimensions.extend(dimensions or ())
        self._device.buffer_call("copyFrom", req)

    def copy_to(self, dst: SharedMemory) -> None:
        """IBuffer::copyTo into a shared region (its size must equal the buffer's)."""
        req = spb.CopyToRequest(session=self._device.session, buffer=self.handle)
        wire.pool_to(dst.pool(), req.dst)
        self._device.buffer_call("copyTo", req)

    def copy_to_array(self, dtype: np.dtype | type, shape: tuple[int, ...]) -> np.ndarray:
        """IBuffer::copyTo into a new array of ``shape`` (which must match the buffer's size)."""
        size = int(np.dtype(dtype).itemsize * np.prod(shape, dtype=np.int64))
        req = spb.CopyToRequest(session=self._device.session, buffer=self.handle)
        wire.pool_to(InlinePool(b"", size), req.dst)
        data = bytes(self._device.buffer_call("copyTo", req).data)
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()

    def release(self) -> None:
        """Free the buffer in the server (idempotent)."""
        if not self._released:
            self._released = True
            self._finalizer.detach()
            self._device.release_buffer(self.handle)

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.release()
        except HalError:
            pass  # dead server: nothing left to free

    def __repr__(self) -> str:
        return f"Buffer(token={self.token})"

"""Shared memory for same-host clients: regions the server reads and writes instead of
sending bytes through gRPC.

A region is a file in the server's shared-memory directory (``Device.shm_dir``,
tmpfs at /dev/shm by default) whose name carries the server's prefix, the
form of ``ashmem`` / ``mmap_fd`` (and ``hardware_buffer_blob``, emulated the
same way). The client maps it: inputs are written in place before an execution,
outputs are read in place after it, and no tensor bytes travel through gRPC.
Release explicitly (or with ``with``); the file is removed then.

On Linux ``create`` makes a memfd instead of a file (``memfd=True``; the default
when the server said it opens clients' memfds and runs in this process's PID namespace
as its user, ``shm_memfd``): sealed with ``F_SEAL_SHRINK | F_SEAL_GROW``
before anyone sees it, so the server maps it and reads and writes the tensors in
place (no copy on either side). Its pool name, ``<prefix>memfd.<pid>.<fd>.<nonce>``,
tells the server where to open it (``/proc/<pid>/fd/<fd>``, which the kernel allows
a server running as the same user); it lives only as long as its descriptors.
``memfd=False`` makes a file in the directory (a server in another PID namespace or
running as another user needs that); ``seal=False`` an unsealed memfd, which the
server copies through like a file.

Every region holds a shared ``flock`` on its file while it lives (the kernel drops it
when the process dies, however it dies). Files ``create`` makes are named
``<prefix><random>.held``; when a session ends, the server removes the ``.held`` files
no process holds any more, so a killed client leaves none behind.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import secrets
import time
from pathlib import Path
from typing import Protocol

import numpy as np

from nnhal.core import large_copy
from nnhal.core.errors import InvalidArgument
from nnhal.core.host import memfd_identity
from nnhal.core.shared_pages import map_shared
from nnhal.core.types import SharedMemoryPool

KINDS = ("ashmem", "mmap_fd", "hardware_buffer_blob")
#: The suffix of files held by their creator (``nnhal.server.shared_regions.HELD_SUFFIX``, equal).
HELD_SUFFIX = ".held"
_CREATE_ATTEMPTS = 8
#: The server's sweep holds an exclusive lock for microseconds; longer is another process.
_HOLD_WAIT_S = 2.0


class SharedMemoryHost(Protocol):
    """Where a server keeps shared regions (a ``Device`` or its ``RemoteSession``):
    its directory and the prefix region names must carry, both "" when not offered."""

    @property
    def shm_dir(self) -> str: ...

    @property
    def shm_prefix(self) -> str: ...


def memfd_available() -> bool:
    """Whether this system makes sealable memfds (Linux)."""
    return hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS") and hasattr(fcntl, "F_SEAL_SHRINK")


def _hold(fd: int, path: Path) -> None:
    """Take the shared lock that marks the file as held, waiting (bounded) while another
    process holds it exclusively."""
    end = time.monotonic() + _HOLD_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= end:
                raise InvalidArgument(f"{path.name} is locked exclusively by another process") from None
            time.sleep(0.001)


def _unlink_if_same(path: Path, fd: int) -> None:
    try:
        st, now = os.fstat(fd), os.stat(path, follow_symlinks=False)
        if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
            path.unlink()
    except OSError:
        pass


def _create_held(directory: Path, prefix: str) -> tuple[Path, int]:
    """A new empty file in ``directory``, open and held (shared flock).

    The server's sweep removes a ``.held`` file once it gets an exclusive lock. It can
    do so between our create and our lock; the lock then waits for the sweep, and the
    name no longer names our file: try another."""
    for _ in range(_CREATE_ATTEMPTS):
        path = directory / f"{prefix}{secrets.token_hex(12)}{HELD_SUFFIX}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            _hold(fd, path)
            st, now = os.fstat(fd), os.stat(path, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino):
                return path, fd
        except FileNotFoundError:
            pass  # swept before we looked
        except BaseException:
            _unlink_if_same(path, fd)
            os.close(fd)
            raise
        os.close(fd)
    raise InvalidArgument(f"could not create a shared region in {directory} ({_CREATE_ATTEMPTS} attempts)")


class SharedMemory:
    """A mapped region usable as a model pool (constants) or a request pool (inputs/outputs)."""

    def __init__(
        self, path: Path, size: int, kind: str, owned: bool, fd: int | None = None, name: str | None = None
    ) -> None:
        """Map ``path`` (or the open ``fd``, which the region then owns) and hold it. A
        ``name`` is a memfd's pool name (``path`` then reaches the memfd through /proc)."""
        if kind not in KINDS:
            if fd is not None:
                os.close(fd)
            raise InvalidArgument(f"unknown shared memory kind {kind!r}; one of {KINDS}")
        self.path = path
        self.size = size
        self.kind = kind
        self._owned = owned and name is None  # a memfd has no file to remove
        self._name = name or path.name
        if fd is None:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if name is None:
                # Held while the region lives: the server never removes a file a live process holds.
                _hold(fd, path)
            self._map: mmap.mmap | None = map_shared(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    # -- constructors ---------------------------------------------------------------
    @classmethod
    def create(
        cls, device: SharedMemoryHost, size: int, kind: str = "ashmem", memfd: bool | None = None, seal: bool = True
    ) -> SharedMemory:
        """A new zeroed region of ``size`` bytes: a memfd sealed against size changes
        (``memfd`` None: when the server can open it, see the module's docstring;
        ``seal=False``: unsealed), else a file in the server's shared-memory directory."""
        if not device.shm_dir:
            raise InvalidArgument("this server offers no shared memory (remote peer, or started with --shm-dir none)")
        if size <= 0:
            raise InvalidArgument(f"a shared region needs a positive size, got {size}")
        if kind not in KINDS:
            raise InvalidArgument(f"unknown shared memory kind {kind!r}; one of {KINDS}")
        if memfd is None:
            # Only a server in our PID namespace, as our user, can open it (nnhal.core.host).
            memfd = memfd_available() and getattr(device, "shm_memfd", "") == memfd_identity() != ""
        if memfd:
            return cls._create_memfd(device.shm_prefix, size, kind, seal)
        path, fd = _create_held(Path(device.shm_dir), device.shm_prefix)
        try:
            os.ftruncate(fd, size)
        except BaseException:
            path.unlink(missing_ok=True)
            os.close(fd)
            raise
        return cls(path, size, kind, owned=True, fd=fd)

    @classmethod
    def _create_memfd(cls, prefix: str, size: int, kind: str, seal: bool) -> SharedMemory:
        if not memfd_available():
            raise InvalidArgument("this system has no sealable memfd (create the region with memfd=False)")
        nonce = secrets.token_hex(12)
        fd = os.memfd_create(f"{prefix}{nonce}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            if seal:
                # Before anyone else sees it: from now on nobody can cut pages from under a mapping.
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        except BaseException:
            os.close(fd)
            raise
        name = f"{prefix}memfd.{os.getpid()}.{fd}.{nonce}"
        return cls(Path(f"/proc/{os.getpid()}/fd/{fd}"), size, kind, owned=True, fd=fd, name=name)

    @classmethod
    def from_array(
        cls,
        device: SharedMemoryHost,
        array: np.ndarray,
        kind: str = "ashmem",
        memfd: bool | None = None,
        seal: bool = True,
    ) -> SharedMemory:
        """A new region holding a copy of ``array``'s bytes (``memfd``, ``seal``: as ``create``)."""
        data = np.ascontiguousarray(array)
        region = cls.create(device, max(data.nbytes, 1), kind, memfd, seal)
        region.write(data)
        return region

    @classmethod
    def map_file(cls, device: SharedMemoryHost, path: Path, kind: str = "mmap_fd") -> SharedMemory:
        """An existing file, which must sit in the server's directory with its prefix."""
        path = Path(path)
        if not device.shm_dir or path.parent.resolve() != Path(device.shm_dir).resolve():
            raise InvalidArgument(f"{path} is not in the server's shared-memory directory {device.shm_dir!r}")
        if not path.name.startswith(device.shm_prefix):
            raise InvalidArgument(f"{path.name} does not start with the server's prefix {device.shm_prefix!r}")
        return cls(path, path.stat().st_size, kind, owned=False)

    # -- use ------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The pool name the server opens the region by."""
        return self._name

    def fileno(self) -> int:
        """The region's open descriptor (-1 once released)."""
        return self._fd

    def pool(self, offset: int = 0, size: int | None = None) -> SharedMemoryPool:
        """The pool naming this region (or a part of it) in a Model or Request."""
        return SharedMemoryPool(self.kind, self.name, offset, self.size - offset if size is None else size)

    def view(self, dtype: np.dtype | type, shape: tuple[int, ...], offset: int = 0) -> np.ndarray:
        """A numpy view of part of the region (writes go straight to the shared pages)."""
        if self._map is None:
            raise InvalidArgument("the shared region was released")
        count = int(np.prod(shape))
        return np.frombuffer(self._map, dtype=dtype, count=count, offset=offset).reshape(shape)

    def write(self, array: np.ndarray, offset: int = 0) -> None:
        """Copy ``array``'s bytes (C order) into the region from ``offset``: what a request's
        input needs before an execution reads it from the region. A large copy is shared with
        helper threads while the machine has a core to spare (``nnhal.core.large_copy``).
        InvalidArgument when the bytes do not fit or the region was released."""
        if self._map is None:
            raise InvalidArgument("the shared region was released")
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        if offset < 0 or offset + data.nbytes > self.size:
            raise InvalidArgument(
                f"{data.nbytes} bytes at offset {offset} do not fit the {self.size}-byte shared region"
            )
        dst = np.frombuffer(self._map, dtype=np.uint8, count=data.nbytes, offset=offset)
        large_copy.copy(dst, data)

    def release(self) -> None:
        """Unmap, and remove the file if this object created it (idempotent)."""
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # numpy views still alive keep the mapping until they go
            self._map = None
        if self._owned:
            self.path.unlink(missing_ok=True)
            self._owned = False
        if self._fd >= 0:
            os.close(self._fd)  # drops the hold
            self._fd = -1

    def __enter__(self) -> SharedMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown
            pass

"""Resolving memory pools to bytes the executor can read and write.

Inline pools are message bytes (outputs get a fresh zeroed bytearray). Shared
pools are files inside the server's shared-memory directory, mapped with mmap:
only plain names carrying the configured prefix, opened without following
links, with offset + size checked against the file's real size. Token pools
name driver-managed buffers (memory domains): a request's get a placeholder here
that ``buffers.resolve_tokens`` fills; a model's or an IBuffer copy's are refused.
Whether the peer may name shared regions at all is the session's ``is_local``.
"""

from __future__ import annotations

import mmap
import os
import stat
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nnhal.core.errors import InvalidArgument
from nnhal.core.types import BufferTokenPool, InlinePool, MemoryPool, SharedMemoryPool
from nnhal.core.wire import MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from nnhal.server.buffers import DriverBuffer

SHARED_KINDS = frozenset({"ashmem", "mmap_fd", "hardware_buffer_blob"})
#: tmpfs where the system has one (regions then live in memory, like ashmem).
DEFAULT_SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


@dataclass(frozen=True)
class SharedMemoryPolicy:
    directory: Path
    prefix: str = "nnhal-"
    allow_remote: bool = False


class MappedFile:
    """One shared-memory file mapped read-write (whole file)."""

    def __init__(self, path: Path, fd: int, st: os.stat_result) -> None:
        self.path = path
        self.identity = (st.st_dev, st.st_ino)
        self.map = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def still_valid(self) -> bool:
        """True while the file is the one mapped and at least as large as when mapped.

        Touching pages of a file truncated by its owner raises SIGBUS; the driver
        checks this immediately before reading or writing request pools (model
        constants are copied at preparation instead).
        """
        try:
            st = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.identity and st.st_size >= len(self.map)

    def close(self) -> None:
        try:
            self.map.close()
        except (BufferError, ValueError):
            pass  # views still exported: the mapping goes when they do


def open_region(
    policy: SharedMemoryPolicy, pool: SharedMemoryPool, where: str, cache: RegionCache | None
) -> MappedFile:
    """Check the pool against the policy and the real file; map it (or reuse a cached map)."""
    if pool.kind not in SHARED_KINDS:
        raise InvalidArgument(
            f"{where}: unknown shared memory kind {pool.kind!r} (expected one of {sorted(SHARED_KINDS)})"
        )
    name = pool.name
    if not name or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        raise InvalidArgument(f"{where}: shared memory name {name!r} must be a plain file name")
    if not name.startswith(policy.prefix):
        raise InvalidArgument(f"{where}: shared memory name {name!r} must start with {policy.prefix!r}")
    path = policy.directory / name
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise InvalidArgument(f"{where}: cannot open shared memory {name!r}: {err.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidArgument(f"{where}: shared memory {name!r} is not a regular file")
        if pool.size == 0 or pool.offset + pool.size > st.st_size:
            raise InvalidArgument(
                f"{where}: region [{pool.offset}, {pool.offset + pool.size}) is outside {name!r} of {st.st_size} bytes"
            )
        if cache is not None:
            cached = cache.lookup(name, (st.st_dev, st.st_ino), st.st_size)
            if cached is not None:
                return cached
        mapped = MappedFile(path, fd, st)
    finally:
        os.close(fd)
    if cache is not None:
        cache.store(name, mapped)
    return mapped


class RegionCache:
    """A session's mapped regions, reused across executions so that pages are not
    faulted in again each time. Bounded; closed with the session."""

    LIMIT = 32

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, MappedFile] = {}

    def lookup(self, name: str, identity: tuple[int, int], size: int) -> MappedFile | None:
        with self._lock:
            f = self._files.get(name)
            if f is not None and f.identity == identity and len(f.map) == size:
                self._files[name] = self._files.pop(name)  # most recently used last
                return f
        return None

    def store(self, name: str, mapped: MappedFile) -> None:
        with self._lock:
            old = self._files.pop(name, None)
            self._files[name] = mapped
            evicted = [old] if old is not None else []
            while len(self._files) > self.LIMIT:
                evicted.append(self._files.pop(next(iter(self._files))))
        for f in evicted:
            f.close()

    def close(self) -> None:
        with self._lock:
            files = list(self._files.values())
            self._files.clear()
        for f in files:
            f.close()


class BoundPools:
    """The buffers of one request or model's pools, closed together."""

    def __init__(self) -> None:
        self.buffers: list[memoryview | bytes | bytearray] = []
        self.regions: list[MappedFile] = []
        self._views: list[memoryview] = []
        self._owned: list[MappedFile] = []
        self.inline_outputs: dict[int, bytearray | bytes] = {}
        #: Request output index -> driver-managed buffer receiving it.
        self.token_outputs: dict[int, DriverBuffer] = {}

    def inline_results(self) -> dict[int, bytes]:
        """The inline pools that received outputs, by pool index (copied out of the
        writable staging buffers; a pool an output filled whole is already bytes)."""
        return {i: bytes(b) for i, b in self.inline_outputs.items()}

    @property
    def sizes(self) -> list[int]:
        return [len(b) for b in self.buffers]

    def check_shared(self) -> None:
        for r in self.regions:
            if not r.still_valid():
                raise InvalidArgument("a shared memory region was truncated or removed while in use")

    def close(self) -> None:
        for v in self._views:
            v.release()
        self._views.clear()
        for f in self._owned:
            f.close()
        self._owned.clear()
        self.regions.clear()


TokenResolver = Callable[[BufferTokenPool, str], memoryview]


def reject_token(pool: BufferTokenPool, where: str) -> memoryview:
    """The TokenResolver of pools that cannot be driver-managed buffers."""
    raise InvalidArgument(f"{where}: a model pool cannot be a driver-managed buffer token")


def token_placeholder(pool: BufferTokenPool, where: str) -> memoryview:
    """The TokenResolver of requests: buffers.resolve_tokens fills the slot once the arguments are known."""
    return memoryview(b"")


def bind_pools(
    pools: tuple[MemoryPool, ...],
    policy: SharedMemoryPolicy | None,
    writable: set[int],
    resolve_token: TokenResolver | None = None,
    is_local_peer: bool = True,
    cache: RegionCache | None = None,
) -> BoundPools:
    """Map every pool; ``writable`` names the pools that receive outputs."""
    inline = sum(p.size for p in pools if isinstance(p, InlinePool))
    if inline > MAX_MESSAGE_BYTES:
        # Checked before anything is allocated: a declared size is only a number, and the
        # contents of inline pools have to fit one message in either direction.
        raise InvalidArgument(
            f"the inline pools declare {inline} bytes; at most {MAX_MESSAGE_BYTES} travel inline "
            "(use shared memory for more)"
        )
    bound = BoundPools()
    try:
        for i, pool in enumerate(pools):
            where = f"pool {i}"
            if isinstance(pool, InlinePool):
                if i in writable:
                    buf = bytearray(pool.size)
                    buf[: len(pool.data)] = pool.data
                    bound.inline_outputs[i] = buf
                    bound.buffers.append(buf)
                elif len(pool.data) < pool.size:
                    bound.buffers.append(pool.data + bytes(pool.size - len(pool.data)))
                else:
                    bound.buffers.append(pool.data)
            elif isinstance(pool, SharedMemoryPool):
                if policy is None:
                    raise InvalidArgument(f"{where}: this server accepts no shared memory pools")
                if not is_local_peer and not policy.allow_remote:
                    raise InvalidArgument(
                        f"{where}: shared memory pools are accepted only from clients on the server's host"
                    )
                mapped = open_region(policy, pool, where, cache)
                view = memoryview(mapped.map)[pool.offset : pool.offset + pool.size]
                bound.regions.append(mapped)
                bound._views.append(view)
                if cache is None:
                    bound._owned.append(mapped)
                bound.buffers.append(view)
            else:
                if resolve_token is None:
                    raise InvalidArgument(f"{where}: buffer tokens are not valid here")
                bound.buffers.append(resolve_token(pool, where))
    except BaseException:
        bound.close()
        raise
    return bound


def bind_model_pools(
    pools: tuple[MemoryPool, ...], policy: SharedMemoryPolicy | None, is_local_peer: bool
) -> BoundPools:
    """A model's pools as bytes. Shared regions are copied once here: constants are read
    at every execution, and a client that shrinks its region later must not be able to
    fault the server (SIGBUS) through them."""
    bound = bind_pools(pools, policy, set(), reject_token, is_local_peer)
    if bound.regions:
        bound.buffers = [bytes(b) for b in bound.buffers]
        bound.close()
    return bound

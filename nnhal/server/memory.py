"""Resolving memory pools to bytes the executor can read and write.

Inline pools are message bytes (outputs get a fresh zeroed bytearray). Shared
pools are files inside the server's shared-memory directory, mapped with mmap:
only plain names carrying the configured prefix, opened without following
links, with offset + size checked against the file's real size. Token pools
name driver-managed buffers (memory domains) and are resolved by the driver.
"""

from __future__ import annotations

import mmap
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nnhal.core.errors import InvalidArgument
from nnhal.core.types import BufferTokenPool, InlinePool, MemoryPool, SharedMemoryPool

SHARED_KINDS = frozenset({"ashmem", "mmap_fd", "hardware_buffer_blob"})
#: tmpfs where the system has one (regions then live in memory, like ashmem).
DEFAULT_SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


@dataclass(frozen=True)
class SharedMemoryPolicy:
    directory: Path
    prefix: str = "nnhal-"
    allow_remote: bool = False


class MappedRegion:
    """A shared region mapped read-write; ``view`` covers [offset, offset + size)."""

    def __init__(self, policy: SharedMemoryPolicy, pool: SharedMemoryPool, where: str) -> None:
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
                    f"{where}: region [{pool.offset}, {pool.offset + pool.size}) is outside "
                    f"{name!r} of {st.st_size} bytes"
                )
            self._map = mmap.mmap(fd, st.st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._fd_path = path
        self.size = pool.size
        self.view = memoryview(self._map)[pool.offset : pool.offset + pool.size]

    def still_valid(self) -> bool:
        """True while the backing file is at least as large as when mapped.

        Touching pages of a file truncated by its owner raises SIGBUS; the
        driver checks this immediately before reading or writing.
        """
        try:
            return os.stat(self._fd_path, follow_symlinks=False).st_size >= len(self._map)
        except OSError:
            return False

    def close(self) -> None:
        try:
            self.view.release()
            self._map.close()
        except (BufferError, ValueError):
            pass


class BoundPools:
    """The buffers of one request or model's pools, closed together."""

    def __init__(self) -> None:
        self.buffers: list[memoryview | bytes | bytearray] = []
        self.regions: list[MappedRegion] = []
        self.inline_outputs: dict[int, bytearray] = {}

    @property
    def sizes(self) -> list[int]:
        return [len(b) for b in self.buffers]

    def check_shared(self) -> None:
        for r in self.regions:
            if not r.still_valid():
                raise InvalidArgument("a shared memory region was truncated or removed while in use")

    def close(self) -> None:
        for r in self.regions:
            r.close()
        self.regions.clear()


TokenResolver = Callable[[BufferTokenPool, str], memoryview]


def bind_pools(
    pools: tuple[MemoryPool, ...],
    policy: SharedMemoryPolicy | None,
    writable: set[int],
    resolve_token: TokenResolver | None = None,
    is_local_peer: bool = True,
) -> BoundPools:
    """Map every pool; ``writable`` names the pools that receive outputs."""
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
                region = MappedRegion(policy, pool, where)
                bound.regions.append(region)
                bound.buffers.append(region.view)
            else:
                if resolve_token is None:
                    raise InvalidArgument(f"{where}: buffer tokens are not valid here")
                bound.buffers.append(resolve_token(pool, where))
    except BaseException:
        bound.close()
        raise
    return bound

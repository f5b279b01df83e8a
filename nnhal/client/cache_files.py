"""The client's compilation-cache files: written where the application keeps them, read back
by the server without their bytes crossing when both run on one host.

The HAL gives a driver the client's cache files as descriptors; here a cache file a
preparation returned is saved with :meth:`CacheFile.save` (or an existing one opened with
:meth:`CacheFile.open`), and held open. ``Device.prepare_model_from_cache`` takes it in
place of the bytes: to a server that said it opens this process's descriptors (its
``shm_memfd`` identity is this process's: same PID namespace, same user) the request
names the descriptor, its file's device, inode and size (``HeldFile``) and the server
reads the file itself (``nnhal.server.cache_files``); to any other server the bytes are
read here and sent. Either way the server authenticates what it read before using it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import TracebackType

from nnhal.core.host import memfd_identity


class CacheFile:
    """A cache file held open (read-only) for as long as this object lives; close it."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        st = os.fstat(fd)
        #: What the server checks the descriptor it opens against.
        self.dev, self.ino, self.size = st.st_dev, st.st_ino, st.st_size

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> CacheFile:
        """The cache file at ``path``, held open. OSError when it cannot be opened."""
        p = Path(path)
        fd = os.open(p, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return cls(p, fd)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def save(cls, path: str | os.PathLike[str], data: bytes) -> CacheFile:
        """Write ``data`` to ``path`` (mode 0600, replaced atomically: a reader never sees a
        half-written cache) and hold the new file open."""
        p = Path(path)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return cls.open(p)

    @property
    def fd(self) -> int:
        if self._fd < 0:
            raise ValueError(f"cache file {self.path} is closed")
        return self._fd

    def read(self) -> bytes:
        """The file's bytes (for a server that cannot read it itself)."""
        parts: list[bytes] = []
        done = 0
        while done < self.size:
            part = os.pread(self.fd, self.size - done, done)
            if not part:
                raise OSError(f"cache file {self.path} shrank while read")
            parts.append(part)
            done += len(part)
        return b"".join(parts)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> CacheFile:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"CacheFile({str(self.path)!r}, {self.size} bytes)"


#: What a preparation from cache takes as a cache file: its bytes, or the file held open.
CacheInput = bytes | CacheFile


def server_reads_held(shm_memfd: str) -> bool:
    """Whether a server announcing ``shm_memfd`` (its identity, "" when it opens no client
    descriptors) can open this process's descriptors through ``/proc``."""
    return shm_memfd != "" and shm_memfd == memfd_identity()


def as_bytes(cache: CacheInput) -> bytes:
    """The bytes of ``cache`` (read from the file when it is one)."""
    return cache.read() if isinstance(cache, CacheFile) else cache

"""Reading a client's compilation-cache files on the server's host without their bytes crossing.

A cache file travels as bytes (``CacheFile.data``) or, from a client on this host, as the
descriptor it holds the file open with (``HeldFile``: pid, fd, and the file's device, inode
and size). The server opens ``/proc/<pid>/fd/<fd>`` read-only — the kernel allows that only
to a process that could trace the holder (the same user, the same PID namespace) — and uses
it only if it is still a regular file with that device, inode and size: what the number
names now must be the file the client meant. The whole file is read into private memory
(whole, or in two pieces each read once: ``Pieces``) before anything in it is used, so the
holder cannot change what was authenticated (``cache.open_compiled`` / ``open_sealed``
check the MAC of that private copy), and a file that changed while read is INVALID_ARGUMENT.

What the client learns is no more than what sending the bytes would tell it: whether
those bytes are a cache this server sealed for that token. The server reads only files a
process of its own user holds open, and only from sessions that may name shared memory
(same host, and the policy allows opening clients' descriptors: ``allow_memfd``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

from nnhal.core.errors import InvalidArgument
from nnhal.server.pieces import Pieces
from nnhal.server.shared_regions import SharedMemoryPolicy

#: The largest cache file read through a descriptor: what an inline one may be (the 1 GiB message limit).
MAX_BYTES = 1 << 30
#: How many first bytes of a file ``read_held``'s ``cut`` is given.
CUT_PREFIX = 1024


@dataclass(frozen=True)
class HeldFile:
    """A regular file the client process ``pid`` holds open as ``fd``."""

    pid: int
    fd: int
    dev: int
    ino: int
    size: int


def _read(fd: int, start: int, n: int, where: str) -> bytes:
    """Bytes ``start:start + n`` of the file: one bytes object read from the page cache
    straight into it, unless the file is larger than one read may be."""
    parts: list[bytes] = []
    done = 0
    while done < n:
        part = os.pread(fd, n - done, start + done)
        if not part:
            raise InvalidArgument(f"{where}: the cache file shrank while the server read it")
        parts.append(part)
        done += len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_held(
    held: HeldFile,
    policy: SharedMemoryPolicy | None,
    is_local: bool,
    where: str,
    cut: Callable[[bytes], int | None] | None = None,
) -> bytes | Pieces:
    """The bytes of the file ``held`` names, read into private memory: whole, or in two
    pieces where ``cut`` (given the file's first ``CUT_PREFIX`` bytes) says (``Pieces``: the
    tail read straight into a bytes object of its own). INVALID_ARGUMENT when the session
    may not name files (remote, or the policy forbids opening clients' descriptors), the
    descriptor cannot be opened, is not that regular file, or the file changed size while
    read."""
    if policy is None or not policy.allow_memfd or not is_local:
        raise InvalidArgument(
            f"{where}: this server reads no cache file by descriptor from this client (send its bytes)"
        )
    if held.pid <= 0 or held.size > MAX_BYTES:
        raise InvalidArgument(f"{where}: cache file pid {held.pid} or size {held.size} out of range")
    try:
        fd = os.open(f"/proc/{held.pid}/fd/{held.fd}", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as err:
        raise InvalidArgument(
            f"{where}: cannot open the client's cache file (pid {held.pid}, fd {held.fd}): {err.strerror} "
            "(another user or PID namespace? send its bytes)"
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino, st.st_size) != (held.dev, held.ino, held.size):
            raise InvalidArgument(f"{where}: pid {held.pid} fd {held.fd} is not the cache file the client named")
        at = cut(_read(fd, 0, min(CUT_PREFIX, held.size), where)) if cut is not None else None
        data: bytes | Pieces
        if at is not None and 0 < at < held.size:
            data = Pieces(_read(fd, 0, at, where), _read(fd, at, held.size - at, where))
        else:
            data = _read(fd, 0, held.size, where)
        if os.pread(fd, 1, held.size):
            raise InvalidArgument(f"{where}: the cache file grew while the server read it")
    except OSError as err:
        raise InvalidArgument(f"{where}: cannot read the client's cache file: {err.strerror}") from None
    finally:
        os.close(fd)
    return data

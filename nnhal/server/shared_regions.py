"""Shared-memory regions a client names: the policy, opening them, mapping them, removing orphans.

Shared pools are files inside the server's shared-memory directory (only plain names
carrying the configured prefix, opened without following links) or a client's memfd
(named ``<prefix>memfd.<pid>.<fd>.<nonce>``, opened through ``/proc/<pid>/fd/<fd>`` when
the policy allows it, and only if that descriptor is a memfd whose own name is
``<prefix><nonce>``), with offset + size checked against the file's real size
(``open_region``, every policy check in one place). A region the kernel guarantees
cannot shrink (``F_GET_SEALS`` shows ``F_SEAL_SHRINK`` and ``F_SEAL_GROW``) is mapped and
used in place (``RegionCache`` keeps whole-file mappings for the next executions, and finds
a memfd it mapped again by its pool name after one ``stat``: ``RegionCache.kept``). Any
other region is never mapped: a client can shrink its file at any time, and a mapped page
past the new end faults the whole server (SIGBUS). Its bytes cross with
``preadv``/``pwrite`` into and out of private buffers, and a region that shrank is
INVALID_ARGUMENT, whenever it happens (``SharedRegion``). Region files whose every holder
died are removed when a session ends (``remove_orphans``). Binding a request's pools to
these regions: ``nnhal.server.memory``.
"""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import re
import stat
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from nnhal.core.errors import InvalidArgument
from nnhal.core.shared_pages import map_shared
from nnhal.core.types import SharedMemoryPool

if TYPE_CHECKING:
    pass


log = logging.getLogger(__name__)

#: The name suffix of region files a live process holds with a shared flock
#: (``nnhal.client.memory`` creates them; the two constants must be equal).
HELD_SUFFIX = ".held"
SHARED_KINDS = frozenset({"ashmem", "mmap_fd", "hardware_buffer_blob"})


@dataclass(frozen=True)
class SharedMemoryPolicy:
    """Where shared regions may live and who may name them. Every policy alive in the
    process is one whose directory a session's end sweeps (``RegionCache.close``)."""

    directory: Path
    prefix: str = "nnhal-"
    allow_remote: bool = False
    #: Whether pools may name a client's sealed memfd through ``/proc/<pid>/fd`` (the
    #: kernel lets the server open it only when it could trace the client: same user).
    allow_memfd: bool = True

    def __post_init__(self) -> None:
        with _SERVED_LOCK:
            _SERVED.add(self)


#: The policies alive in this process (a server has one; in-process tests a few).
_SERVED: weakref.WeakSet[SharedMemoryPolicy] = weakref.WeakSet()
_SERVED_LOCK = threading.Lock()  # a leaf


def _served() -> list[SharedMemoryPolicy]:
    with _SERVED_LOCK:
        return list(_SERVED)


#: The seals that make a region safe to map: its size can never change again.
SIZE_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW if hasattr(fcntl, "F_SEAL_SHRINK") else 0
#: ``<prefix>memfd.<pid>.<fd>.<nonce>``: a client's memfd (after the prefix).
_MEMFD_NAME = re.compile(r"memfd\.([1-9][0-9]{0,9})\.([0-9]{1,9})\.([0-9a-f]{8,64})")


def size_sealed(fd: int) -> bool:
    """Whether the kernel forbids ``fd``'s file to shrink or grow (memfd seals)."""
    if not SIZE_SEALS:
        return False
    try:
        return fcntl.fcntl(fd, fcntl.F_GET_SEALS) & SIZE_SEALS == SIZE_SEALS
    except OSError:
        return False  # not a file that takes seals (EINVAL)


class SharedRegion:
    """One shared-memory file, held open; mapped only when sealed against size changes.

    A client may shrink its own file at any moment unless the kernel forbids it. Through
    a mapping, the next load or store past the new end raises SIGBUS and kills the
    server; a read or write system call returns short instead. So the bytes of a region
    without ``SIZE_SEALS`` cross with ``preadv``/``pwrite``: inputs into private buffers
    when the execution starts, outputs back after it succeeds (a short read, or a file
    now smaller than the pool, is INVALID_ARGUMENT "shrank"). A sealed region's
    ``view`` is then the pool's bytes in a shared mapping, used in place (a mapping of its
    own, or one the session's ``RegionCache`` keeps).
    """

    def __init__(self, name: str, fd: int, view: memoryview | None = None, mapping: mmap.mmap | None = None) -> None:
        self.name = name
        self._fd = fd
        #: The pool's bytes, mapped (sealed regions only).
        self.view = view
        self._mapping = mapping  # its own, unmapped by ``close``

    def _shrank(self, end: int) -> InvalidArgument:
        try:
            size = os.fstat(self._fd).st_size
        except OSError:
            size = 0
        return InvalidArgument(
            f"shared memory {self.name!r} shrank while in use: it has {size} bytes, the pool ends at byte {end}"
        )

    def read(self, offset: int, out: memoryview) -> None:
        """Fill ``out`` (bytes) with the region's bytes from ``offset``."""
        done, want = 0, len(out)
        try:
            while done < want:
                n = os.preadv(self._fd, [out[done:]], offset + done)
                if n == 0:
                    raise self._shrank(offset + want)
                done += n
        except OSError as err:
            raise InvalidArgument(f"cannot read shared memory {self.name!r}: {err.strerror}") from None

    def write(self, offset: int, data: memoryview) -> None:
        """Write ``data`` (bytes) at ``offset``. The size is checked first: a write past the
        end would grow the file back (no fault, but the client shrank it for a reason)."""
        end = offset + len(data)
        try:
            if os.fstat(self._fd).st_size < end:
                raise self._shrank(end)
            done = 0
            while done < len(data):
                done += os.pwrite(self._fd, data[done:], offset + done)
        except OSError as err:
            raise InvalidArgument(f"cannot write shared memory {self.name!r}: {err.strerror}") from None

    def close(self) -> None:
        self.view = None
        if self._mapping is not None:
            try:
                self._mapping.close()
            except BufferError:
                pass  # a view the executor made still lives: unmapped when it goes (sealed: no fault)
            self._mapping = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _open_memfd(policy: SharedMemoryPolicy, name: str, where: str) -> tuple[int, str] | None:
    """The client memfd ``name`` designates, open, and the ``/proc`` path it was opened
    through; None when the name is not a memfd's."""
    found = _MEMFD_NAME.fullmatch(name[len(policy.prefix) :])
    if found is None:
        return None
    if not policy.allow_memfd:
        raise InvalidArgument(f"{where}: this server accepts no memfd pools (create regions with memfd=False)")
    pid, number, nonce = found.groups()
    path = f"/proc/{pid}/fd/{number}"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as err:
        raise InvalidArgument(
            f"{where}: cannot open the client's memfd {name!r}: {err.strerror} (another user or PID namespace? "
            "create regions with memfd=False)"
        ) from None
    try:
        # What was opened must be the memfd the client named, not whatever that number is now.
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        target = ""
    if target != f"/memfd:{policy.prefix}{nonce} (deleted)":
        os.close(fd)
        raise InvalidArgument(f"{where}: {name!r} does not name a live memfd of its client")
    return fd, path


def open_region(
    policy: SharedMemoryPolicy, pool: SharedMemoryPool, where: str, cache: RegionCache | None
) -> SharedRegion:
    """Check the pool against the policy and the real file; the region, open (close it)."""
    if pool.kind not in SHARED_KINDS:
        raise InvalidArgument(
            f"{where}: unknown shared memory kind {pool.kind!r} (expected one of {sorted(SHARED_KINDS)})"
        )
    name = pool.name
    if cache is not None:
        # A sealed memfd this session mapped under this very name (so the name passed every
        # check below then): its kept mapping, once ``/proc`` shows the client's descriptor is
        # that memfd still (``RegionCache.kept``) — no descriptor opened, nothing re-checked
        # that cannot have changed. Anything else (a new name, a released region, a range
        # outside the file) takes the checks below, which word the refusal.
        view = cache.kept(name, pool.offset, pool.size)
        if view is not None:
            return SharedRegion(name, -1, view)
    if not name or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        raise InvalidArgument(f"{where}: shared memory name {name!r} must be a plain file name")
    if not name.startswith(policy.prefix):
        raise InvalidArgument(f"{where}: shared memory name {name!r} must start with {policy.prefix!r}")
    memfd = _open_memfd(policy, name, where)
    proc_path = None
    if memfd is not None:
        fd, proc_path = memfd
    else:
        try:
            # O_NONBLOCK: a FIFO planted under a valid name must not block the open.
            fd = os.open(policy.directory / name, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as err:
            raise InvalidArgument(f"{where}: cannot open shared memory {name!r}: {err.strerror}") from None
    try:
        # Seals first, size after: once sealed, the size read is the size for good.
        sealed = size_sealed(fd)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidArgument(f"{where}: shared memory {name!r} is not a regular file")
        if pool.size == 0 or pool.offset + pool.size > st.st_size:
            raise InvalidArgument(
                f"{where}: region [{pool.offset}, {pool.offset + pool.size}) is outside {name!r} of {st.st_size} bytes"
            )
        if sealed:
            view = cache.view(fd, st, pool.offset, pool.size, name, proc_path) if cache is not None else None
            if view is not None:
                return SharedRegion(name, fd, view)
            base = pool.offset - pool.offset % mmap.ALLOCATIONGRANULARITY
            try:
                # Only the pool's pages, populated: one pass in the kernel instead of a fault per page.
                mapping = map_shared(fd, pool.offset + pool.size - base, base, populate=True)
            except OSError:
                pass  # sealed against writes, or no address space: the copy path decides
            else:
                view = memoryview(mapping)[pool.offset - base : pool.offset - base + pool.size]
                return SharedRegion(name, fd, view, mapping)
    except BaseException:
        os.close(fd)
        raise
    return SharedRegion(name, fd)


def remove_orphans(policy: SharedMemoryPolicy) -> int:
    """Unlink the region files in the policy's directory that no process holds any more;
    returns how many.

    ``SharedMemory.create`` names its files ``<prefix><random>.held`` and keeps a shared
    ``flock`` on each for as long as the region lives; the kernel drops that lock when the
    holder dies, however it dies. A file is removed only when an exclusive lock on it
    succeeds (no process holds it) and the name still names that file; files without the
    suffix (made by other means) and files some live process holds are never touched.
    """
    try:
        names = os.listdir(policy.directory)
    except OSError:
        return 0
    removed = 0
    for name in names:
        if not (name.startswith(policy.prefix) and name.endswith(HELD_SUFFIX)):
            continue
        path = policy.directory / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            continue  # gone meanwhile, a link, or not ours to open
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live process holds it
            now = os.stat(path, follow_symlinks=False)
            if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                os.unlink(path)
                removed += 1
        except OSError:
            continue
        finally:
            os.close(fd)
    if removed:
        log.info("removed %d shared-memory region files their clients left behind", removed)
    return removed


class RegionCache:
    """A session's shared-memory state (the session owns one and closes it when it ends).

    Regions are not kept open between executions; sealed ones are kept mapped (``view``),
    found again by the memfd pool names they were mapped under (``kept``). The session keeps the private
    staging buffers its executions copied regions through, for the next ones (fresh
    pages cost more to fault in than the copy itself; bounded by ``LIMIT_BYTES``).
    Closing it removes the region files of clients that died (``remove_orphans``) from
    the directory of every policy this process serves: the session's end is the moment
    a killed client's files become orphans, whether or not it ever named one in a
    request. Thread-safe; its lock is a leaf.
    """

    LIMIT_BYTES = 160 << 20
    LIMIT_BUFFERS = 4
    #: Sealed regions kept mapped between executions (the least recently used go first).
    LIMIT_MAPPED_BYTES = 256 << 20
    LIMIT_MAPPED = 8

    #: Pool names known to name a kept mapping (``kept``): a few per mapping at most.
    LIMIT_NAMED = 4 * LIMIT_MAPPED

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[mmap.mmap] = []
        self._mapped: OrderedDict[tuple[int, int], mmap.mmap] = OrderedDict()
        #: A kept mapping's memfd pool names: name -> (the ``/proc/<pid>/fd/<fd>`` path it was
        #: opened through, the memfd's (device, inode): its ``_mapped`` key).
        self._named: dict[str, tuple[str, tuple[int, int]]] = {}

    def kept(self, name: str, offset: int, size: int) -> memoryview | None:
        """``size`` bytes from ``offset`` of the kept mapping of the memfd pool ``name``, when
        ``view`` mapped it under this name and the client's descriptor the name designates is
        that memfd still; else None (the caller opens and checks the region as the first time).

        As safe as opening it again: the mapping holds the memfd's inode, so no other file
        has its (device, inode) while it is kept, and a ``stat`` of the ``/proc`` path showing
        them means the client holds that very memfd at that number now — the one whose name
        (its nonce) and seals were checked when it was mapped. The kernel allows that
        ``stat`` only to a server that could open the path (the same ptrace check). Seals are
        never removed, so the size checked then is the size for good. A released region (the
        descriptor closed, or its number reused by another file) fails the ``stat`` or shows
        another inode: refused by the full checks, as before. One system call instead of an
        open, a readlink, the seals, an fstat and a close."""
        named = self._named.get(name)
        if named is None:
            return None
        path, key = named
        try:
            st = os.stat(path)
        except OSError:
            return None
        if (st.st_dev, st.st_ino) != key:
            return None
        with self._lock:
            mapping = self._mapped.get(key)
            if mapping is None or size <= 0 or offset < 0 or offset + size > len(mapping):
                return None  # evicted meanwhile, or a range the full checks refuse
            self._mapped.move_to_end(key)
            # Made under the lock: an eviction cannot unmap it between lookup and view.
            return memoryview(mapping)[offset : offset + size]

    def view(
        self, fd: int, st: os.stat_result, offset: int, size: int, name: str = "", path: str | None = None
    ) -> memoryview | None:
        """``size`` bytes from ``offset`` of the sealed region open as ``fd`` (``st``: its
        fstat), in a mapping of the whole file kept for the next executions: mapping and
        unmapping 64 MiB cost more than copying it. None when the file is larger than the
        bound or cannot be mapped writable. The caller checked the seals: the file's size
        can never change, so the mapping can never fault. A kept mapping keeps the client's
        memfd alive (bounded: ``LIMIT_MAPPED_BYTES``) until it is evicted or the session ends.
        ``path``: the ``/proc/<pid>/fd/<fd>`` path of a client's memfd pool ``name`` (checked
        by the caller: the memfd that name designates), by which ``kept`` finds it again."""
        key = (st.st_dev, st.st_ino)
        with self._lock:
            mapping = self._mapped.get(key)
            if mapping is not None:
                self._mapped.move_to_end(key)
                self._name(name, path, key)
                # Made under the lock: an eviction cannot unmap it between lookup and view.
                return memoryview(mapping)[offset : offset + size]
        if st.st_size > self.LIMIT_MAPPED_BYTES:
            return None
        try:
            mapping = map_shared(fd, st.st_size, populate=True)
        except OSError:
            return None
        with self._lock:
            mapping = self._mapped.setdefault(key, mapping)
            view = memoryview(mapping)[offset : offset + size]
            while (
                len(self._mapped) > self.LIMIT_MAPPED or sum(map(len, self._mapped.values())) > self.LIMIT_MAPPED_BYTES
            ):
                gone, old = self._mapped.popitem(last=False)
                _unmap(old)
                for stale in [n for n, (_, k) in self._named.items() if k == gone]:
                    del self._named[stale]
            self._name(name, path, key)
            return view

    def _name(self, name: str, path: str | None, key: tuple[int, int]) -> None:
        """Under the lock: remember that pool ``name`` (a memfd's, opened through ``path``)
        names the kept mapping ``key`` (the oldest name forgotten past ``LIMIT_NAMED``)."""
        if path is None or key not in self._mapped:
            return
        named = self._named
        if name not in named and len(named) >= self.LIMIT_NAMED:
            del named[next(iter(named))]
        named[name] = (path, key)

    def staging(self, size: int) -> mmap.mmap:
        """A private buffer of ``size`` bytes (anonymous memory: pages nobody touches cost nothing)."""
        with self._lock:
            for k, buf in enumerate(self._free):
                if len(buf) == size:
                    return self._free.pop(k)
        return mmap.mmap(-1, size)

    def give_back(self, buf: mmap.mmap) -> None:
        """Keep ``buf`` for a later execution, if it fits the bounds (else it is unmapped
        when the last view of it goes)."""
        with self._lock:
            if len(self._free) < self.LIMIT_BUFFERS and sum(map(len, self._free)) + len(buf) <= self.LIMIT_BYTES:
                self._free.append(buf)

    def close(self) -> None:
        """The session ended: drop the staging buffers and remove the region files no live
        process holds (its own client's among them when the client died; a client that
        only disconnected still holds, and removes, its own)."""
        with self._lock:
            self._free = []
            mapped, self._mapped = list(self._mapped.values()), OrderedDict()
            self._named = {}
        for mapping in mapped:
            _unmap(mapping)
        for policy in _served():
            remove_orphans(policy)


def _unmap(mapping: mmap.mmap) -> None:
    try:
        mapping.close()
    except BufferError:
        pass  # an execution still uses it: unmapped when its last view goes (sealed: no fault)

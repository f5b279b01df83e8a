"""Resolving memory pools to bytes the executor can read and write.

Inline pools are message bytes (outputs get a fresh zeroed buffer: a bytearray when
small, a numpy allocation when large — its zero pages are mapped lazily, as huge pages
where the system allows, instead of faulted in 4 KiB at a time by a memset — handed
back uncopied as a read-only memoryview). Shared
pools are files inside the server's shared-memory directory (only plain names
carrying the configured prefix, opened without following links) or a client's
memfd (named ``<prefix>memfd.<pid>.<fd>.<nonce>``, opened through
``/proc/<pid>/fd/<fd>`` when the policy allows it, and only if that descriptor is a
memfd whose own name is ``<prefix><nonce>``), with offset + size checked against
the file's real size (``open_region``, every policy check in one place). A region
the kernel guarantees cannot shrink (``F_GET_SEALS`` shows ``F_SEAL_SHRINK`` and
``F_SEAL_GROW``) is mapped and used in place: inputs read and outputs written
straight in the client's pages. Any other region is never mapped: a client can
shrink its file at any time, and a mapped page past the new end faults the whole
server (SIGBUS). Its bytes cross with ``preadv``/``pwrite`` into and out of
private buffers, and a region that shrank is INVALID_ARGUMENT, whenever it happens
(``SharedRegion``). Token
pools name driver-managed buffers (memory domains): a request's get a placeholder
here that ``buffers.resolve_tokens`` fills; a model's or an IBuffer copy's are
refused. Whether the peer may name shared regions at all is the session's
``is_local``. Region files whose every holder died are removed when a session
ends (``remove_orphans``).
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
from collections.abc import Callable, Sequence, Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from nnhal.core import wire
from nnhal.core.errors import InvalidArgument, ResourceExhaustedPersistent
from nnhal.core.types import BufferTokenPool, InlinePool, MemoryPool, PoolData, RequestArgument, SharedMemoryPool

if TYPE_CHECKING:
    from nnhal.server.buffers import DriverBuffer

log = logging.getLogger(__name__)

#: The name suffix of region files a live process holds with a shared flock
#: (``nnhal.client.memory`` creates them; the two constants must be equal).
HELD_SUFFIX = ".held"
SHARED_KINDS = frozenset({"ashmem", "mmap_fd", "hardware_buffer_blob"})
#: Inline output pools from this size on are numpy allocations handed back as views (see above).
LARGE_POOL_BYTES = 1 << 20


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
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
_PROT = mmap.PROT_READ | mmap.PROT_WRITE
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


def _open_memfd(policy: SharedMemoryPolicy, name: str, where: str) -> int | None:
    """The client memfd ``name`` designates, open; None when the name is not a memfd's."""
    found = _MEMFD_NAME.fullmatch(name[len(policy.prefix) :])
    if found is None:
        return None
    if not policy.allow_memfd:
        raise InvalidArgument(f"{where}: this server accepts no memfd pools (create regions with memfd=False)")
    pid, number, nonce = found.groups()
    try:
        fd = os.open(f"/proc/{pid}/fd/{number}", os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
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
    return fd


def open_region(
    policy: SharedMemoryPolicy, pool: SharedMemoryPool, where: str, cache: RegionCache | None
) -> SharedRegion:
    """Check the pool against the policy and the real file; the region, open (close it)."""
    if pool.kind not in SHARED_KINDS:
        raise InvalidArgument(
            f"{where}: unknown shared memory kind {pool.kind!r} (expected one of {sorted(SHARED_KINDS)})"
        )
    name = pool.name
    if not name or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        raise InvalidArgument(f"{where}: shared memory name {name!r} must be a plain file name")
    if not name.startswith(policy.prefix):
        raise InvalidArgument(f"{where}: shared memory name {name!r} must start with {policy.prefix!r}")
    memfd = _open_memfd(policy, name, where)
    if memfd is not None:
        fd = memfd
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
            view = cache.view(fd, st, pool.offset, pool.size) if cache is not None else None
            if view is not None:
                return SharedRegion(name, fd, view)
            base = pool.offset - pool.offset % mmap.ALLOCATIONGRANULARITY
            try:
                # Only the pool's pages, populated: one pass in the kernel instead of a fault per page.
                mapping = mmap.mmap(fd, pool.offset + pool.size - base, _MAP_FLAGS, _PROT, offset=base)
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

    Regions are not kept open between executions. The session keeps the private
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

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[mmap.mmap] = []
        self._mapped: OrderedDict[tuple[int, int], mmap.mmap] = OrderedDict()

    def view(self, fd: int, st: os.stat_result, offset: int, size: int) -> memoryview | None:
        """``size`` bytes from ``offset`` of the sealed region open as ``fd`` (``st``: its
        fstat), in a mapping of the whole file kept for the next executions: mapping and
        unmapping 64 MiB cost more than copying it. None when the file is larger than the
        bound or cannot be mapped writable. The caller checked the seals: the file's size
        can never change, so the mapping can never fault. A kept mapping keeps the client's
        memfd alive (bounded: ``LIMIT_MAPPED_BYTES``) until it is evicted or the session ends."""
        key = (st.st_dev, st.st_ino)
        with self._lock:
            mapping = self._mapped.get(key)
            if mapping is not None:
                self._mapped.move_to_end(key)
                # Made under the lock: an eviction cannot unmap it between lookup and view.
                return memoryview(mapping)[offset : offset + size]
        if st.st_size > self.LIMIT_MAPPED_BYTES:
            return None
        try:
            mapping = mmap.mmap(fd, st.st_size, _MAP_FLAGS, _PROT)
        except OSError:
            return None
        with self._lock:
            mapping = self._mapped.setdefault(key, mapping)
            view = memoryview(mapping)[offset : offset + size]
            while (
                len(self._mapped) > self.LIMIT_MAPPED or sum(map(len, self._mapped.values())) > self.LIMIT_MAPPED_BYTES
            ):
                _, old = self._mapped.popitem(last=False)
                _unmap(old)
            return view

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
        for mapping in mapped:
            _unmap(mapping)
        for policy in _served():
            remove_orphans(policy)


def _unmap(mapping: mmap.mmap) -> None:
    try:
        mapping.close()
    except BufferError:
        pass  # an execution still uses it: unmapped when its last view goes (sealed: no fault)


@dataclass
class _SharedPool:
    index: int
    region: SharedRegion
    offset: int
    #: The private copy; None when the region is sealed and used in place.
    staging: mmap.mmap | None
    writable: bool
    #: (start, end) in the pool read before the execution and written back after it;
    #: the whole pool (and nothing written) until ``plan`` names the arguments.
    reads: list[tuple[int, int]] = field(default_factory=list)
    writes: list[tuple[int, int]] = field(default_factory=list)


class BoundPools:
    """The buffers of one request or model's pools, closed together. Used by one thread
    at a time (the job's), closed after its last use.

    A shared pool's buffer is a private staging buffer: ``check_shared`` fills the bytes
    the request reads (when the execution starts, after any fence it waited for), and
    ``inline_results`` writes the outputs back once the execution succeeded. A sealed
    region's buffer is its mapping: read and written in place, nothing to copy."""

    def __init__(self, cache: RegionCache | None = None) -> None:
        self.buffers: list[memoryview | bytes | bytearray] = []
        self._cache = cache
        self._shared: list[_SharedPool] = []
        self._loaded = False
        self._stored = False
        self.inline_outputs: dict[int, bytearray | bytes | memoryview] = {}
        #: Request output index -> driver-managed buffer receiving it.
        self.token_outputs: dict[int, DriverBuffer] = {}
        #: Whether a pool names a driver-managed buffer (a token).
        self.has_tokens = False
        #: Bytes of the inline and shared pools (what the request itself brings).
        self.data_bytes = 0

    @property
    def has_shared(self) -> bool:
        return bool(self._shared)

    def plan(self, inputs: Sequence[RequestArgument], outputs: Sequence[RequestArgument]) -> None:
        """Copy only the request's arguments, not whole pools: a pool may be a large region
        whose other bytes the client keeps using during the execution. Output ranges are
        read too, so that writing one back leaves the bytes an output shorter than its
        range did not fill as they were."""
        if not self._shared:
            return
        shared = {p.index: p for p in self._shared}
        for p in shared.values():
            p.reads, p.writes = [], []
        for kind, args in (("input", inputs), ("output", outputs)):
            for arg in args:
                pool = shared.get(arg.location.pool_index)
                if arg.has_no_value or pool is None or arg.location.length == 0:
                    continue
                span = (arg.location.offset, arg.location.offset + arg.location.length)
                pool.reads.append(span)
                if kind == "output":
                    pool.writes.append(span)

    def inline_results(self) -> dict[int, PoolData]:
        """The results of a successful execution: the outputs in shared pools are written
        back to their files (INVALID_ARGUMENT if a region shrank meanwhile; the
        driver-managed buffers the execution wrote are then uninitialized, as after any
        failure), and the inline pools that received outputs are returned by pool index
        (as a read-only view of its buffer, which nothing writes once the execution ended —
        an answer's writer copies it once, into its message or ring; a pool an output filled
        whole is already bytes)."""
        if not self._stored:
            self._stored = True
            try:
                for p in self._shared:
                    if p.staging is None:
                        continue  # written in place
                    view = memoryview(p.staging)
                    for start, end in p.writes:
                        p.region.write(p.offset + start, view[start:end])
            except InvalidArgument:
                for buf in self.token_outputs.values():
                    buf.invalidate()
                raise
        return {i: b if type(b) is bytes else memoryview(b).toreadonly() for i, b in self.inline_outputs.items()}

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(map(len, self.buffers))

    def check_shared(self) -> None:
        """Read the shared pools' bytes into their staging buffers, once (INVALID_ARGUMENT
        when a region shrank). Called when the execution starts, not at launch: a fenced
        execution reads what the executions it waited for wrote."""
        if self._loaded:
            return
        self._loaded = True
        for p in self._shared:
            if p.staging is None:
                continue  # read in place
            view = memoryview(p.staging)
            for start, end in p.reads or [(0, len(view))]:
                p.region.read(p.offset + start, view[start:end])

    def store(self, index: int, data: bytes | memoryview) -> None:
        """Write ``data`` to the shared pool ``index`` at once (IBuffer::copyTo)."""
        for p in self._shared:
            if p.index == index:
                view = p.region.view
                if view is not None:
                    if len(data) > len(view):
                        raise InvalidArgument(f"{len(data)} bytes do not fit shared memory {p.region.name!r}")
                    view[: len(data)] = data
                else:
                    p.region.write(p.offset, memoryview(data))
                return
        raise InvalidArgument(f"pool {index} is not shared memory")

    def close(self) -> None:
        for p in self._shared:
            p.region.close()
            if self._cache is not None and p.staging is not None:
                self._cache.give_back(p.staging)
        self._shared.clear()

    def drop(self) -> None:
        """Close, and drop every buffer (results taken by ``inline_results`` keep their own
        views): a request's job held past its run, e.g. while its answer waits to be written,
        holds no pool's bytes. Not for a model's pools, which outlive their close."""
        self.close()
        self.buffers = []
        self.inline_outputs = {}


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
    writable: AbstractSet[int],
    resolve_token: TokenResolver | None = None,
    is_local_peer: bool = True,
    cache: RegionCache | None = None,
) -> BoundPools:
    """Bind every pool; ``writable`` names the pools that receive outputs. A shared pool
    gets a private staging buffer of its size (pages only its arguments' bytes touch);
    RESOURCE_EXHAUSTED_PERSISTENT when even the address space for it is refused."""
    inline = sum([p.size for p in pools if isinstance(p, InlinePool)])
    limit = wire.max_inline_bytes()
    if inline > limit:
        # Checked before anything is allocated: a declared size is only a number, and the
        # contents of inline pools have to fit one message, with its envelope, either way.
        raise InvalidArgument(
            f"the inline pools declare {inline} bytes; at most {limit} travel inline (use shared memory for more)"
        )
    bound = BoundPools(cache)
    buffers = bound.buffers
    try:
        for i, pool in enumerate(pools):
            if isinstance(pool, InlinePool):  # the common case first
                bound.data_bytes += len(bind_inline(bound, i, pool.data, pool.size, i in writable))
                continue
            where = f"pool {i}"
            if isinstance(pool, SharedMemoryPool):
                if policy is None:
                    raise InvalidArgument(f"{where}: this server accepts no shared memory pools")
                if not is_local_peer and not policy.allow_remote:
                    raise InvalidArgument(
                        f"{where}: shared memory pools are accepted only from clients on the server's host"
                    )
                region = open_region(policy, pool, where, cache)
                if region.view is not None:
                    # Sealed: the client's pages themselves, which cannot go away under us.
                    bound._shared.append(_SharedPool(i, region, pool.offset, None, i in writable))
                    buffers.append(region.view)
                    bound.data_bytes += pool.size
                    continue
                try:
                    staging = cache.staging(pool.size) if cache is not None else mmap.mmap(-1, pool.size)
                except OSError as err:
                    region.close()
                    raise ResourceExhaustedPersistent(
                        f"{where}: no private memory for a pool of {pool.size} bytes ({err.strerror})"
                    ) from None
                bound._shared.append(_SharedPool(i, region, pool.offset, staging, i in writable))
                buffers.append(memoryview(staging))  # filled by check_shared
                bound.data_bytes += pool.size
            else:
                if resolve_token is None:
                    raise InvalidArgument(f"{where}: buffer tokens are not valid here")
                buffers.append(resolve_token(pool, where))
                bound.has_tokens = True
    except BaseException:
        bound.close()
        raise
    return bound


def bind_inline(bound: BoundPools, index: int, data: PoolData, size: int, writable: bool) -> PoolData | bytearray:
    """Bind inline pool ``index`` into ``bound`` and return its buffer: an output pool
    (``writable``) a zeroed buffer of ``size`` bytes holding ``data`` (kept as the pool's
    output too), any other ``data`` itself, zero-padded to ``size`` when shorter."""
    buf: PoolData | bytearray
    if writable:
        buf = _output_buffer(data, size)
        bound.inline_outputs[index] = buf
    elif len(data) < size:
        buf = bytes(data) + bytes(size - len(data))
    else:
        buf = data
    bound.buffers.append(buf)
    return buf


def _output_buffer(data: PoolData, size: int) -> bytearray | memoryview:
    """A zeroed, writable buffer of ``size`` bytes starting with ``data`` (an inline output pool's)."""
    if size < LARGE_POOL_BYTES:
        small = bytearray(size)
        small[: len(data)] = data
        return small
    large = np.zeros(size, np.uint8)  # calloc: pages appear when written, not here
    if len(data):
        large[: len(data)] = np.frombuffer(data, np.uint8)
    return large.data


def bind_model_pools(
    pools: tuple[MemoryPool, ...], policy: SharedMemoryPolicy | None, is_local_peer: bool
) -> BoundPools:
    """A model's pools as bytes. Shared regions are copied once here: constants are read
    at every execution, and a client that shrinks its region later must not be able to
    fault the server (SIGBUS) through them."""
    bound = bind_pools(pools, policy, set(), reject_token, is_local_peer)
    if bound.has_shared:
        try:
            bound.check_shared()
            # Copied while the regions are open, so the copy never depends on what a close
            # leaves of their buffers (a request's ``drop`` empties them).
            copied: list[memoryview | bytes | bytearray] = [bytes(b) for b in bound.buffers]
        finally:
            bound.close()
        bound.buffers = copied
    return bound

"""Resolving a request's or a model's memory pools to bytes the executor can read and write.

Inline pools are message bytes (outputs get a fresh zeroed buffer: a bytearray when
small, a numpy allocation when large — its zero pages are mapped lazily, as huge pages
where the system allows, instead of faulted in 4 KiB at a time by a memset — handed
back uncopied as a read-only memoryview). Shared pools are regions a client names
(``nnhal.server.shared_regions``: the policy, opening, mapping): a sealed region is read
and written in place, any other through private staging buffers filled before the
execution and written back after it (``BoundPools``). Token pools name driver-managed
buffers (memory domains): a request's get a placeholder here that
``buffers.resolve_tokens`` fills; a model's or an IBuffer copy's are refused. Whether the
peer may name shared regions at all is the session's ``is_local``.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Sequence, Set as AbstractSet
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from nnhal.core import wire
from nnhal.core.errors import InvalidArgument, ResourceExhaustedPersistent
from nnhal.core.types import BufferTokenPool, InlinePool, MemoryPool, PoolData, RequestArgument, SharedMemoryPool
from nnhal.server.shared_regions import RegionCache, SharedMemoryPolicy, SharedRegion, open_region

if TYPE_CHECKING:
    from nnhal.core.types import OutputShape
    from nnhal.server.backend import Lane
    from nnhal.server.buffers import DriverBuffer


#: Inline output pools from this size on are numpy allocations handed back as views (see above).
LARGE_POOL_BYTES = 1 << 20


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

    # What most bindings leave as it was (a request's inline pools, on every execution's
    # path): class-level defaults, set on the instance once changed.
    _cache: RegionCache | None = None
    _loaded = False
    _stored = False
    #: Whether a shared pool is copied through a staging buffer (else every shared pool is a
    #: sealed region used in place: nothing to plan, read or write back).
    _staged = False
    #: Whether a pool names a driver-managed buffer (a token).
    has_tokens = False
    #: Bytes of the inline and shared pools (what the request itself brings).
    data_bytes = 0
    #: Of those, the shared pools' (the client's pages, or a staging buffer the session keeps
    #: or unmaps): charged as the request's data, but none of them is on the server's heap, so
    #: giving them back frees nothing a heap trim could return (``heap_bytes``).
    shared_bytes = 0

    @property
    def heap_bytes(self) -> int:
        """Bytes of the request's data on the server's heap (its inline pools' copies): what
        giving the data's charge back frees (``MemoryBudget.uncharge``'s ``freed``)."""
        return self.data_bytes - self.shared_bytes

    def __init__(self, cache: RegionCache | None = None) -> None:
        self.buffers: list[memoryview | bytes | bytearray] = []
        if cache is not None:
            self._cache = cache
        self._shared: list[_SharedPool] = []
        self.inline_outputs: dict[int, bytearray | bytes | memoryview] = {}
        #: Request output index -> driver-managed buffer receiving it.
        self.token_outputs: dict[int, DriverBuffer] = {}

    @property
    def has_shared(self) -> bool:
        return bool(self._shared)

    def plan(self, inputs: Sequence[RequestArgument], outputs: Sequence[RequestArgument]) -> None:
        """Copy only the request's arguments, not whole pools: a pool may be a large region
        whose other bytes the client keeps using during the execution. Output ranges are
        read too, so that writing one back leaves the bytes an output shorter than its
        range did not fill as they were."""
        if not self._staged:  # no pool copied: sealed regions are used in place
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
        if self._staged and not self._stored:  # else nothing to write back: inline or sealed pools
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
        # A loop, not a comprehension: on every execution's path, where a comprehension's own
        # call costs as much as the one or two pools it makes.
        results: dict[int, PoolData] = {}
        for i, b in self.inline_outputs.items():
            results[i] = b if type(b) is bytes else memoryview(b).toreadonly()
        return results

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(map(len, self.buffers))

    def check_shared(self) -> None:
        """Read the shared pools' bytes into their staging buffers, once (INVALID_ARGUMENT
        when a region shrank). Called when the execution starts, not at launch: a fenced
        execution reads what the executions it waited for wrote."""
        if self._loaded or not self._staged:  # nothing to read: inline or sealed pools, on every execution's path
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
        if self._shared:  # else nothing to close: an inline request's, on every execution's path
            self.close()
        self.buffers = []
        self.inline_outputs = {}


class LanePools(BoundPools):
    """A request's inline pools bound for a graph's lane (``backend.Lane``): each input's bytes
    (``inputs``) and each output's place (``into``), the output pools an execution answers
    with (``results``: by pool index, those places) and its output shapes. Nothing else is
    held (no buffer of its own, nothing to close): ``nnhal.server.executions.lean.Compact``
    binds them once its layout's plan is known to be bytes in and out
    (``RequestPlan.lane_io``)."""

    def __init__(
        self,
        lane: Lane,
        inputs: list[memoryview],
        into: list[memoryview],
        results: dict[int, PoolData],
        shapes: tuple[OutputShape, ...],
        data_bytes: int,
    ) -> None:  # not ``BoundPools.__init__``: none of its buffers, lists or dicts
        self.lane = lane
        self.inputs = inputs
        self.into = into
        self.results = results
        self.shapes = shapes
        self.data_bytes = data_bytes

    def close(self) -> None:
        """Nothing to close: no shared pool."""

    def drop(self) -> None:
        """Drop the views (as ``BoundPools.drop`` drops its buffers): a run held past its
        answer holds none of the rings' bytes."""
        self.inputs = self.into = []
        self.results = {}


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
    inline = 0
    for p in pools:  # a loop, not a comprehension: on every execution's path (``inline_results``)
        if isinstance(p, InlinePool):
            inline += p.size
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
                    bound.shared_bytes += pool.size
                    continue
                try:
                    staging = cache.staging(pool.size) if cache is not None else mmap.mmap(-1, pool.size)
                except OSError as err:
                    region.close()
                    raise ResourceExhaustedPersistent(
                        f"{where}: no private memory for a pool of {pool.size} bytes ({err.strerror})"
                    ) from None
                bound._shared.append(_SharedPool(i, region, pool.offset, staging, i in writable))
                bound._staged = True
                buffers.append(memoryview(staging))  # filled by check_shared
                bound.data_bytes += pool.size
                bound.shared_bytes += pool.size
            else:
                if resolve_token is None:
                    raise InvalidArgument(f"{where}: buffer tokens are not valid here")
                buffers.append(resolve_token(pool, where))
                bound.has_tokens = True
    except BaseException:
        bound.close()
        raise
    return bound


def bind_inline(
    bound: BoundPools,
    index: int,
    data: PoolData,
    size: int,
    writable: bool,
    place: memoryview | None = None,
    whole: bool = False,
) -> PoolData | bytearray:
    """Bind inline pool ``index`` into ``bound`` and return its buffer: an output pool
    (``writable``) a zeroed buffer of ``size`` bytes holding ``data`` (kept as the pool's
    output too) — ``place`` itself, zeroed, when given (a writable view of ``size`` bytes
    where the answer will carry the pool: ``fastanswer.AnswerWriter.places``), or holding
    ``data`` and what the place held when ``whole`` (the request plan's ``filled``: a
    completed execution writes every byte of the pool, and only a completed one's answer
    carries it) — any other ``data`` itself, zero-padded to ``size`` when shorter."""
    buf: PoolData | bytearray
    if writable:
        buf = _output_buffer(data, size) if place is None else _zeroed(place, data, whole)
        bound.inline_outputs[index] = buf
    elif len(data) < size:
        buf = bytes(data) + bytes(size - len(data))
    else:
        buf = data
    bound.buffers.append(buf)
    return buf


def _zeroed(place: memoryview, data: PoolData, whole: bool) -> memoryview:
    """``place`` holding ``data``, then zeros — or what it held after ``data`` when the
    execution writes it ``whole`` (``bind_inline``)."""
    n = len(data)
    if n or not whole:
        array = np.frombuffer(place, np.uint8)
        if n:
            array[:n] = np.frombuffer(data, np.uint8)
        if not whole:
            array[n:] = 0
    return place


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

"""Shared pools in the server without a server process: only the bytes the arguments
occupy cross (preadv in, pwrite out), a shrunk region is INVALID_ARGUMENT on either
side, and region files are removed only when no process holds them."""

from __future__ import annotations

import fcntl
import gc
import os
from pathlib import Path

import pytest

from nnhal.client.memory import HELD_SUFFIX
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import DataLocation, InlinePool, RequestArgument, SharedMemoryPool
from nnhal.server import memory, shared_regions
from nnhal.server.memory import bind_pools
from nnhal.server.shared_regions import RegionCache, SharedMemoryPolicy, remove_orphans


def _arg(offset: int, length: int) -> RequestArgument:
    return RequestArgument(location=DataLocation(0, offset, length))


def test_only_the_arguments_bytes_cross(tmp_path: Path) -> None:
    region = tmp_path / "nnhal-r"
    region.write_bytes(bytes(range(64)))
    cache = RegionCache()
    bound = bind_pools((SharedMemoryPool("ashmem", "nnhal-r", 0, 64),), SharedMemoryPolicy(tmp_path), {0}, cache=cache)
    bound.plan([_arg(0, 8)], [_arg(16, 8)])
    bound.check_shared()
    staging = bound.buffers[0]
    assert bytes(staging[0:8]) == bytes(range(8)) and bytes(staging[16:24]) == bytes(range(16, 24))
    assert bytes(staging[40:48]) == bytes(8)  # never read: not an argument
    staging[16:20] = b"OUT!"  # type: ignore[index]
    with open(region, "r+b") as f:  # the client keeps using the rest of its region meanwhile
        f.seek(40)
        f.write(b"client!!")
    assert bound.inline_results() == {}
    bound.close()
    data = region.read_bytes()
    assert data[16:24] == b"OUT!" + bytes(range(20, 24))  # an output shorter than its range
    assert data[40:48] == b"client!!" and data[:16] == bytes(range(16))


def test_a_models_shared_pool_is_copied_whole_before_its_region_is_closed(tmp_path: Path) -> None:
    """A model's constants in a shared region are kept as bytes of its own: the region is
    unmapped at once, but the copy stays (the close drops the region's buffers)."""
    region = tmp_path / "nnhal-m"
    region.write_bytes(bytes(range(48)))
    bound = memory.bind_model_pools((SharedMemoryPool("ashmem", "nnhal-m", 8, 32),), SharedMemoryPolicy(tmp_path), True)
    assert [bytes(b) for b in bound.buffers] == [bytes(range(8, 40))]
    region.write_bytes(bytes(48))  # the client reuses its region: the model's copy is unmoved
    assert bytes(bound.buffers[0]) == bytes(range(8, 40))
    bound.close()


@pytest.mark.parametrize("side", ["read", "write"])
def test_a_region_shrunk_after_binding_is_invalid_argument(tmp_path: Path, side: str) -> None:
    region = tmp_path / "nnhal-r"
    region.write_bytes(bytes(64))
    bound = bind_pools((SharedMemoryPool("ashmem", "nnhal-r", 0, 64),), SharedMemoryPolicy(tmp_path), {0})
    bound.plan([_arg(0, 32)], [_arg(32, 32)])
    try:
        if side == "write":
            bound.check_shared()
        os.truncate(region, 16)
        with pytest.raises(InvalidArgument, match="shrank while in use"):
            bound.check_shared() if side == "read" else bound.inline_results()
    finally:
        bound.close()
    assert region.stat().st_size == 16  # a write never grows it back


def test_region_file_suffix_is_the_clients() -> None:
    """Client and server cannot import each other; the two constants must agree."""
    assert HELD_SUFFIX == shared_regions.HELD_SUFFIX


def test_orphans_are_removed_only_when_no_process_holds_them(tmp_path: Path) -> None:
    policy = SharedMemoryPolicy(tmp_path)
    held, orphan = tmp_path / f"nnhal-held{HELD_SUFFIX}", tmp_path / f"nnhal-orphan{HELD_SUFFIX}"
    plain, foreign = tmp_path / "nnhal-plain", tmp_path / f"other-x{HELD_SUFFIX}"
    link = tmp_path / f"nnhal-link{HELD_SUFFIX}"
    for path in (held, orphan, plain, foreign):
        path.write_bytes(b"x")
    link.symlink_to(plain)
    fd = os.open(held, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        assert remove_orphans(policy) == 1
    finally:
        os.close(fd)
    assert not orphan.exists()
    assert held.exists() and plain.exists() and foreign.exists() and link.is_symlink()
    assert remove_orphans(policy) == 1  # released now
    assert not held.exists()


def test_a_session_end_sweeps_the_directory_of_every_live_policy(tmp_path: Path) -> None:
    gone = tmp_path / f"nnhal-gone{HELD_SUFFIX}"
    gone.write_bytes(b"x")
    policy = SharedMemoryPolicy(tmp_path)
    RegionCache().close()
    assert not gone.exists()
    del policy
    gc.collect()
    gone.write_bytes(b"x")
    RegionCache().close()  # no live policy names the directory any more
    assert gone.exists()


def _sealed_memfd(prefix: str, size: int) -> tuple[int, str]:
    """A client-style sealed memfd of this process and its pool name."""
    nonce = os.urandom(12).hex()
    fd = os.memfd_create(f"{prefix}{nonce}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    return fd, f"{prefix}memfd.{os.getpid()}.{fd}.{nonce}"


def _bounded(tmp_path: Path, limit: int, count: int) -> tuple[SharedMemoryPolicy, RegionCache, list[int], list[str]]:
    """A policy of prefix ``t-``, a session's cache keeping at most ``limit`` mappings, and
    ``count`` sealed memfds of 4 KiB (``_sealed_memfd``): their descriptors and pool names."""
    cache = RegionCache()
    cache.LIMIT_MAPPED = limit
    made = [_sealed_memfd("t-", 4096) for _ in range(count)]
    return SharedMemoryPolicy(tmp_path, "t-"), cache, [fd for fd, _ in made], [name for _, name in made]


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux-only")
def test_sealed_regions_are_used_in_place_and_kept_mapped_within_bounds(tmp_path: Path) -> None:
    """A sealed memfd's pool is its own pages (a write through the bound buffer is the
    client's byte, no copy back); the session keeps the mapping for the next executions,
    evicts the least recently used past its bounds, and drops them all when it ends.
    An unsealed memfd gets a private staging buffer."""
    policy, cache, fds, names = _bounded(tmp_path, 2, 3)
    try:
        for name in names:
            bound = bind_pools((SharedMemoryPool("ashmem", name, 16, 64),), policy, {0}, cache=cache)
            buf = bound.buffers[0]
            assert isinstance(buf, memoryview) and len(buf) == 64
            buf[0] = 7
            bound.inline_results()
            bound.close()
            del buf
        assert [os.pread(fd, 1, 16) for fd in fds] == [b"\x07"] * 3
        assert len(cache._mapped) == 2  # the first one evicted
        cache.close()
        assert not cache._mapped
        unsealed = os.memfd_create("t-" + "ab" * 12, os.MFD_CLOEXEC)
        fds.append(unsealed)
        os.ftruncate(unsealed, 4096)
        name = f"t-memfd.{os.getpid()}.{unsealed}.{'ab' * 12}"
        bound = bind_pools((SharedMemoryPool("ashmem", name, 0, 64),), policy, {0}, cache=cache)
        bound.check_shared()
        assert bound._shared[0].staging is not None and not cache._mapped  # copied, never mapped
        bound.close()
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux-only")
def test_the_heap_bytes_of_a_binding_are_its_inline_pools(tmp_path: Path) -> None:
    """A request's data is charged whole, but only its inline pools' copies are on the server's
    heap (``heap_bytes``, what giving the charge back frees): a shared pool's bytes are the
    client's pages (sealed) or a staging buffer the session keeps (unsealed)."""
    policy, cache, fds, names = _bounded(tmp_path, 2, 1)
    unsealed = os.memfd_create("t-" + "cd" * 12, os.MFD_CLOEXEC)
    fds.append(unsealed)
    os.ftruncate(unsealed, 4096)
    copied = f"t-memfd.{os.getpid()}.{unsealed}.{'cd' * 12}"
    try:
        pools = (
            SharedMemoryPool("ashmem", names[0], 0, 64),
            InlinePool(b"x" * 24, 24),
            SharedMemoryPool("ashmem", copied, 0, 32),
        )
        bound = bind_pools(pools, policy, {0}, cache=cache)
        assert (bound.data_bytes, bound.shared_bytes, bound.heap_bytes) == (120, 96, 24)
        bound.close()
        inline = bind_pools((InlinePool(b"y" * 16, 16),), policy, set(), cache=cache)
        assert (inline.data_bytes, inline.heap_bytes) == (16, 16)
        inline.close()
        cache.close()
    finally:
        for fd in fds:
            os.close(fd)


def _opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths ``os.open`` is asked to open from now on (still opened)."""
    opened: list[str] = []
    real = os.open

    def counting(path: str | os.PathLike[str], flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        opened.append(str(path))
        return real(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", counting)
    return opened


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux-only")
def test_a_sealed_memfd_bound_before_reuses_its_kept_mapping(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The session's next execution naming the same sealed memfd opens nothing: ``/proc``
    shows the client holds that memfd still, and its kept mapping is the pool (another range
    of it too). A range outside the file is refused as the first time."""
    policy = SharedMemoryPolicy(tmp_path, "t-")
    cache = RegionCache()
    fd, name = _sealed_memfd("t-", 4096)
    try:
        first = bind_pools((SharedMemoryPool("ashmem", name, 0, 64),), policy, {0}, cache=cache)
        first.close()
        opened = _opens(monkeypatch)
        for offset in (0, 128):
            bound = bind_pools((SharedMemoryPool("ashmem", name, offset, 64),), policy, {0}, cache=cache)
            buf = bound.buffers[0]
            assert isinstance(buf, memoryview)
            buf[1] = offset + 1
            bound.inline_results()
            bound.close()
            del buf
            assert os.pread(fd, 1, offset + 1) == bytes([offset + 1])
        assert opened == []  # no descriptor opened: the kept mapping
        with pytest.raises(InvalidArgument, match="outside"):
            bind_pools((SharedMemoryPool("ashmem", name, 4064, 64),), policy, {0}, cache=cache)
        assert len(cache._mapped) == 1
    finally:
        cache.close()
        os.close(fd)
    assert not cache._named


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux-only")
def test_a_released_memfd_is_refused_though_its_mapping_is_kept(tmp_path: Path) -> None:
    """A region the client released (its descriptor closed) is refused while the session still
    keeps its mapping, as when nothing was kept; so is its old name once another memfd got its
    descriptor's number, and the new memfd's own name is that memfd, not the kept one."""
    policy = SharedMemoryPolicy(tmp_path, "t-")
    cache = RegionCache()
    fd, name = _sealed_memfd("t-", 4096)
    try:
        bind_pools((SharedMemoryPool("ashmem", name, 0, 64),), policy, {0}, cache=cache).close()
        os.close(fd)
        with pytest.raises(InvalidArgument, match="cannot open the client's memfd"):
            bind_pools((SharedMemoryPool("ashmem", name, 0, 64),), policy, {0}, cache=cache)
        again, renamed = _sealed_memfd("t-", 4096)
        assert again == fd  # the lowest free number: the released one's
        try:
            with pytest.raises(InvalidArgument, match="does not name a live memfd"):
                bind_pools((SharedMemoryPool("ashmem", name, 0, 64),), policy, {0}, cache=cache)
            bound = bind_pools((SharedMemoryPool("ashmem", renamed, 0, 64),), policy, {0}, cache=cache)
            buf = bound.buffers[0]
            assert isinstance(buf, memoryview)
            buf[0] = 9
            bound.close()
            del buf
            assert os.pread(again, 1, 0) == b"\x09" and len(cache._mapped) == 2
        finally:
            os.close(again)
    finally:
        cache.close()


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux-only")
def test_an_evicted_mapping_forgets_its_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the bounds the least recently used mapping goes with the names that found it: its
    next execution opens and checks the memfd again (and maps it anew)."""
    policy, cache, fds, names = _bounded(tmp_path, 1, 2)
    try:
        for name in names:
            bind_pools((SharedMemoryPool("ashmem", name, 0, 64),), policy, {0}, cache=cache).close()
        assert list(cache._named) == [names[1]]
        opened = _opens(monkeypatch)
        bind_pools((SharedMemoryPool("ashmem", names[0], 0, 64),), policy, {0}, cache=cache).close()
        assert len(opened) == 1 and opened[0].startswith("/proc/")
        assert list(cache._named) == [names[0]]
    finally:
        cache.close()
        for fd in fds:
            os.close(fd)

"""Freed memory goes back to the kernel (glibc malloc_trim), rate-limited."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from nnhal.server import host_memory
from nnhal.server.budget import MemoryBudget
from nnhal.server.memory_release import Releaser

HAS_TRIM = hasattr(ctypes.CDLL(None), "malloc_trim")


@pytest.mark.skipif(not HAS_TRIM, reason="no glibc malloc_trim on this platform")
def test_a_trim_follows_enough_released_bytes_at_most_once_per_interval() -> None:
    r = Releaser(after_bytes=100, interval_s=3600)
    r.released(99)
    assert r.trims == 0
    r.released(1)
    assert r.trims == 1
    r.released(1000)  # within the interval: no second trim
    assert r.trims == 1
    assert r.trim_now() and r.trims == 2


def test_the_budget_tells_its_releaser_what_it_gives_back() -> None:
    b = MemoryBudget()
    seen: list[int] = []
    b.releaser.released = seen.append  # type: ignore[method-assign]
    b.open_session("s")
    b.charge("s", 10)
    b.uncharge("s", 4)
    b.charge_working(7, "execution tensors")
    b.uncharge_working(7, "execution tensors")
    assert b.close_session("s") == 6
    assert seen == [4, 7, 6]


def test_the_default_total_follows_the_cgroup_limit_else_physical_memory(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    assert host_memory.cgroup_limit((v2, v1)) is None  # no cgroup files
    v2.write_text("max\n")
    assert host_memory.cgroup_limit((v2, v1)) is None
    v2.write_text("536870912\n")
    assert host_memory.cgroup_limit((v2, v1)) == 512 << 20
    v2.unlink()
    v1.write_text("9223372036854771712\n")  # cgroup v1's "no limit"
    assert host_memory.cgroup_limit((v2, v1)) is None
    physical = host_memory.physical_memory()
    assert physical is not None and physical > 0
    usable = host_memory.usable_memory()
    assert usable is not None and usable <= physical
    assert host_memory.default_memory_total() == int(usable * host_memory.DEFAULT_SHARE)

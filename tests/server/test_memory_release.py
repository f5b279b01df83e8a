"""Freed memory goes back to the kernel (glibc malloc_trim), off the calls' threads, once the
releases pause or within a bound."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nnhal.server import host_memory
from nnhal.server.budget import MemoryBudget
from nnhal.server.memory_release import Releaser

HAS_TRIM = hasattr(ctypes.CDLL(None), "malloc_trim")


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < end:
        time.sleep(0.01)
    return predicate()


def _recorder(full: list[bool] | None = None) -> tuple[list[str], Callable[[bool], None]]:
    """The names of the threads that trimmed, and the trim recording them (instead of trimming)
    and, in ``full``, whether each collection was full."""
    seen: list[str] = []

    def trim(whole: bool) -> None:
        seen.append(threading.current_thread().name)
        if full is not None:
            full.append(whole)

    return seen, trim


@pytest.mark.skipif(not HAS_TRIM, reason="no glibc malloc_trim on this platform")
def test_a_trim_follows_enough_released_bytes_once_the_releases_pause_off_the_callers_thread() -> None:
    full: list[bool] = []
    trims_seen, trim = _recorder(full)
    r = Releaser(after_bytes=100, quiet_s=0.05, max_hold_s=3600, trim=trim)
    r.released(99)
    assert not r.trimming  # not enough to be worth a trim
    r.released(1)
    assert _wait_for(lambda: r.trims == 1)
    assert trims_seen == ["nnhal-trim"]  # never on the releasing thread
    assert full == [True]  # the releases paused: a full collection
    assert _wait_for(lambda: not r.trimming)  # nothing pending: the trimmer ended
    r.released(1000)  # a new round
    assert _wait_for(lambda: r.trims == 2)
    assert _wait_for(lambda: not r.trimming)
    assert r.trim_now() and r.trims == 3 and trims_seen[-1] == threading.current_thread().name


@pytest.mark.skipif(not HAS_TRIM, reason="no glibc malloc_trim on this platform")
def test_steady_releases_are_trimmed_within_the_hold_bound() -> None:
    """Releases that never pause (a busy server) do not postpone the trim past ``max_hold_s``."""
    full: list[bool] = []
    trims_seen, trim = _recorder(full)
    r = Releaser(after_bytes=100, quiet_s=3600, max_hold_s=0.05, trim=trim)
    r.released(100)
    end = time.monotonic() + 10
    while r.trims == 0 and time.monotonic() < end:
        r.released(1)  # never quiet
        time.sleep(0.005)
    assert r.trims >= 1 and trims_seen[0] == "nnhal-trim"
    # Cut short by the bound, calls waiting: the young generations only, no full collection
    # (a stall of every call in progress).
    assert full[0] is False
    assert _wait_for(lambda: not r.trimming)


@pytest.mark.skipif(not HAS_TRIM, reason="no glibc malloc_trim on this platform")
def test_bytes_released_while_trimming_get_a_trim_of_their_own() -> None:
    calls: list[int] = []

    def trim(_full: bool) -> None:
        calls.append(1)
        if len(calls) == 1:
            r.released(500)  # released during the first trim: the trimmer is still armed

    r = Releaser(after_bytes=100, quiet_s=0.01, max_hold_s=3600, trim=trim)
    r.released(100)
    assert _wait_for(lambda: r.trims == 2)
    assert _wait_for(lambda: not r.trimming)
    assert len(calls) == 2


def test_the_budget_tells_its_releaser_what_it_gives_back() -> None:
    b = MemoryBudget()
    seen: list[tuple[str, int]] = []
    b.releaser.released = lambda nbytes: seen.append(("released", nbytes))  # type: ignore[method-assign]
    b.releaser.session_closed = lambda nbytes: seen.append(("closed", nbytes))  # type: ignore[method-assign]
    b.open_session("s")
    b.charge("s", 10)
    b.uncharge("s", 4)
    b.charge_working(7, "execution tensors")
    b.uncharge_working(7, "execution tensors")
    assert b.close_session("s") == 6
    assert seen == [("released", 4), ("released", 7), ("closed", 6)]


@pytest.mark.skipif(not HAS_TRIM, reason="no glibc malloc_trim on this platform")
def test_a_closed_session_is_followed_by_a_trim_whatever_it_held() -> None:
    """What a session held outside the budget (its connection's buffers) is freed with it."""
    trims_seen, trim = _recorder()
    r = Releaser(after_bytes=1 << 30, quiet_s=0.01, max_hold_s=3600, trim=trim)
    r.released(100)
    r.session_closed(0)
    assert _wait_for(lambda: r.trims == 1) and trims_seen == ["nnhal-trim"]
    assert _wait_for(lambda: not r.trimming)


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

"""Large copies shared with helper threads (nnhal.server.large_copy): every byte copied whatever
the size and the load, an error of any chunk raised to the caller, helpers only on a machine
with a core to spare, and no helper left once the copies stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from nnhal.core import large_copy


class _Load:
    def __init__(self, spare: bool) -> None:
        self.spare_now = spare

    def spare(self) -> bool:
        return self.spare_now


def _helper_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nnhal-copy" and t.is_alive()]


def _wait_helpers_gone() -> None:
    deadline = time.monotonic() + 5.0
    while (large_copy.helpers_alive() or _helper_threads()) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert large_copy.helpers_alive() == 0
    assert not _helper_threads()


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Load]:
    """A machine with a core to spare (the test may make it busy), helpers idle for 50 ms at most."""
    gauge = _Load(True)
    monkeypatch.setattr(large_copy, "LOAD", gauge)
    monkeypatch.setattr(large_copy, "IDLE_S", 0.05)
    monkeypatch.setattr(large_copy, "_HELPERS", large_copy._Helpers(1))
    yield gauge
    _wait_helpers_gone()


def _pair(nbytes: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    src = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
    return src, np.zeros(nbytes, np.uint8)


@pytest.mark.parametrize(
    "nbytes",
    [0, 1, large_copy.THRESHOLD - 1, large_copy.THRESHOLD, large_copy.THRESHOLD + large_copy.CHUNK // 2 + 3],
)
def test_every_byte_is_copied(load: _Load, nbytes: int) -> None:
    src, dst = _pair(nbytes)
    large_copy.copy(dst, src)
    assert np.array_equal(dst, src)


def test_repeated_copies_reuse_the_helper_and_stay_exact(load: _Load) -> None:
    for seed in range(4):
        src, dst = _pair(large_copy.THRESHOLD + 4096, seed)
        large_copy.copy(dst, src)
        assert np.array_equal(dst, src)
    assert large_copy.helpers_alive() <= 1


def test_a_busy_machine_copies_on_the_calling_thread(load: _Load) -> None:
    load.spare_now = False
    src, dst = _pair(large_copy.THRESHOLD + 1)
    large_copy.copy(dst, src)
    assert np.array_equal(dst, src)
    assert large_copy.helpers_alive() == 0
    assert not _helper_threads()


def test_an_error_reaches_the_caller_and_the_helper_serves_on(load: _Load) -> None:
    src, dst = _pair(large_copy.THRESHOLD)
    dst.flags.writeable = False
    with pytest.raises(ValueError):
        large_copy.copy(dst, src)
    src, dst = _pair(large_copy.THRESHOLD, 1)
    large_copy.copy(dst, src)
    assert np.array_equal(dst, src)


def test_helpers_end_once_idle(load: _Load) -> None:
    src, dst = _pair(large_copy.THRESHOLD)
    large_copy.copy(dst, src)
    _wait_helpers_gone()
    # A copy after they ended starts one again.
    large_copy.copy(dst, src[::-1].copy())
    assert np.array_equal(dst, src[::-1])


def test_concurrent_copies_share_the_helpers_and_leave_no_job_behind(
    load: _Load, monkeypatch: pytest.MonkeyPatch
) -> None:
    helpers = large_copy._Helpers(2)
    monkeypatch.setattr(large_copy, "_HELPERS", helpers)
    failures: list[str] = []

    def copies(seed: int) -> None:
        for k in range(3):
            src, dst = _pair(large_copy.THRESHOLD + 4096 * seed, seed * 10 + k)
            large_copy.copy(dst, src)
            if not np.array_equal(dst, src):
                failures.append(f"copier {seed}, copy {k}")

    threads = [threading.Thread(target=copies, args=(seed,)) for seed in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30.0)
    assert not failures
    assert helpers.alive <= 2
    # Every job handed out goes to a helper that takes it (one may still be waking up).
    deadline = time.monotonic() + 5.0
    while not helpers._jobs.empty() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert helpers._jobs.empty()

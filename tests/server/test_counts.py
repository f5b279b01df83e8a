"""The lock-free event counts (``nnhal.server.counts``) and the lifecycle's count of work on them."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from nnhal.core.errors import DeviceUnavailable
from nnhal.server.counts import Counter
from nnhal.server.lifecycle import Lifecycle


def _on_threads(work: Callable[[], None], n: int = 4) -> None:
    """``work`` on ``n`` threads at once, until each returned."""
    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_counter_counts_every_increment_across_threads() -> None:
    counter = Counter()
    assert counter.value == 0

    def bump() -> None:
        for _ in range(20_000):
            counter.increment()

    _on_threads(bump)
    assert counter.value == 80_000
    assert counter.value == 80_000  # reading takes nothing


def test_lifecycle_counts_work_from_enter_to_leave() -> None:
    life = Lifecycle()
    life.enter("an execution")
    life.enter("an execution")
    assert life.active == 2
    life.leave()
    assert life.active == 1
    with life.work("a preparation"):
        assert life.active == 2
    assert life.active == 1
    life.leave()
    assert life.active == 0


def test_lifecycle_refuses_work_while_draining_and_counts_none_of_it() -> None:
    life = Lifecycle()
    life.enter("an execution")
    assert life.begin_drain()
    with pytest.raises(DeviceUnavailable, match="draining"):
        life.enter("an execution")
    assert life.active == 1  # the refused work was not left counted
    life.leave()
    assert life.active == 0


def test_lifecycle_counts_stay_exact_across_threads() -> None:
    life = Lifecycle()

    def work() -> None:
        for _ in range(10_000):
            life.enter("an execution")
            life.leave()

    _on_threads(work)
    assert life.active == 0

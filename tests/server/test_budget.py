"""Memory accounting per session and in total (nnhal.server.budget)."""

from __future__ import annotations

import threading

import pytest

from nnhal.core.errors import InvalidArgument, ResourceExhaustedPersistent, ResourceExhaustedTransient
from nnhal.server.budget import EXECUTION_TENSORS, MemoryBudget


def _budget(per_client: int = 0, total: int = 0, sessions: tuple[str, ...] = ("a", "b")) -> MemoryBudget:
    budget = MemoryBudget(per_client, total)
    for s in sessions:
        budget.open_session(s)
    return budget


def test_unlimited_by_default() -> None:
    budget = _budget()
    budget.charge("a", 1 << 40)
    assert budget.used("a") == 1 << 40 and budget.total == 1 << 40


def test_per_client_limit_transient_then_persistent() -> None:
    budget = _budget(per_client=100)
    budget.charge("a", 60)
    with pytest.raises(ResourceExhaustedTransient, match="already uses 60 of its 100"):
        budget.charge("a", 50)
    budget.charge("b", 50)  # another client has its own allowance
    with pytest.raises(ResourceExhaustedPersistent, match="more than the server's limits"):
        budget.charge("b", 101)
    budget.uncharge("a", 60)
    budget.charge("a", 100)  # fits once memory came back
    assert budget.used("a") == 100 and budget.total == 150


def test_total_limit_across_clients() -> None:
    budget = _budget(total=100)
    budget.charge("a", 70)
    with pytest.raises(ResourceExhaustedTransient, match="30 of 100 free"):
        budget.charge("b", 40)
    with pytest.raises(ResourceExhaustedPersistent):
        budget.charge("b", 101)
    assert budget.used("b") == 0 and budget.total == 70


def test_failed_charge_takes_nothing() -> None:
    budget = _budget(per_client=10, total=15)
    budget.charge("a", 10)
    for nbytes in (1, 11):
        with pytest.raises((ResourceExhaustedTransient, ResourceExhaustedPersistent)):
            budget.charge("a", nbytes)
    assert budget.used("a") == 10 and budget.total == 10


def test_closing_a_session_gives_everything_back() -> None:
    budget = _budget(per_client=100)
    budget.charge("a", 40)
    budget.charge("b", 5)
    assert budget.close_session("a") == 40
    assert budget.total == 5
    budget.uncharge("a", 40)  # a late give-back of a closed session is ignored
    assert budget.total == 5
    with pytest.raises(InvalidArgument, match="closed session"):
        budget.charge("a", 1)
    with pytest.raises(InvalidArgument):
        budget.charge("never-opened", 0)
    assert budget.close_session("a") == 0


def test_account_charges_growth_and_gives_back_shrinkage() -> None:
    budget = _budget(per_client=100)
    budget.account("a", 30, "buffer contents")
    budget.account("a", 0, "buffer contents")
    budget.account("a", -10, "buffer contents")
    assert budget.used("a") == 20
    with pytest.raises(ResourceExhaustedTransient, match="buffer contents need 81 bytes"):
        budget.account("a", 81, "buffer contents")


def test_concurrent_charges_never_exceed_the_total() -> None:
    budget = _budget(total=1000, sessions=tuple(f"s{n}" for n in range(4)))
    granted = [0] * 4

    def work(n: int) -> None:
        for _ in range(500):
            try:
                budget.charge(f"s{n}", 3)
                granted[n] += 3
            except ResourceExhaustedTransient:
                pass

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    assert budget.total == sum(granted) <= 1000
    assert [budget.used(f"s{n}") for n in range(4)] == granted


def test_a_session_alone_may_use_all_but_the_reserve_kept_for_a_newcomer() -> None:
    b = MemoryBudget(total=800)  # reserve: 100
    b.open_session("a")
    b.open_session("b")
    b.charge("a", 700)
    with pytest.raises(ResourceExhaustedTransient, match="fair share"):
        b.charge("a", 1)
    b.charge("b", 100)  # the newcomer finds its room
    assert b.total == 800


def test_the_last_of_the_total_is_kept_for_sessions_below_their_fair_share() -> None:
    """Issue #24: one client sitting on memory cannot shut a newcomer out."""
    b = MemoryBudget(total=800)  # reserve: 100
    for s in ("hog", "small", "new"):
        b.open_session(s)
    b.charge("hog", 600)
    b.charge("small", 50)  # 650 of 800: the reserve (701..800) is not reached yet
    with pytest.raises(ResourceExhaustedTransient, match="fair share"):
        b.charge("hog", 100)  # 750 > 700 and the hog is far above 800 / 2
    b.charge("new", 100)  # the newcomer (share 800 / 3) takes the reserve
    assert b.total == 750
    b.uncharge("hog", 600)
    b.charge("hog", 50)  # back below its share: allowed again
    assert b.total == 200


def test_nothing_to_keep_is_never_refused_for_the_reserve() -> None:
    """A small answer charges no transport copies (0 bytes): refusing it once the total is
    past the reserve failed small executions of a victim while attackers filled the total."""
    b = MemoryBudget(total=800)  # reserve: 100
    b.charge_working(700, "results waiting to be written", keep_reserve=True)
    b.charge_working(0, "results waiting to be written", keep_reserve=True)
    with pytest.raises(ResourceExhaustedTransient):
        b.charge_working(1, "results waiting to be written", keep_reserve=True)
    assert b.total == 700


def test_bytes_by_kind_are_summed_over_the_sessions_and_the_working_charges() -> None:
    budget = MemoryBudget(total=1000)
    budget.open_session("a")
    budget.open_session("b")
    budget.charge("a", 10, "request data")
    budget.charge("b", 20, "request data")
    budget.charge("b", 5, "model constants")
    budget.charge_working(7, EXECUTION_TENSORS)
    assert budget.by_kind() == {"request data": 30, "model constants": 5, EXECUTION_TENSORS: 7}
    budget.uncharge_working(7, EXECUTION_TENSORS)
    budget.close_session("b")  # its kinds stay reported, at what the open sessions hold
    assert budget.by_kind() == {"request data": 10, "model constants": 0, EXECUTION_TENSORS: 0}
    budget.uncharge("a", 10, "request data")
    assert budget.by_kind() == {"request data": 0, "model constants": 0, EXECUTION_TENSORS: 0}
    assert budget.total == 0


def test_the_total_less_its_reserve_is_taken_without_the_share_and_one_byte_more_is_checked() -> None:
    budget = _budget(total=800)  # a reserve of 100
    budget.charge("a", 700)  # up to the total less the reserve: no share asked
    assert budget.total == 700 and budget.used("a") == 700
    with pytest.raises(ResourceExhaustedTransient, match="past its fair share"):
        budget.charge("a", 1)
    budget.charge("b", 100)  # below its share: the reserve is its
    with pytest.raises(ResourceExhaustedTransient, match="free"):
        budget.charge("b", 1)  # past the total
    assert budget.total == 800 and budget.by_kind() == {"model constants": 800}


def test_opening_an_open_session_again_keeps_its_account() -> None:
    budget = _budget(sessions=("a",))
    budget.charge("a", 10, "request data")
    budget.open_session("a")
    assert budget.used("a") == 10 and budget.by_kind() == {"request data": 10}
    assert budget.close_session("a") == 10
    assert budget.used("a") == 0 and budget.by_kind() == {"request data": 0}


def test_an_uncharge_counts_only_the_bytes_it_freed_towards_a_trim() -> None:
    """Bytes that were never on the heap (a shared pool's) are given back to the accounts but
    not counted towards a heap trim: a trim would find nothing to return."""
    budget = _budget()
    budget.releaser.after_bytes = 1 << 40  # counted, never due in this test
    budget.charge("a", 1000, "request data")
    budget.uncharge("a", 600, "request data", freed=0)
    assert budget.used("a") == 400 and budget.releaser._pending == 0
    budget.uncharge("a", 400, "request data", freed=100)
    assert budget.used("a") == 0 and budget.releaser._pending == 100
    budget.charge("a", 50)
    budget.uncharge("a", 50)  # by default every byte given back was freed
    assert budget.releaser._pending == 150

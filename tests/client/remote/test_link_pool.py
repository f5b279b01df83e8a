"""Which of a session's same-host queue links are open and free (``link_pool.LinkPool``)."""

from __future__ import annotations

import pytest

from nnhal.client.remote import link_pool
from nnhal.client.remote.link_pool import BACKOFF_S, IDLE_S, MAX_LINKS, LinkPool
from nnhal.core.errors import GeneralFailure, ResourceExhaustedTransient


def test_a_call_takes_a_free_link_else_opens_one_up_to_the_cap() -> None:
    pool: LinkPool[str] = LinkPool()
    assert pool.take(0.0) == (None, True)  # none yet: open one
    assert pool.opened("a", max_queues=2)
    assert pool.cap == 2
    assert pool.take(0.0) == (None, True)  # "a" is busy: open a second
    assert pool.opened("b", max_queues=2)
    assert pool.take(0.0) == (None, False)  # at the cap: gRPC
    pool.give_back("a", 1.0)
    pool.give_back("b", 2.0)
    assert pool.take(3.0) == ("b", False)  # the latest given back first
    assert pool.take(3.0) == ("a", False)


def test_calls_starting_together_each_open_one_until_the_server_says_its_cap() -> None:
    pool: LinkPool[str] = LinkPool()
    assert [pool.take(0.0)[1] for _ in range(3)] == [True, True, True]
    assert pool.opening == 3 and pool.cap == MAX_LINKS
    assert pool.opened("a", max_queues=0)  # not said: the server's refusal is the cap
    assert pool.cap == MAX_LINKS
    assert pool.opened("b", max_queues=16)
    assert pool.cap == 16


def test_the_first_refusal_is_final_and_a_later_one_pauses_opening() -> None:
    refused: LinkPool[str] = LinkPool()
    refused.take(0.0)
    refused.failed(GeneralFailure("this server does not offer the fast path"), 0.0)
    assert refused.refused and refused.take(100.0) == (None, False)

    pool: LinkPool[str] = LinkPool()
    pool.take(0.0)
    pool.opened("a", 4)
    pool.take(0.0)
    pool.failed(ResourceExhaustedTransient("the cap per session is 1"), 10.0)
    assert not pool.refused and pool.refusals == 1
    assert pool.take(10.0 + BACKOFF_S / 2) == (None, False)  # paused
    assert pool.take(10.0 + BACKOFF_S) == (None, True)  # then asks again


def test_a_transient_refusal_of_the_first_link_is_not_final() -> None:
    pool: LinkPool[str] = LinkPool()
    pool.take(0.0)
    pool.failed(ResourceExhaustedTransient("the session's memory is full"), 0.0)
    assert not pool.refused
    assert pool.take(BACKOFF_S) == (None, True)


def test_a_dropped_link_is_forgotten_and_never_given_back() -> None:
    pool: LinkPool[str] = LinkPool()
    pool.take(0.0)
    pool.opened("a", 4)
    assert pool.drop("a") and not pool.drop("a")
    pool.give_back("a", 1.0)
    assert pool.links == [] and pool.take(1.0) == (None, True)


def test_planned_calls_take_a_free_link_that_fits() -> None:
    pool: LinkPool[str] = LinkPool()
    for name in "ab":
        pool.take(0.0)
        pool.opened(name, 4)
    pool.give_back("a", 1.0)
    pool.give_back("b", 2.0)

    def fits(link: str, planned: str, handle: str) -> int:
        return int(link == planned)

    assert pool.take_idle(fits, "a", "") == "a"
    assert pool.take_idle(fits, "a", "") is None
    assert pool.take(3.0) == ("b", False)


def test_extra_links_unused_for_a_while_go_and_one_always_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    pool: LinkPool[str] = LinkPool()
    for name in "abc":
        pool.take(0.0)
        pool.opened(name, 4)
    assert pool.extras
    for t, name in enumerate("abc"):
        pool.give_back(name, float(t))
    assert pool.stale(1.0 + IDLE_S / 2) == []
    assert pool.stale(1.0 + IDLE_S) == ["a", "b"]  # "c" stays, the last link
    assert pool.links == ["c"] and not pool.extras
    monkeypatch.setattr(link_pool, "IDLE_S", 0.0)
    assert pool.stale(1e9) == []


def test_a_closed_pool_opens_nothing_more() -> None:
    pool: LinkPool[str] = LinkPool()
    pool.take(0.0)
    pool.opened("a", 4)
    pool.take(0.0)
    assert pool.close() == ["a"]
    assert not pool.opened("b", 4)  # the caller closes it
    assert pool.take(0.0) == (None, False)

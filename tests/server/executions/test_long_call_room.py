"""Work-conserving fair shares of the long-lived calls (issue #24): when the total is full and
a client below its fair share asks, the newest call that can be ended of the client furthest
above its share is ended and its place given, instead of refusing the newcomer."""

from __future__ import annotations

from functools import partial

import pytest

from nnhal.core.errors import ResourceExhaustedTransient
from nnhal.server.executions.long_calls import QUEUE, LongCalls


def test_a_newcomer_below_its_share_ends_the_newest_call_of_the_client_furthest_above() -> None:
    calls = LongCalls({"burst": 100, "preparation": 100}, total=16)  # reserve: 2
    ended: list[str] = []
    # Many clients each below its share when it entered fill the total.
    for k in range(9):
        calls.enter("burst", "hog", partial(ended.append, f"hog {k}"))
    for k in range(7):
        calls.enter("burst", f"small{k}", partial(ended.append, f"small{k}"))
    assert calls.in_progress == 16
    leave = calls.open("preparation", "newcomer")  # 0 held, below its share of 16 / 9
    assert ended == ["hog 8"] and calls.evicted == 1  # the hog's newest burst, not the others'
    assert calls.in_progress == 16 and calls.held("burst", "hog") == 8
    calls.leave("burst", "hog")  # the ended burst's own leave, when its stream ends, counts nothing twice
    assert calls.held("burst", "hog") == 7 and calls.in_progress == 15
    leave()
    assert calls.in_progress == 14


def test_nothing_is_ended_for_a_client_above_its_share_or_while_there_is_room() -> None:
    calls = LongCalls({"burst": 100}, total=8)  # reserve: 1
    ended: list[int] = []
    for k in range(4):
        calls.enter("burst", "a", partial(ended.append, k))
    calls.enter("burst", "b", lambda: ended.append(-1))  # room left: nothing ended
    for _ in range(2):
        calls.enter("burst", "b")
    assert ended == [] and calls.in_progress == 7
    with pytest.raises(ResourceExhaustedTransient, match="fair share"):
        calls.enter("burst", "b")  # b (3) is at its share (8 // 3 = 2): refused the reserve
    calls.enter("burst", "c")  # below its share: the reserve
    with pytest.raises(ResourceExhaustedTransient, match="the cap is 8"):
        calls.enter("burst", "b")  # full, and b above its share: refused, nothing ended
    assert ended == []


def test_calls_that_cannot_be_ended_are_never_chosen() -> None:
    calls = LongCalls({"preparation": 100}, total=8)
    for _ in range(7):
        calls.enter("preparation", "a")  # no way to end them early
    calls.enter("preparation", "b")
    with pytest.raises(ResourceExhaustedTransient, match="the cap is 8"):
        calls.enter("preparation", "c")


def test_same_host_queues_have_caps_of_their_own_outside_the_total() -> None:
    """A session's queue holds no thread while idle: it takes no place of the long-call total
    (a full total refuses no queue, many queues refuse no preparation), only its own caps."""
    calls = LongCalls({"burst": 100, QUEUE: 2, "preparation": 100}, total=8, own_totals={QUEUE: 3})
    leaves = [calls.open(QUEUE, f"s{k}") for k in range(3)]
    assert calls.in_progress == 0
    with pytest.raises(ResourceExhaustedTransient, match="3 same-host queues open"):
        calls.enter(QUEUE, "s3")
    for _ in range(7):  # the total (less its reserve) is the other kinds' alone
        calls.enter("preparation", "p")
    leaves[0]()
    second = calls.open(QUEUE, "s1")  # room again; the session's second
    with pytest.raises(ResourceExhaustedTransient, match="cap per session is 2"):
        calls.enter(QUEUE, "s1")
    second()
    for leave in leaves:
        leave()  # leaving twice counts nothing twice
    assert calls.held(QUEUE, "s1") == 0 and calls.in_progress == 7

"""``Afterwards``: the work left for after an answer runs in order, guarded, never dropped."""

from __future__ import annotations

import logging

import pytest

from nnhal.server.executions.afterwards import Afterwards


def test_the_work_runs_in_order_once_and_a_failure_does_not_stop_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    after = Afterwards()
    ran: list[int] = []

    def fails() -> None:
        ran.append(2)
        raise RuntimeError("the test's failure")

    after.defer(lambda: ran.append(1))
    after.defer(fails)
    after.defer(lambda: ran.append(3))
    assert len(after) == 3
    with caplog.at_level(logging.ERROR):
        after.run()
    assert ran == [1, 2, 3] and len(after) == 0
    assert "work left for after an answer failed" in caplog.text
    after.run()  # nothing waits: nothing runs again
    assert ran == [1, 2, 3]


def test_work_added_while_it_runs_runs_too() -> None:
    after = Afterwards()
    ran: list[str] = []
    after.defer(lambda: after.defer(lambda: ran.append("added")))
    after.run()
    assert ran == ["added"] and len(after) == 0


def test_what_an_interrupt_leaves_unrun_runs_next_time() -> None:
    after = Afterwards()
    ran: list[int] = []

    def interrupted() -> None:
        ran.append(1)
        raise KeyboardInterrupt

    after.defer(interrupted)
    after.defer(lambda: ran.append(2))
    with pytest.raises(KeyboardInterrupt):
        after.run()
    assert ran == [1] and len(after) == 1  # the one that ran is not run again
    after.run()
    assert ran == [1, 2] and len(after) == 0

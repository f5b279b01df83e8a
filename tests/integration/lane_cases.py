"""What the lane tests (``test_litert_lane``, ``test_cpu_lane``) ask of a call the lane does not
take: its outcome, the request data refused, the refusals' statuses."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError, ResourceExhaustedTransient
from nnhal.server.budget import MemoryBudget
from nnhal.server.executions import lean

_MISSED = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)


def outcome(run: Callable[[], Any]) -> tuple[ErrorStatus, str]:
    """A call's status and the name of what it raised (NONE and "" when it answered)."""
    try:
        run()
    except HalError as err:
        return err.error_status, type(err).__name__
    return ErrorStatus.NONE, ""


@contextmanager
def request_data_refused(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The request's data over what the budget has, while in the block: refused as over a limit
    (the session's standing charge, ``lean.Standing``, covering no call: every call charges)."""
    real_charge = MemoryBudget.charge

    def full(self: MemoryBudget, session: str, nbytes: int, what: str = "model constants") -> None:
        if what == lean.REQUEST_DATA:
            raise ResourceExhaustedTransient("request data over the test's limit")
        real_charge(self, session, nbytes, what)

    with monkeypatch.context() as m:
        m.setattr(MemoryBudget, "charge", full)
        m.setattr(lean.Standing, "covers", lambda self, session, nbytes: False)
        yield


def check_refusals(seen: dict[str, tuple[ErrorStatus, str]]) -> None:
    """A deadline passed and one missed while running: a missed deadline; data over a limit:
    RESOURCE_EXHAUSTED_TRANSIENT."""
    assert seen["passed"][0] in _MISSED
    assert seen["over"] == (ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, "ResourceExhaustedTransient")
    assert seen["missed"][0] in _MISSED


def answered_alike(cases: Callable[[bool], dict[str, tuple[ErrorStatus, str]]], no_lane: Callable[[], None]) -> None:
    """``cases(True)`` with the lane, then ``cases(False)`` once ``no_lane()`` took it away (the
    full path's answers): the same outcomes."""
    with_lane = cases(True)
    no_lane()
    assert cases(False) == with_lane

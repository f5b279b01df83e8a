"""nnhal.core.errors: one HalError class per ErrorStatus, found by status, with the
transient flag the HAL gives each code."""

from __future__ import annotations

import pytest

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError

FAILURES = [s for s in ErrorStatus if s != ErrorStatus.NONE]
TRANSIENT = {
    ErrorStatus.DEVICE_UNAVAILABLE,
    ErrorStatus.MISSED_DEADLINE_TRANSIENT,
    ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
    ErrorStatus.DEAD_OBJECT,
}


@pytest.mark.parametrize("status", FAILURES, ids=lambda s: s.name)
def test_every_failure_status_has_its_own_class(status: ErrorStatus) -> None:
    err = HalError.of(status, "why")
    assert type(err) is not HalError and type(err).status == status
    assert err.error_status == status and err.message == "why"
    assert str(err) == f"{status.name}: why"
    assert err.transient == (status in TRANSIENT)


def test_a_status_without_a_class_keeps_its_status() -> None:
    err = HalError.of(ErrorStatus.NONE, "odd")
    assert type(err) is HalError and err.error_status == ErrorStatus.NONE
    assert str(HalError.of(ErrorStatus.GENERAL_FAILURE)) == "GENERAL_FAILURE"

"""ExecutionOutcome: a result read as an outcome, and its status raised as the HalError."""

from __future__ import annotations

import pytest

from nnhal.client.outcome import ExecutionOutcome
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import OutputInsufficientSize
from nnhal.core.types import ExecutionResult, OperationProfile, OutputShape


def test_of_keeps_every_field_of_the_result() -> None:
    shapes = (OutputShape((2, 4), True),)
    result = ExecutionResult(
        ErrorStatus.NONE, "", shapes, output_pools={1: b"xy"}, profile=(OperationProfile("ADD", 2, 7),)
    )
    outcome = ExecutionOutcome.of(result, timing_ns=None)
    assert (outcome.status, outcome.output_shapes, outcome.output_pools) == (ErrorStatus.NONE, shapes, {1: b"xy"})
    assert outcome.profile == [("ADD", 2, 7)]
    outcome.raise_for_status()  # NONE: nothing raised


def test_raise_for_status_raises_the_statuss_error_with_the_shapes() -> None:
    shapes = (OutputShape((2, 4), False),)
    outcome = ExecutionOutcome.of(ExecutionResult(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "too small", shapes))
    with pytest.raises(OutputInsufficientSize, match="too small") as err:
        outcome.raise_for_status()
    assert err.value.output_shapes == shapes  # type: ignore[attr-defined]

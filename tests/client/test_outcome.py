"""ExecutionOutcome: a result read as an outcome, and its status raised as the HalError."""

from __future__ import annotations

import pytest

from nnhal.client.outcome import ExecutionOutcome
from nnhal.core import fastanswer
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import OutputInsufficientSize
from nnhal.core.types import ExecutionResult, OperationProfile, OutputShape, Timing


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


def test_of_answer_is_of_the_whole_result() -> None:
    """An answer read apart (``fastanswer.Apart``: a shared result, this answer's pools and
    timing) comes to the outcome its whole result would: its own pools and timing, the shared
    result's status, message and shapes; a profile through the whole result."""
    shapes = (OutputShape((2,), True),)
    shared = ExecutionResult(ErrorStatus.NONE, "", shapes, Timing(1, 2), {1: b"old"})
    answer: fastanswer.Apart = (shared, {1: b"new"}, Timing(3, 4))
    outcome = ExecutionOutcome.of_answer(answer)
    want = ExecutionOutcome.of(fastanswer.whole(answer))
    assert outcome == want
    assert outcome.output_pools is answer[1] and outcome.timing is answer[2]
    profiled = ExecutionResult(ErrorStatus.NONE, "", shapes, profile=(OperationProfile("ADD", 1, 5),))
    assert ExecutionOutcome.of_answer(fastanswer.apart_of(profiled)).profile == [("ADD", 1, 5)]

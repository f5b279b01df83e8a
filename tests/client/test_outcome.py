"""ExecutionOutcome: a result read as an outcome, and its status raised as the HalError."""

from __future__ import annotations

import pytest

from nnhal.client.outcome import NO_KEPT_ANSWER, ExecutionOutcome, kept_answer
from nnhal.core import fastanswer
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import OutputInsufficientSize
from nnhal.core.types import ExecutionResult, OperationProfile, OutputShape, PoolData, Timing


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


def test_an_answer_kept_makes_the_outcomes_of_the_answers_alike() -> None:
    """``kept_answer``: an answer read apart whose result is shared (its pools are not the
    result's) keeps its outcome's fields; ``of_kept`` of them with an answer's own pools is the
    outcome ``of_answer`` makes, its mutable fields its own. Any other answer keeps nothing."""
    shapes = (OutputShape((2, 4), True),)
    shared = ExecutionResult(ErrorStatus.NONE, "", shapes, output_pools={})
    kept = kept_answer((shared, {1: b"a"}, shared.timing))
    assert kept is not None and kept[0] is shared
    for data in (b"a", b"b"):
        pools: dict[int, PoolData] = {1: data}
        made = ExecutionOutcome.of_kept(kept, pools, [])
        assert made == ExecutionOutcome.of_answer((shared, pools, shared.timing))
        assert made.output_pools is pools
        again = ExecutionOutcome.of_kept(kept, {1: data}, [])
        assert again.profile is not made.profile and again.outputs is not made.outputs
    whole = ExecutionResult(ErrorStatus.NONE, "", shapes, output_pools={1: b"a"})
    assert kept_answer(fastanswer.apart_of(whole)) is None  # its pools are its result's
    assert kept_answer((shared, {1: b"a"}, Timing(3, 4))) is None  # a timing of its own
    profiled = ExecutionResult(ErrorStatus.NONE, "", shapes, profile=(OperationProfile("ADD", 1, 2),))
    assert kept_answer((profiled, {1: b"a"}, profiled.timing)) is None
    assert NO_KEPT_ANSWER[0] is None

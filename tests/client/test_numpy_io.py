"""The numpy execution as steps: one request when the outputs fit, one retry with the sizes
the driver reported when they did not, the HalError raised when it failed."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.client.numpy_io import NumpyIO, numpy_execution, settle
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.steps import drive
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure
from nnhal.core.types import ExecutionResult, OutputShape, PoolData, Request, Timing
from tests.conftest import add_model, inline_data, ones, sized


def _answer(request: Request, status: ErrorStatus = ErrorStatus.NONE) -> ExecutionResult:
    x = ones()
    return ExecutionResult(status, "", (OutputShape((2, 4), True),), output_pools={1: (x + x).tobytes()})


def test_outputs_that_fit_take_one_request() -> None:
    sent: list[Request] = []

    def perform(request: Request) -> ExecutionResult:
        sent.append(request)
        return _answer(request)

    outcome = drive(numpy_execution(NumpyIO(add_model()), [ones(), ones()]), perform)
    assert len(sent) == 1
    np.testing.assert_array_equal(outcome.outputs[0], 2 * ones())


def test_too_small_outputs_are_retried_once_and_a_failure_is_raised() -> None:
    sent: list[Request] = []

    def perform(request: Request) -> ExecutionResult:
        sent.append(request)
        if len(sent) == 1:
            return ExecutionResult(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "", (OutputShape((2, 4), False),))
        return _answer(request)

    outcome = drive(numpy_execution(NumpyIO(add_model()), [ones(), ones()]), perform)
    assert len(sent) == 2 and outcome.status == ErrorStatus.NONE

    with pytest.raises(GeneralFailure, match="broken"):
        drive(
            numpy_execution(NumpyIO(add_model()), [ones(), ones()]),
            lambda _r: ExecutionResult(ErrorStatus.GENERAL_FAILURE, "broken"),
        )


def test_a_plan_is_offered_only_for_shapes_requested_before() -> None:
    numpy_io = NumpyIO(add_model((0, 4)))
    assert numpy_io.planned([ones(), ones()]) is None  # no plan yet: the general path makes it
    request, _layout = numpy_io.request([ones(), ones()], None)
    planned = numpy_io.planned([ones(), ones()])
    assert planned is not None
    plan, parts = planned
    assert plan.inputs is request.inputs and plan.outputs is request.outputs
    # The compact call carries the input pool's bytes, as the general request holds them.
    assert b"".join(parts) == bytes(inline_data(request.pools[0]))
    assert plan.compact.body == len(inline_data(request.pools[0]))
    # The input pool: 32 B, a 32 B pad, 32 B; the output pool carries no bytes.
    assert plan.compact.shape == (request.inputs, request.outputs, ((96, 96), (0, sized(request.pools[1]).size)))
    # Other shapes: no plan until the general path made one, then a plan of their own.
    assert numpy_io.planned([ones((3, 4)), ones((3, 4))]) is None
    numpy_io.request([ones((3, 4)), ones((3, 4))], None)
    other = numpy_io.planned([ones((3, 4)), ones((3, 4))])
    assert other is not None and other[0] is not plan and other[0].compact.shape != plan.compact.shape
    assert numpy_io.planned([ones()]) is None  # a wrong input count: the general path says why


def test_a_plan_gives_the_input_pools_bytes_for_every_form_of_inputs() -> None:
    """Padded inputs (parts from the plan's template), unpadded ones (the arrays are the parts),
    omitted ones and converted ones: the parts join to the general request's input pool."""
    numpy_io = NumpyIO(add_model((0, 4)))
    forms: list[list[np.ndarray | None]] = [
        [ones(), ones()],  # 32 B each: the second padded
        [ones((4, 4)), ones((4, 4))],  # 64 B each: none padded
        [ones(), None],
        [None, ones((3, 4))],
        [ones().astype(np.float64), np.asfortranarray(ones((4, 2)).T)],  # converted, then made contiguous
    ]
    for inputs in forms:
        request, _layout = numpy_io.request(inputs, None)
        for _ in range(2):  # the plan just made, then the last one
            planned = numpy_io.planned(inputs)
            assert planned is not None
            plan, parts = planned
            assert plan.inputs is request.inputs
            assert b"".join(parts) == bytes(inline_data(request.pools[0])), inputs
    plain = numpy_io.planned([ones((4, 4)), ones((4, 4))])
    assert plain is not None and all(type(p) is np.ndarray for p in plain[1])


def test_a_planned_answer_decodes_into_outputs_of_its_own_bytes() -> None:
    numpy_io = NumpyIO(add_model())
    numpy_io.request([ones(), ones()], None)
    planned = numpy_io.planned([ones(), ones()])
    assert planned is not None
    plan = planned[0]
    shapes = (OutputShape((2, 4), True),)
    first = settle(plan, ExecutionResult(ErrorStatus.NONE, "", shapes, output_pools={1: (2 * ones()).tobytes()}))
    second = settle(plan, ExecutionResult(ErrorStatus.NONE, "", shapes, output_pools={1: (3 * ones()).tobytes()}))
    assert isinstance(first, ExecutionOutcome) and isinstance(second, ExecutionOutcome)
    np.testing.assert_array_equal(first.outputs[0], 2 * ones())  # unchanged by the next answer
    np.testing.assert_array_equal(second.outputs[0], 3 * ones())
    assert isinstance(first.outputs[0].base, bytes)  # a view of the answer's own bytes


def test_a_planned_answer_that_does_not_hold_together_is_refused() -> None:
    numpy_io = NumpyIO(add_model())
    numpy_io.request([ones(), ones()], None)
    planned = numpy_io.planned([ones(), ones()])
    assert planned is not None
    plan = planned[0]
    pool: dict[int, PoolData] = {1: (2 * ones()).tobytes()}
    # Output shapes larger than the pool the answer carries: refused, whether the structure is
    # new or was seen before with a pool that fitted.
    settle(plan, ExecutionResult(ErrorStatus.NONE, "", (OutputShape((2, 4), True),), output_pools=pool))
    with pytest.raises(GeneralFailure, match="does not fit"):
        settle(plan, ExecutionResult(ErrorStatus.NONE, "", (OutputShape((4, 4), True),), output_pools=pool))
    shapes = (OutputShape((2, 4), True),)
    settle(plan, ExecutionResult(ErrorStatus.NONE, "", shapes, output_pools=pool))
    with pytest.raises(GeneralFailure, match="does not fit"):
        settle(plan, ExecutionResult(ErrorStatus.NONE, "", shapes, output_pools={1: pool[1][:16]}))
    with pytest.raises(GeneralFailure, match="does not fit"):
        drive(
            numpy_execution(numpy_io, [ones(), ones()]),
            lambda _r: ExecutionResult(ErrorStatus.NONE, "", (OutputShape((9, 9), True),), output_pools=pool),
        )
    # A status other than NONE is raised; OUTPUT_INSUFFICIENT_SIZE gives the sizes to retry with.
    with pytest.raises(GeneralFailure, match="broken"):
        settle(plan, ExecutionResult(ErrorStatus.GENERAL_FAILURE, "broken"))
    retry = settle(plan, ExecutionResult(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE, "", (OutputShape((4, 4), False),)))
    assert retry == [64]


def test_an_empty_output_reads_nothing_of_its_pool() -> None:
    numpy_io = NumpyIO(add_model((0, 4)))
    numpy_io.request([ones(), ones()], None)
    planned = numpy_io.planned([ones(), ones()])
    assert planned is not None
    outcome = settle(planned[0], ExecutionResult(ErrorStatus.NONE, "", (OutputShape((0, 4), True),), output_pools={}))
    assert isinstance(outcome, ExecutionOutcome) and outcome.outputs[0].shape == (0, 4)


def test_answers_alike_a_kept_one_are_made_by_the_plan() -> None:
    """A planned answer read apart whose result is shared by the answers alike (``encoded``'s
    reading of an answer like one read before) is kept by the plan; the next ones sharing it are
    made of the kept fields and makers (``made``), their outputs views of their own bytes, equal
    to what the general path makes. Another result, or a timing of the answer's own, is not."""
    numpy_io = NumpyIO(add_model())
    numpy_io.request([ones(), ones()], None)
    planned = numpy_io.planned([ones(), ones()])
    assert planned is not None
    plan = planned[0]
    shared = ExecutionResult(ErrorStatus.NONE, "", (OutputShape((2, 4), True),), output_pools={})
    assert plan.made(shared, {1: (2 * ones()).tobytes()}) is None  # nothing kept yet
    first = settle(plan, shared, {1: (2 * ones()).tobytes()}, shared.timing)  # the general path: kept
    made = plan.made(shared, {1: (3 * ones()).tobytes()})
    again = settle(plan, shared, {1: (4 * ones()).tobytes()}, shared.timing)  # through ``made``
    assert isinstance(first, ExecutionOutcome) and isinstance(made, ExecutionOutcome)
    assert isinstance(again, ExecutionOutcome)
    for outcome, k in ((first, 2), (made, 3), (again, 4)):
        np.testing.assert_array_equal(outcome.outputs[0], k * ones())
        assert isinstance(outcome.outputs[0].base, bytes) and not outcome.outputs[0].flags.writeable
        assert outcome.status == ErrorStatus.NONE and outcome.output_shapes is shared.output_shapes
    assert made.output_pools is not again.output_pools and made.outputs is not again.outputs
    general = ExecutionOutcome.answered(
        ErrorStatus.NONE, "", shared.output_shapes, shared.timing, {1: (3 * ones()).tobytes()}, [made.outputs[0]]
    )
    assert made == general
    other = ExecutionResult(ErrorStatus.NONE, "", (OutputShape((2, 4), True),), output_pools={})
    assert plan.made(other, {1: (2 * ones()).tobytes()}) is None
    measured = settle(plan, shared, {1: (5 * ones()).tobytes()}, Timing(7, 8))  # its own timing: general
    assert isinstance(measured, ExecutionOutcome) and measured.timing == Timing(7, 8)
    np.testing.assert_array_equal(measured.outputs[0], 5 * ones())
    failed = ExecutionResult(ErrorStatus.GENERAL_FAILURE, "broken")
    with pytest.raises(GeneralFailure, match="broken"):
        settle(plan, failed, {}, failed.timing)

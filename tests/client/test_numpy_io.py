"""The numpy execution as steps: one request when the outputs fit, one retry with the sizes
the driver reported when they did not, the HalError raised when it failed."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.client.numpy_io import NumpyIO, numpy_execution
from nnhal.client.steps import drive
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure
from nnhal.core.types import ExecutionResult, OutputShape, Request
from tests.conftest import add_model, ones


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

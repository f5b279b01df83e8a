"""What a numpy plan keeps per layout and reuses per call: the last call's arrays known by their
facts (class, shape, dtype, contiguity), so a change of any of them is planned or converted
afresh; outcomes built from the defaults (``ExecutionOutcome.answered``) equal to ``__init__``'s;
outputs of successive calls never aliased."""

from __future__ import annotations

import dataclasses

import numpy as np

from nnhal.client import outcome as outcome_module
from nnhal.client.numpy_io import NumpyIO, settle
from nnhal.client.outcome import ExecutionOutcome
from nnhal.core.aidl_types import TimingNs
from nnhal.core.enums import ErrorStatus
from nnhal.core.types import ExecutionResult, OperationProfile, OperationTiming, OutputShape, PoolData, Timing
from tests.conftest import add_model, ones


def _planned_io() -> NumpyIO:
    numpy_io = NumpyIO(add_model())
    numpy_io.request([ones(), ones()], None)
    assert numpy_io.planned([ones(), ones()]) is not None  # known now, by its facts
    return numpy_io


def test_a_dtype_change_is_converted_not_taken_as_the_last_call() -> None:
    numpy_io = _planned_io()
    wide = np.ones((2, 4), np.float64)
    planned = numpy_io.planned([wide, wide])
    assert planned is not None
    _plan, parts = planned
    arrays = [p for p in parts if isinstance(p, np.ndarray)]
    assert [a.dtype for a in arrays] == [np.dtype(np.float32)] * 2  # converted, not the float64 arrays
    assert all(a is not wide for a in arrays)
    # And the float32 arrays again: their own arrays are the parts.
    x = ones()
    planned = numpy_io.planned([x, x])
    assert planned is not None and any(p is x for p in planned[1])


def test_a_layout_change_is_not_the_last_plan() -> None:
    numpy_io = NumpyIO(add_model((0, 4)))
    numpy_io.request([ones(), ones()], None)
    first = numpy_io.planned([ones(), ones()])
    assert first is not None
    assert numpy_io.planned([ones((3, 4)), ones((3, 4))]) is None  # another shape: no plan yet
    numpy_io.request([ones((3, 4)), ones((3, 4))], None)
    other = numpy_io.planned([ones((3, 4)), ones((3, 4))])
    assert other is not None and other[0] is not first[0]
    again = numpy_io.planned([ones(), ones()])
    assert again is not None and again[0] is first[0]


def test_non_contiguous_inputs_and_subclasses_are_converted() -> None:
    numpy_io = _planned_io()
    strided = np.ones((2, 8), np.float32)[:, ::2]
    assert not strided.flags.c_contiguous
    planned = numpy_io.planned([strided, strided])
    assert planned is not None
    arrays = [p for p in planned[1] if isinstance(p, np.ndarray)]
    assert all(a.flags.c_contiguous and a is not strided for a in arrays)

    class Sub(np.ndarray):
        pass

    sub = ones().view(Sub)
    planned = numpy_io.planned([sub, sub])
    assert planned is not None
    assert all(type(p) is np.ndarray for p in planned[1] if isinstance(p, np.ndarray))


def test_a_wrong_count_or_an_omitted_input_is_not_the_last_call() -> None:
    numpy_io = _planned_io()
    assert numpy_io.planned([ones()]) is None
    assert numpy_io.planned([ones(), ones(), ones()]) is None
    assert numpy_io.planned([ones(), None]) is None  # no plan with an omitted input


def test_outputs_are_not_aliased_between_calls() -> None:
    numpy_io = _planned_io()
    planned = numpy_io.planned([ones(), ones()])
    assert planned is not None
    plan = planned[0]
    shapes = (OutputShape((2, 4), True),)
    outcomes = []
    for k in (1, 2):
        pools: dict[int, PoolData] = {1: np.full((2, 4), k, np.float32).tobytes()}
        settled = settle(plan, ExecutionResult(ErrorStatus.NONE, "", shapes), pools)
        assert isinstance(settled, ExecutionOutcome)
        outcomes.append(settled)
    first, second = outcomes
    np.testing.assert_array_equal(first.outputs[0], np.full((2, 4), 1, np.float32))
    np.testing.assert_array_equal(second.outputs[0], np.full((2, 4), 2, np.float32))
    assert not np.shares_memory(first.outputs[0], second.outputs[0])
    assert first.outputs is not second.outputs and first.profile is not second.profile


def test_answered_is_the_outcome_init_makes() -> None:
    timing = Timing(5, 7)
    shapes = (OutputShape((2, 4), True),)
    pools: dict[int, PoolData] = {1: b"x"}
    outputs = [ones()]
    made = ExecutionOutcome.answered(ErrorStatus.NONE, "m", shapes, timing, pools, outputs)
    want = ExecutionOutcome(ErrorStatus.NONE, "m", shapes, timing, pools, outputs)
    assert type(made) is ExecutionOutcome
    assert list(vars(made)) == list(vars(want))  # the same fields, in order
    assert dataclasses.astuple(made)[:4] == dataclasses.astuple(want)[:4]
    assert made.output_pools is pools and made.outputs is outputs
    again = ExecutionOutcome.answered(ErrorStatus.NONE, "m", shapes, timing, pools, outputs)
    assert made.profile == [] and made.profile is not again.profile
    # Every field whose default is made per outcome is set anew by ``answered``.
    fresh = {f.name for f in dataclasses.fields(ExecutionOutcome) if f.default_factory is not dataclasses.MISSING}
    assert fresh == set(outcome_module._FRESH)
    made.profile.append(("ADD", 1, 1))
    assert outcome_module._DEFAULTS["profile"] == []


def test_of_is_the_outcome_init_makes() -> None:
    """``ExecutionOutcome.of`` (through ``answered``) gives the fields ``__init__`` would, the
    profile converted, the timeline and AIDL timing carried, nothing shared between outcomes."""
    result = ExecutionResult(
        ErrorStatus.NONE,
        "m",
        (OutputShape((2, 4), True),),
        Timing(3, 4),
        {1: b"x"},
        (OperationProfile("ADD", 2, 9),),
        (OperationTiming(0, "ADD", 0, 1, 2),),
    )
    made = ExecutionOutcome.of(result, TimingNs(5, 6))
    want = ExecutionOutcome(
        result.status,
        result.message,
        result.output_shapes,
        result.timing,
        result.output_pools,
        [],
        [("ADD", 2, 9)],
        result.timeline,
        timing_ns=TimingNs(5, 6),
    )
    assert made == want and list(vars(made)) == list(vars(want))
    plain = ExecutionOutcome.of(ExecutionResult())
    assert plain == ExecutionOutcome(ErrorStatus.NONE) and list(vars(plain)) == list(vars(want))
    assert plain.profile is not ExecutionOutcome.of(ExecutionResult()).profile
    assert plain.outputs is not ExecutionOutcome.of(ExecutionResult()).outputs

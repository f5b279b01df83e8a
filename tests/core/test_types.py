"""``ExecutionResult``'s ``__init__`` (``slot_init``'s) keeps the dataclass's contract: its defaults (a new
dict of output pools per result), frozen fields, equality, ``dataclasses.replace`` and pickling."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from nnhal.core.enums import ErrorStatus
from nnhal.core.types import (
    DataLocation,
    ExecutionResult,
    OutputShape,
    RequestArgument,
    Timing,
    arguments_key,
)


def test_defaults_are_the_fields_defaults_and_each_result_has_its_own_pools() -> None:
    a, b = ExecutionResult(), ExecutionResult()
    assert a.status == ErrorStatus.NONE and a.message == "" and a.output_shapes == ()
    assert a.timing == Timing() and a.profile == () and a.timeline == ()
    assert a.output_pools == {} and a.output_pools is not b.output_pools


def test_a_result_is_frozen_and_compares_replaces_and_pickles_by_its_fields() -> None:
    shapes = (OutputShape((2, 4), True),)
    r = ExecutionResult(ErrorStatus.NONE, "ok", shapes, Timing(1, 2), {1: b"x"})
    assert r == ExecutionResult(ErrorStatus.NONE, "ok", shapes, Timing(1, 2), {1: b"x"})
    assert [f.name for f in dataclasses.fields(r)] == [
        "status",
        "message",
        "output_shapes",
        "timing",
        "output_pools",
        "profile",
        "timeline",
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.message = "changed"  # type: ignore[misc]
    changed = dataclasses.replace(r, status=ErrorStatus.GENERAL_FAILURE)
    assert changed.status == ErrorStatus.GENERAL_FAILURE and changed.output_pools == {1: b"x"}
    assert pickle.loads(pickle.dumps(r)) == r


_ARGUMENTS = [
    RequestArgument(),
    RequestArgument(has_no_value=True),
    RequestArgument(location=DataLocation(0, 0, 32)),
    RequestArgument(location=DataLocation(1, 0, 32)),
    RequestArgument(location=DataLocation(0, 64, 32)),
    RequestArgument(location=DataLocation(0, 0, 16)),
    RequestArgument(location=DataLocation(0, 0, 32), dimensions=(2, 4)),
    RequestArgument(location=DataLocation(0, 0, 32), dimensions=(4, 2)),
]


def test_arguments_keys_are_equal_exactly_when_the_arguments_are() -> None:
    for a in _ARGUMENTS:
        for b in _ARGUMENTS:
            # Equal arguments built anew (a burst's, call after call) have equal keys.
            fresh = dataclasses.replace(b, location=dataclasses.replace(b.location))
            assert (arguments_key((a,)) == arguments_key((fresh,))) == (a == b)
            assert (arguments_key((a, b)) == arguments_key((b, a))) == (a == b)
    assert arguments_key(()) == ()

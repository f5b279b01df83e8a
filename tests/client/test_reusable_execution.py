"""A reusable execution's run as an outcome (shared by both clients): AIDL Timing attached,
outputs decoded for a numpy request, every status (a transport failure's too) in the outcome."""

from __future__ import annotations

from typing import Any

from nnhal.client import steps
from nnhal.client.outcome import ExecutionOutcome, outcome_of
from nnhal.client.remote import aidl
from nnhal.client.reusable_execution import decoded
from nnhal.core.aidl_types import TimingNs
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject
from nnhal.core.types import ExecutionResult


def test_a_run_keeps_its_aidl_timing_and_decodes_when_asked() -> None:
    timing = TimingNs(5000, 7000)
    plain = decoded(None)((ExecutionResult(ErrorStatus.NONE), timing))
    assert plain.status == ErrorStatus.NONE and plain.timing_ns == timing and plain.outputs == []

    def decode(result: ExecutionResult) -> ExecutionOutcome:
        outcome = ExecutionOutcome.of(result)
        outcome.outputs = ["decoded"]  # type: ignore[list-item]
        return outcome

    numpy = decoded(decode)((ExecutionResult(ErrorStatus.NONE), timing))
    assert numpy.outputs == ["decoded"] and numpy.timing_ns == timing


def test_a_runs_transport_failure_is_its_outcome() -> None:
    def perform(step: Any) -> Any:
        assert (step.service, step.method) == ("execution", "executeSynchronously")
        raise DeadObject("the server is gone")

    outcome = steps.drive(outcome_of(aidl.execution_run("s", "e", None, None), decoded(None)), perform)
    assert outcome.status == ErrorStatus.DEAD_OBJECT and "gone" in outcome.message

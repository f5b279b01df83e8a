"""getExecutionInfo in the form the execution was launched in (AIDL or 1.3), as an outcome;
the call both clients' FencedExecution drive."""

from __future__ import annotations

from typing import Any

from nnhal.client import steps
from nnhal.client.fenced import info_call
from nnhal.client.remote.calls import Step, Unary
from nnhal.core.enums import ErrorStatus
from nnhal.proto import aidl_pb2, service_pb2


def _drive(aidl_form: bool, answer: Any) -> tuple[Any, Unary]:
    seen: list[Unary] = []

    def perform(step: Step) -> Any:
        assert isinstance(step, Unary)
        seen.append(step)
        return answer

    return steps.drive(info_call("s", "cb", aidl_form, True, 3.0), perform), seen[0]


def test_a_13_fenced_execution_asks_the_13_callback() -> None:
    answer = service_pb2.FencedInfoResponse(status=ErrorStatus.NONE, signalled=True)  # type: ignore[arg-type]
    outcome, step = _drive(False, answer)
    assert (step.service, step.method, step.checked, step.timeout) == ("fenced", "getExecutionInfo", False, 3.0)
    assert step.request.wait and step.request.callback == "cb"
    assert outcome.status == ErrorStatus.NONE and outcome.signalled and outcome.timing_ns is None


def test_an_aidl_fenced_execution_asks_the_aidl_callback_and_has_its_timings() -> None:
    answer = aidl_pb2.AidlFencedInfoResponse(status=ErrorStatus.MISSED_DEADLINE_TRANSIENT, message="late")  # type: ignore[arg-type]
    outcome, step = _drive(True, answer)
    assert step.service == "aidl_fenced"
    assert outcome.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT and outcome.message == "late"
    assert outcome.timing_ns is not None and outcome.timing_launched_ns is not None

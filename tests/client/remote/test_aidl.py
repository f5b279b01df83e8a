"""The AIDL forms as calls, without a server: which RPC each sends, what it carries, how its
answer reads (executions: status in the result; the others: the HalError raised)."""

from __future__ import annotations

from typing import Any

import pytest

from nnhal.client import steps
from nnhal.client.remote import aidl
from nnhal.client.remote.calls import Step, Unary
from nnhal.core.aidl_types import ExecutionConfig, TokenValuePair
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import ExtensionNameAndPrefix
from nnhal.proto import aidl_pb2, service_pb2
from tests.conftest import one_io_request, ones

HINTED = ExecutionConfig(False, None, (TokenValuePair((3 << 16) | 1, b"x"),), (ExtensionNameAndPrefix("v.e", 3),))


def _answering(answer: Any, seen: list[Unary]) -> Any:
    def perform(step: Step) -> Any:
        assert isinstance(step, Unary)
        seen.append(step)
        return answer

    return perform


def test_an_execution_sends_its_deadline_and_reads_its_status_and_timing() -> None:
    seen: list[Unary] = []
    answer = aidl_pb2.AidlExecutionResult(status=ErrorStatus.MISSED_DEADLINE_TRANSIENT, message="late")  # type: ignore[arg-type]
    result, timing = steps.drive(
        aidl.execute("s", "pm", one_io_request(ones()), True, 2.0, None, 7), _answering(answer, seen)
    )
    assert result.status == ErrorStatus.MISSED_DEADLINE_TRANSIENT and timing.time_on_device_ns == -1
    step = seen[0]
    assert (step.service, step.method, step.checked) == ("aidl_prepared_model", "executeSynchronously", False)
    assert step.request.loop_timeout_duration_ns == 7 and step.request.measure_timing
    assert step.request.HasField("deadline") and step.timeout is not None and step.timeout >= 2.0


@pytest.mark.parametrize(
    ("config", "method"), [(ExecutionConfig(), "executeSynchronously"), (HINTED, "executeSynchronouslyWithConfig")]
)
def test_a_burst_execution_takes_the_with_config_form_only_for_hints(config: ExecutionConfig, method: str) -> None:
    seen: list[Unary] = []
    steps.drive(
        aidl.burst_execute("s", "b", one_io_request(ones()), (False, True), [4, -1], config, None, None),
        _answering(aidl_pb2.AidlExecutionResult(), seen),
    )
    assert (seen[0].service, seen[0].method) == ("burst", method)
    assert list(seen[0].request.memory_identifier_tokens) == [4, -1]


def test_object_calls_are_checked_and_release_goes_to_the_objects_service() -> None:
    seen: list[Unary] = []
    steps.drive(aidl.release("s", "execution", "e1"), _answering(service_pb2.StatusMessage(), seen))
    steps.drive(aidl.release("s", "burst", "b1"), _answering(service_pb2.StatusMessage(), seen))
    assert [(s.service, s.method, s.checked) for s in seen] == [
        ("execution", "release", True),
        ("burst", "release", True),
    ]
    assert steps.drive(aidl.configure_burst("s", "pm"), _answering(aidl_pb2.ObjectResponse(handle="b9"), seen)) == "b9"


def test_a_fenced_launch_returns_its_fence_and_callback() -> None:
    seen: list[Unary] = []
    answer = service_pb2.FencedExecuteResponse(sync_fence="f", callback="c")
    call = aidl.execute_fenced("s", "pm", one_io_request(ones()), ["f0"], False, None, None, None, 5)
    assert steps.drive(call, _answering(answer, seen)) == ("f", "c")
    assert list(seen[0].request.wait_for) == ["f0"] and seen[0].request.duration_ns == 5 and seen[0].checked


def test_a_transport_error_raised_by_the_session_ends_the_call() -> None:
    def perform(step: Step) -> Any:
        raise HalError.of(ErrorStatus.DEAD_OBJECT, "gone")

    with pytest.raises(HalError, match="gone"):
        steps.drive(aidl.create_reusable_execution("s", "pm", one_io_request(ones()), ExecutionConfig()), perform)

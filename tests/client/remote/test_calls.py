"""The HAL calls without a transport: each yields the RPC it needs and reads its answer."""

from __future__ import annotations

from typing import Any

from nnhal.client.remote import calls
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.client.steps import drive
from nnhal.core import wire_model
from nnhal.core.enums import DeviceStatus, ErrorStatus
from nnhal.core.faults import Fault
from nnhal.core.types import ExecutionResult
from nnhal.proto import service_pb2 as spb
from tests.conftest import add_model, one_io_request, ones


def _run(call: calls.Call[Any], answer: Any) -> tuple[list[calls.Unary], Any]:
    steps: list[calls.Unary] = []

    def perform(step: calls.Step) -> Any:
        assert isinstance(step, calls.Unary)
        steps.append(step)
        return answer

    return steps, drive(call, perform)


def test_a_device_query_names_its_stub_and_reads_its_answer() -> None:
    steps, status = _run(calls.status("s1"), spb.StatusResponse(status=int(DeviceStatus.BUSY)))  # type: ignore[arg-type]
    assert status == DeviceStatus.BUSY
    (step,) = steps
    assert (step.service, step.method, step.checked, step.request.session) == ("device", "getStatus", False, "s1")
    steps, version = _run(calls.version_string("s1"), spb.VersionStringResponse(version="v9"))
    assert version == "v9" and steps[0].checked and steps[0].label == "getVersionString"


def test_supported_operations_sends_the_model() -> None:
    answer = spb.SupportedOperationsResponse(supported=[True], reasons=[""])
    steps, ops = _run(calls.supported_operations("s1", add_model()), answer)
    assert ops == [(True, "")]
    assert wire_model.model_from(steps[0].request.model).main.operations == add_model().main.operations


def test_execute_reads_its_status_from_the_result_not_the_transport() -> None:
    result = spb.ExecuteResult(status=int(ErrorStatus.OUTPUT_INSUFFICIENT_SIZE))  # type: ignore[arg-type]
    steps, got = _run(calls.execute("s1", "pm1", one_io_request(ones()), ExecutionOptions(timeout=2.0)), result)
    assert isinstance(got, ExecutionResult) and got.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
    (step,) = steps
    assert step.method == "executeSynchronously_1_3" and not step.checked and step.timeout is not None
    assert step.request.prepared_model == "pm1"


def test_faults_and_releases_are_checked_and_release_has_no_prefix() -> None:
    steps, _ = _run(calls.inject_faults("s1", [Fault.abort("execute_1_3", after=1)], clear=True), spb.StatusMessage())
    assert steps[0].method == "setFaults" and steps[0].request.clear and steps[0].request.faults[0].grpc_code == 14
    steps, _ = _run(calls.release_prepared_model("s1", "pm1"), spb.StatusMessage())
    assert steps[0].checked and not steps[0].prefix and steps[0].service == "prepared_model"

"""The HIDL 1.0-1.2 forms as calls, without a server: which RPC each form sends with which
message, what a form's version cannot carry (refused before sending), and how answers read."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from nnhal.client import steps
from nnhal.client.remote import hidl
from nnhal.client.remote.calls import Step, Unary
from nnhal.core.enums import ErrorStatus, ExecutionPreference, HalVersion
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import BufferTokenPool
from nnhal.proto import hidl_pb2, service_pb2
from tests.conftest import add_model, one_io_request, ones

V = HalVersion


@pytest.mark.parametrize(
    ("version", "method", "message"),
    [
        (V.V1_0, "prepareModel", hidl_pb2.PrepareModelV1_0Request),
        (V.V1_1, "prepareModel_1_1", hidl_pb2.PrepareModelV1_1Request),
        (V.V1_2, "prepareModel_1_2", hidl_pb2.PrepareModelV1_2Request),
    ],
)
def test_each_version_prepares_with_its_own_method_and_message(version: HalVersion, method: str, message: Any) -> None:
    step = hidl.prepare_launch("s", add_model(), version, ExecutionPreference.LOW_POWER, None)
    assert (step.service, step.method, type(step.request)) == ("hidl_device", method, message)
    assert step.request.session == "s" and len(step.request.model.operations) == 1


def test_a_cache_token_travels_in_the_1_2_form() -> None:
    step = hidl.prepare_launch("s", add_model(), V.V1_2, ExecutionPreference.LOW_POWER, bytes(32))
    assert step.request.want_cache and step.request.token == bytes(32)
    cached = hidl.prepare_from_cache_launch("s", b"cache", bytes(32))
    assert cached.method == "prepareModelFromCache" and cached.request.model_cache[0].data == b"cache"


def test_a_request_a_version_cannot_hold_is_refused_before_sending() -> None:
    request = one_io_request(ones())
    with_token = dataclasses.replace(request, pools=(request.pools[0], BufferTokenPool(3)))
    with pytest.raises(InvalidArgument, match="execute"):
        hidl.execute_launch("s", "pm", with_token, V.V1_0, False)
    sent: list[Step] = []
    with pytest.raises(InvalidArgument, match="executeSynchronously"):
        steps.drive(hidl.execute_sync("s", "pm", with_token, False), sent.append)
    assert not sent


def test_the_synchronous_1_2_form_reads_its_answer_with_its_status_in_the_result() -> None:
    def perform(step: Step) -> Any:
        assert isinstance(step, Unary)
        assert (step.service, step.method, step.checked) == ("hidl_prepared_model", "executeSynchronously", False)
        assert step.request.measure and step.request.prepared_model == "pm"
        return service_pb2.ExecuteResult(status=ErrorStatus.INVALID_ARGUMENT, message="bad")  # type: ignore[arg-type]

    result = steps.drive(hidl.execute_sync("s", "pm", one_io_request(ones()), True), perform)
    assert result.status == ErrorStatus.INVALID_ARGUMENT and result.message == "bad"
    launch = hidl.execute_launch("s", "pm", one_io_request(ones()), V.V1_2, True)
    assert launch.method == "execute_1_2" and launch.request.measure
    assert hidl.execute_launch("s", "pm", one_io_request(ones()), V.V1_0, False).method == "execute"


def test_a_1_0_notify_reads_as_a_result_with_its_pools() -> None:
    msg = hidl_pb2.ExecuteResultV1_0(message="no")
    msg.output_pools.add(pool_index=1, data=b"xy")
    result = hidl.result_of(msg)
    assert result.status == ErrorStatus.NONE and result.message == "no" and result.output_pools == {1: b"xy"}


@pytest.mark.parametrize(("level", "version"), [(10, V.V1_0), (11, V.V1_1), (12, V.V1_2)])
def test_the_form_version_of_a_level(level: int, version: HalVersion) -> None:
    assert hidl.form_version(level) == version

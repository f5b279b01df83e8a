"""``common.hal_method`` in process: the one decorator of every method form (level gate,
injected faults, refusals as in-band statuses, versioned statuses, metrics)."""

from __future__ import annotations

from typing import Any

import pytest

from nnhal.core.enums import ErrorStatus, HalVersion
from nnhal.core.errors import InvalidArgument
from nnhal.proto import service_pb2 as spb
from nnhal.server.driver import DeviceConfig, Driver
from nnhal.server.executions import Abort, Arrival, Executions, Fault, Method
from nnhal.server.rpc.common import hal_method


class Servicer:
    def __init__(self, level: HalVersion = HalVersion.AIDL_V4) -> None:
        self.executions = Executions(Driver(DeviceConfig(feature_level=level)))
        self.calls = 0

    @hal_method(make=spb.VersionStringResponse)
    def getVersionString(self, request: Any, context: Any) -> spb.VersionStringResponse:
        self.calls += 1
        return spb.VersionStringResponse(version="v")

    @hal_method("getCapabilities_1_2", spb.StatusMessage, HalVersion.V1_0)
    def older(self, request: Any, context: Any) -> spb.StatusMessage:
        raise InvalidArgument("no")

    @hal_method(make=spb.StatusMessage)
    def release(self, request: Any, context: Any) -> spb.StatusMessage:
        raise RuntimeError("a bug")

    @hal_method("executeSynchronously", timer="execute")
    def use_case(self, request: Any, context: Any, m: Method, arrival: Arrival | None) -> tuple[Method, Any]:
        return m, arrival


def _count(s: Servicer, method: str, status: str) -> float | None:
    value: float | None = s.executions.metrics.registry.get_sample_value(
        "nnhal_rpcs_total", {"device": s.executions.driver.config.name, "method": method, "status": status}
    )
    return value


def test_a_unary_answer_is_gated_counted_and_faulted() -> None:
    s = Servicer()
    assert s.getVersionString(None, None).version == "v"
    assert _count(s, "getVersionString", "NONE") == 1
    s.executions.faults.add([Fault("getVersionString", "error", status=ErrorStatus.DEVICE_UNAVAILABLE)])
    reply = s.getVersionString(None, None)
    assert ErrorStatus(reply.status) == ErrorStatus.DEVICE_UNAVAILABLE and s.calls == 1  # not called
    s.executions.faults.add([Fault("getVersionString", "abort", grpc_code=13)])
    with pytest.raises(Abort):
        s.getVersionString(None, None)
    old = Servicer(HalVersion.V1_0)
    refused = old.getVersionString(None, None)
    assert (
        ErrorStatus(refused.status) == ErrorStatus.GENERAL_FAILURE
        and "needs NN HAL 1.2" in refused.message
        and old.calls == 0
    )


def test_errors_become_statuses_in_the_forms_codes() -> None:
    s = Servicer()
    assert ErrorStatus(s.older(None, None).status) == ErrorStatus.INVALID_ARGUMENT
    bug = s.release(None, None)  # not gated: no level lists it
    assert ErrorStatus(bug.status) == ErrorStatus.GENERAL_FAILURE and "internal error" in bug.message


def test_a_use_case_gets_its_method_and_arrival() -> None:
    s = Servicer()
    m, arrival = s.use_case(None, None)
    assert m.name == "executeSynchronously" and m.level == HalVersion.V1_2 and m.fault == "executeSynchronously"
    assert arrival is None
    s.executions.faults.add([Fault("executeSynchronously", "stall", stall_ms=1)])
    _, arrival = s.use_case(None, None)
    assert arrival is not None and arrival.fault is not None and arrival.fault.kind == "stall"

"""The Device service through a real channel: queries behind the level gate, preparations
through the owner, and setFaults naming any HAL method form."""

from __future__ import annotations

import grpc
import pytest

from nnhal.core import wire_model
from nnhal.core.enums import ErrorStatus, HalVersion
from nnhal.core.errors import DeadObject
from nnhal.proto import service_pb2 as spb, types_pb2 as tpb
from tests.conftest import add_model
from tests.server.rpc.conftest import Served, serve

pytestmark = pytest.mark.timeout(60)
TIMEOUT_S = 20.0


def test_a_query_newer_than_the_device_is_refused_in_band(served12: Served) -> None:
    reply = served12.stubs.device.getCapabilities_1_3(spb.DeviceRequest(session=served12.session), timeout=TIMEOUT_S)
    assert reply.status == ErrorStatus.GENERAL_FAILURE and "needs NN HAL 1.3; this device serves 1.2" in reply.message
    version = served12.stubs.device.getVersionString(spb.DeviceRequest(session=served12.session), timeout=TIMEOUT_S)
    assert version.status == ErrorStatus.NONE and version.version


def test_a_preparation_is_a_launch_then_one_notify_with_its_handle(served: Served) -> None:
    msg = spb.PrepareModelRequest(session=served.session, preference=tpb.FAST_SINGLE_ANSWER)
    wire_model.model_to(add_model(), msg.model)
    events = list(served.stubs.device.prepareModel_1_3(msg, timeout=TIMEOUT_S))
    assert [e.WhichOneof("event") for e in events] == ["launch", "notify"]
    assert events[1].notify.status == ErrorStatus.NONE and events[1].notify.prepared_model.handle


def test_set_faults_takes_the_hal_names_of_every_form_and_refuses_others(served: Served) -> None:
    def set_fault(method: str) -> spb.StatusMessage:
        fault = spb.InjectedFault(method=method, kind=spb.InjectedFault.STALL, stall_ms=1)
        request = spb.FaultRequest(session=served.session, faults=[fault])
        reply: spb.StatusMessage = served.stubs.device.setFaults(request, timeout=TIMEOUT_S)
        return reply

    for method in ("executeSynchronously", "IBurst.executeSynchronously", "prepareModelWithConfig"):
        assert ErrorStatus(set_fault(method).status) == ErrorStatus.NONE
    refused = set_fault("openSession")
    assert ErrorStatus(refused.status) == ErrorStatus.INVALID_ARGUMENT and "cannot be faulted" in refused.message
    clear = served.stubs.device.setFaults(spb.FaultRequest(session=served.session, clear=True), timeout=TIMEOUT_S)
    assert clear.status == ErrorStatus.NONE


def test_an_injected_abort_ends_the_call_with_its_grpc_status(served: Served) -> None:
    fault = spb.InjectedFault(method="getVersionString", kind=spb.InjectedFault.ABORT, grpc_code=13)
    served.stubs.device.setFaults(spb.FaultRequest(session=served.session, faults=[fault]), timeout=TIMEOUT_S)
    with pytest.raises(grpc.RpcError) as err:
        served.stubs.device.getVersionString(spb.DeviceRequest(session=served.session), timeout=TIMEOUT_S)
    assert err.value.code() == grpc.StatusCode.INTERNAL


def test_a_call_on_a_session_a_stopping_server_ended_ends_unavailable() -> None:
    # A call gRPC took in just before its server's stop may run after the stop closed the
    # sessions: it ends as a stopped server's calls do (UNAVAILABLE: the client's DEAD_OBJECT),
    # and a proxy leaving its ``with`` block drops that, instead of raising "unknown session".
    served = serve(HalVersion.AIDL_V4)
    s = next(served)
    try:
        (driver,) = s.server.drivers.values()
        driver.lifecycle.stop()
        driver.close_session(s.session)
        with pytest.raises(grpc.RpcError) as err:
            s.stubs.device.getVersionString(spb.DeviceRequest(session=s.session), timeout=TIMEOUT_S)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "server is stopping" in str(err.value.details())
        with pytest.raises(DeadObject):  # what a proxy's ``with`` drops (``nnhal.client.release``)
            s.dev.remote.release_prepared_model(s.handle)
    finally:
        served.close()

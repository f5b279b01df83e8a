"""Method forms by feature level, across processes: a 1.0 device serves exactly the 1.0 methods.

Every RPC of a HAL method newer than the device's level — the 1.1, 1.2 and 1.3 forms
and every AIDL form — answers GENERAL_FAILURE naming the level it needs, in-band; the
1.0 methods (getCapabilities, getSupportedOperations, prepareModel, getStatus,
execute) work, with the 1.0 types on the wire. A 1.2 device serves its own forms
and refuses 1.3 fields inside them (a deadline on a burst execution) with
INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from google.protobuf import message_factory

from nnhal.client.device import Device
from nnhal.client.remote import hidl
from nnhal.core.enums import ErrorStatus, ExecutionPreference, HalVersion
from nnhal.core.errors import InvalidArgument
from nnhal.core.methods import METHOD_LEVEL
from nnhal.core.types import NO_TIMING
from nnhal.proto import aidl_pb2, hidl_pb2, service_pb2
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, one_io_request, ones, relu_chain

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOKEN = bytes(range(32))


@pytest.fixture(scope="module")
def server10() -> Iterator[LocalServer]:
    with LocalServer("--feature-level", "1.0") as srv:
        yield srv


@pytest.fixture
def dev10(server10: LocalServer) -> Iterator[Device]:
    with Device.connect(server10.address) as dev:
        yield dev


def _stub_methods() -> list[tuple[str, str, str]]:
    """(stub attribute, service, method) of every RPC of a HAL method form."""
    services = {
        "device": service_pb2.DESCRIPTOR.services_by_name["Device"],
        "prepared_model": service_pb2.DESCRIPTOR.services_by_name["PreparedModel"],
        "hidl_device": hidl_pb2.DESCRIPTOR.services_by_name["HidlDevice"],
        "hidl_prepared_model": hidl_pb2.DESCRIPTOR.services_by_name["HidlPreparedModel"],
        "aidl_device": aidl_pb2.DESCRIPTOR.services_by_name["AidlDevice"],
        "aidl_prepared_model": aidl_pb2.DESCRIPTOR.services_by_name["AidlPreparedModel"],
        "aidl_fenced": aidl_pb2.DESCRIPTOR.services_by_name["AidlFencedExecutionCallback"],
        "execution": aidl_pb2.DESCRIPTOR.services_by_name["Execution"],
        "burst": aidl_pb2.DESCRIPTOR.services_by_name["Burst"],
    }
    return [
        (stub, service.name, method.name)
        for stub, service in services.items()
        for method in service.methods
        if method.name not in ("openSession", "closeSession", "getStats", "setFaults", "release", "getStatus")
    ]


def _hal_name(service: str, method: str) -> str:
    """The method table's name of an RPC."""
    if service in ("AidlDevice", "AidlPreparedModel", "AidlFencedExecutionCallback"):
        interface = {"AidlDevice": "IDevice", "AidlPreparedModel": "IPreparedModel"}.get(
            service, "IFencedExecutionCallback"
        )
        aidl = f"AIDL {interface}.{method}"
        return aidl if aidl in METHOD_LEVEL else method
    if service in ("Execution", "Burst"):
        return f"I{service}.{method}"
    return method


def _call(dev: Device, stub: str, service: str, method: str) -> Any:
    """Call an RPC with an empty request of its type for this session: its in-band answer."""
    files = {"Device": service_pb2, "PreparedModel": service_pb2, "HidlDevice": hidl_pb2, "HidlPreparedModel": hidl_pb2}
    desc = files.get(service, aidl_pb2).DESCRIPTOR.services_by_name[service].methods_by_name[method]
    request: Any = message_factory.GetMessageClass(desc.input_type)()  # a class built from the descriptor
    if "session" in request.DESCRIPTOR.fields_by_name:
        request.session = dev.remote.session_id
    rpc = getattr(getattr(dev.remote.stubs, stub), method)
    if desc.client_streaming:  # configureExecutionBurst (1.2): the answer to its first execution
        return next(iter(rpc(iter([request]), timeout=30))).result
    if desc.server_streaming:  # launch / notify: the launch status
        events = list(rpc(request, timeout=30))
        assert len(events) == 2
        return events[0].launch
    return rpc(request, timeout=30)


NEWER = [m for m in _stub_methods() if METHOD_LEVEL[_hal_name(m[1], m[2])] > HalVersion.V1_0]


@pytest.mark.parametrize(("stub", "service", "method"), NEWER, ids=[f"{s}.{m}" for _, s, m in NEWER])
def test_every_newer_method_is_refused_by_a_1_0_device(dev10: Device, stub: str, service: str, method: str) -> None:
    answer = _call(dev10, stub, service, method)
    assert answer.status == ErrorStatus.GENERAL_FAILURE, answer
    needed = METHOD_LEVEL[_hal_name(service, method)]
    assert f"needs NN HAL {needed.label}; this device serves 1.0" in answer.message


def test_the_table_covers_every_rpc() -> None:
    assert len(NEWER) == 36
    assert {_hal_name(s, m) for _, s, m in _stub_methods()} <= set(METHOD_LEVEL)


def test_the_1_0_methods_work_across_processes(dev10: Device) -> None:
    assert dev10.feature_level == HalVersion.V1_0
    # getCapabilities: the 1.0 form, its two PerformanceInfo on the wire.
    raw = dev10.remote.stubs.hidl_device.getCapabilities(service_pb2.DeviceRequest(session=dev10.remote.session_id))
    assert raw.status == ErrorStatus.NONE and raw.capabilities.float32_performance.exec_time > 0
    assert dev10.capabilities().operand_performance
    assert dev10.version_string() == "UNKNOWN" and dev10.number_of_cache_files_needed() == (0, 0)
    assert dev10.supported_operations(add_model()) == [True]  # getSupportedOperations
    assert dev10.status() is not None  # getStatus
    with dev10.prepare_model_sync(add_model()) as pm:  # prepareModel
        out = pm.execute([ones(), 2 * ones()])  # execute (1.0 has no synchronous form)
        np.testing.assert_array_equal(out.outputs[0], 3 * ones())
        assert out.timing.time_on_device == NO_TIMING
        cb = pm.execute_async([ones(), ones()])
        np.testing.assert_array_equal(cb.get(30).outputs[0], 2 * ones())


def test_a_1_0_device_refuses_1_3_features_before_sending(dev10: Device) -> None:
    cb = dev10.prepare_model(add_model(), priority=2)
    assert cb.wait(10) and cb.status == ErrorStatus.INVALID_ARGUMENT and "priority needs NN HAL 1.3" in cb.message
    cb = dev10.prepare_model(add_model(), cache_token=TOKEN)
    assert cb.wait(10) and cb.status == ErrorStatus.INVALID_ARGUMENT and "cache token needs NN HAL 1.2" in cb.message
    with dev10.prepare_model_sync(add_model()) as pm:
        outcome = pm.execute_request(one_io_request(ones()), timeout=5)
        assert outcome.status == ErrorStatus.INVALID_ARGUMENT and "deadline needs NN HAL 1.3" in outcome.message
        # A method the level lacks is sent as is: the device refuses it.
        with pytest.raises(Exception, match=r"executeFenced needs NN HAL 1\.3; this device serves 1\.0"):
            pm.execute_fenced(one_io_request(ones()))


def test_a_1_1_device_speaks_its_own_forms() -> None:
    """The client picks the 1.1 forms a 1.1 device serves (1.1 has no execute of its own)."""
    with LocalServer("--feature-level", "1.1") as srv, Device.connect(srv.address) as dev:
        assert dev.feature_level == HalVersion.V1_1
        assert dev.capabilities().operand_performance  # getCapabilities_1_1
        assert dev.supported_operations(add_model()) == [True]  # getSupportedOperations_1_1
        with dev.prepare_model_sync(add_model(), preference=ExecutionPreference.LOW_POWER) as pm:  # prepareModel_1_1
            np.testing.assert_array_equal(pm.execute([ones(), ones()]).outputs[0], 2 * ones())  # execute


def test_a_1_2_device_speaks_its_own_forms() -> None:
    with LocalServer("--feature-level", "1.2") as srv, Device.connect(srv.address) as dev:
        assert dev.capabilities().operand_performance  # getCapabilities_1_2
        assert dev.supported_operations(add_model()) == [True]  # getSupportedOperations_1_2
        assert dev.type() is not None and dev.supported_extensions() == ()  # getType, getSupportedExtensions
        assert dev.number_of_cache_files_needed()[0] >= 0  # getNumberOfCacheFilesNeeded
        assert dev.version_string().startswith("nnhal")  # 1.2 has getVersionString
        pm = dev.prepare_model_sync(add_model(), cache_token=TOKEN)  # prepareModel_1_2 with a cache
        assert pm.model_cache
        out = pm.execute([ones(), ones()], measure=True)  # executeSynchronously with timing
        assert out.timing.time_on_device != NO_TIMING
        late_cb = pm.execute_async([ones(), ones()], measure=True)  # execute_1_2
        np.testing.assert_array_equal(late_cb.get(30).outputs[0], 2 * ones())
        again = dev.prepare_model_from_cache(pm.model_cache, TOKEN, add_model()).get(30)  # prepareModelFromCache
        np.testing.assert_array_equal(again.execute([ones(), ones()]).outputs[0], 2 * ones())
        with pm.burst() as burst:  # the 1.2 burst: no 1.3 fields
            assert burst.execute(one_io_request(ones())).status == ErrorStatus.INVALID_ARGUMENT  # wrong arity
        with dev.prepare_model_sync(relu_chain(1, (2, 4))) as relu, relu.burst() as burst:
            assert burst.execute(one_io_request(ones())).status == ErrorStatus.NONE
            late = burst.execute(one_io_request(ones()), timeout=5)
            assert late.status == ErrorStatus.INVALID_ARGUMENT and "a deadline needs NN HAL 1.3" in late.message
        refused = dev.remote.stubs.device.allocate(service_pb2.AllocateRequest(session=dev.remote.session_id))
        assert refused.status == ErrorStatus.GENERAL_FAILURE and "allocate needs NN HAL 1.3" in refused.message


def test_an_older_form_holds_its_model_to_its_version(device: Device) -> None:
    """On the shared 1.3 server: RELU of rank 5 needs 1.3, so a 1.0 model may not hold it."""
    r, rank5 = device.remote, relu_chain(1, (1, 2, 2, 2, 2))
    cb = r.launch_prepare(
        hidl.prepare_launch(r.session_id, rank5, HalVersion.V1_0, ExecutionPreference.FAST_SINGLE_ANSWER, None)
    )
    assert cb.wait(30) and cb.status == ErrorStatus.INVALID_ARGUMENT and "needs NN HAL 1.3" in cb.message
    # An invalid model for the form's version: INVALID_ARGUMENT from getSupportedOperations too (VTS).
    with pytest.raises(InvalidArgument, match=r"needs NN HAL 1\.3"):
        r.run(hidl.supported_operations(r.session_id, rank5, HalVersion.V1_0))
    assert device.supported_operations(rank5) == [True]  # the 1.3 form carries it
    step = hidl.prepare_launch(r.session_id, add_model(), HalVersion.V1_2, ExecutionPreference.LOW_POWER, None)
    ref = r.launch_prepare(step).get(30)
    r.release_prepared_model(ref.handle)

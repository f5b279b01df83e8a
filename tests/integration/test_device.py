"""Every IDevice / IPreparedModel method across the process boundary: ok and error paths."""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nnhal.client.callbacks import Callback
from nnhal.client.device import Device
from nnhal.conformance.variants import output_bytes
from nnhal.core import wire_model
from nnhal.core.enums import DeviceStatus, DeviceType, ErrorStatus, OperandType, Priority
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import NO_TIMING, DataLocation, InlinePool, Request, RequestArgument
from nnhal.proto import service_pb2 as spb
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, ones, relu_chain
from tests.validation_cases import BASE, INVALID_MODELS, INVALID_REQUESTS

pytestmark = pytest.mark.integration


def _once(cb: Callback) -> list[int]:  # type: ignore[type-arg]
    n = [0]
    cb.add_done_callback(lambda _c: n.__setitem__(0, n[0] + 1))
    return n


def test_static_device_facts(device: Device) -> None:
    caps = device.capabilities()
    assert {p.type for p in caps.operand_performance} >= {OperandType.TENSOR_FLOAT32, OperandType.TENSOR_QUANT8_ASYMM}
    assert device.version_string().startswith("nnhal ")
    assert device.type() == DeviceType.CPU
    assert device.supported_extensions() == ()
    assert device.number_of_cache_files_needed() == (1, 0)
    assert device.status() in (DeviceStatus.AVAILABLE, DeviceStatus.BUSY)
    assert device.feature_level == 80  # the default: the highest level, AIDL V4 (feature level 8)
    assert device.limits()["queue_depth"] == 64


def test_health_and_reflection(server: LocalServer) -> None:
    with grpc.insecure_channel(server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "nnhal.v1.Device", "nnhal.v1.PreparedModel"):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_prepare_and_execute_sync_async(device: Device) -> None:
    cb = device.prepare_model(add_model(), priority=Priority.LOW)
    fired = _once(cb)
    pm = cb.get(30)
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = pm.execute([a, a], measure=True)
    np.testing.assert_array_equal(out.outputs[0], a + a)
    assert out.timing.time_on_device != NO_TIMING and out.timing.time_in_driver >= out.timing.time_on_device
    assert pm.execute([a, a]).timing.time_on_device == NO_TIMING
    acb = pm.execute_async([a, a])
    afired = _once(acb)
    np.testing.assert_array_equal(acb.get(30).outputs[0], a + a)
    time.sleep(0.1)
    assert fired[0] == 1 and afired[0] == 1
    pm.release()


def test_supported_operations_reports_reasons(server: LocalServer, device: Device) -> None:
    assert device.supported_operations(add_model()) == [True]
    with LocalServer("--feature-level", "1.0") as old, Device.connect(old.address) as dev10:
        # A use newer than the device's level is INVALID_ARGUMENT, as the level has no such value (issue #13).
        with pytest.raises(InvalidArgument, match=r"needs NN HAL 1\.3"):
            dev10.supported_operations_with_reasons(relu_chain(1, (1, 2, 2, 2, 2)))
        assert dev10.supported_operations(add_model()) == [True]


@pytest.mark.parametrize("name", sorted(INVALID_MODELS))
def test_invalid_model_over_grpc(device: Device, name: str) -> None:
    model, words = INVALID_MODELS[name]
    cb = device.prepare_model(model)
    fired = _once(cb)
    assert cb.wait(10)
    assert cb.status == ErrorStatus.INVALID_ARGUMENT, cb.message
    assert words in cb.message
    # VTS: every invalid model, a misused ADD included, is INVALID_ARGUMENT here too (issue #13).
    with pytest.raises(InvalidArgument):
        device.supported_operations(model)
    time.sleep(0.05)
    assert fired[0] == 1
    assert device.stats()["sessions"] >= 1  # the server survived


@pytest.mark.parametrize("name", sorted(INVALID_REQUESTS))
def test_invalid_request_over_grpc(device: Device, name: str) -> None:
    request, words = INVALID_REQUESTS[name]
    with device.prepare_model_sync(BASE) as pm:
        outcome = pm.execute_request(request)
        assert outcome.status == ErrorStatus.INVALID_ARGUMENT and words in outcome.message
        cb = pm.execute_request_async(request)
        fired = _once(cb)
        assert cb.wait(10) and cb.status == ErrorStatus.INVALID_ARGUMENT and words in cb.message
        time.sleep(0.05)
        assert fired[0] == 1


def test_invalid_wire_values(device: Device) -> None:
    msg = spb.PrepareModelRequest(session=device.remote.session_id)
    wire_model.model_to(add_model(), msg.model)
    msg.model.main.operands[0].type = 77
    events = list(device.remote.stubs.device.prepareModel_1_3(msg, timeout=10))
    assert events[0].launch.status == ErrorStatus.INVALID_ARGUMENT
    assert "unknown value 77" in events[1].notify.message
    msg.model.main.operands[0].type = (5 << 16) | 1
    events = list(device.remote.stubs.device.prepareModel_1_3(msg, timeout=10))
    assert "extension" in events[1].notify.message
    msg.model.main.operands[0].type = 3
    msg.priority = 7
    events = list(device.remote.stubs.device.prepareModel_1_3(msg, timeout=10))
    assert events[1].notify.status == ErrorStatus.INVALID_ARGUMENT and "priority 7" in events[1].notify.message


def test_invalid_priority_rejected(device: Device) -> None:
    cb = device.prepare_model(add_model(), priority=5)
    assert cb.wait(10) and cb.status == ErrorStatus.INVALID_ARGUMENT


def test_garbage_bytes_do_not_hurt_the_server(server: LocalServer, device: Device) -> None:
    with grpc.insecure_channel(server.address) as channel:
        raw = channel.unary_unary("/nnhal.v1.PreparedModel/executeSynchronously_1_3")
        for blob in (b"\xff" * 64, b"\x0a\xff\xff\xff\xff\x0f", bytes(range(256))):
            with pytest.raises(grpc.RpcError) as info:
                raw(blob, timeout=5)
            assert info.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)
    assert device.capabilities().operand_performance


def test_handles_are_session_scoped(server: LocalServer, device: Device) -> None:
    pm = device.prepare_model_sync(add_model())
    with Device.connect(server.address) as other:
        req = spb.ExecuteRequest(session=other.remote.session_id, prepared_model=pm.handle)
        result = other.remote.stubs.prepared_model.executeSynchronously_1_3(req, timeout=5)
        assert result.status == ErrorStatus.INVALID_ARGUMENT
        bogus = spb.ExecuteRequest(session=other.remote.session_id, prepared_model="0" * 32)
        result2 = other.remote.stubs.prepared_model.executeSynchronously_1_3(bogus, timeout=5)
        assert result2.message == result.message  # existence is not revealed
    pm.release()
    outcome = pm.execute_request(Request((), (), ()))
    assert outcome.status == ErrorStatus.INVALID_ARGUMENT


def test_dynamic_output_shape_and_insufficient_size(device: Device) -> None:
    from dataclasses import replace

    model = add_model()
    main = model.main
    ops = list(main.operands)
    ops[main.output_indexes[0]] = replace(ops[main.output_indexes[0]], dimensions=(0, 0))
    dyn = replace(model, main=replace(main, operands=tuple(ops)))
    with device.prepare_model_sync(dyn) as pm:
        out = pm.execute([ones(), ones()])
        assert out.outputs[0].shape == (2, 4) and out.output_shapes[0].dimensions == (2, 4)
        data = np.ones(8, np.float32).tobytes() * 2
        req = Request(
            (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
            (RequestArgument(location=DataLocation(1, 0, 31)),),
            (InlinePool(data, 64), InlinePool(b"", 31)),
        )
        short = pm.execute_request(req)
        assert short.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE
        assert short.output_shapes[0].dimensions == (2, 4) and not short.output_shapes[0].is_sufficient


def test_compilation_cache_roundtrip_and_tamper(device: Device) -> None:
    token = bytes(range(32))
    pm = device.prepare_model_sync(add_model(), cache_token=token)
    assert pm.model_cache
    cached = device.prepare_model_from_cache(pm.model_cache, token, add_model()).get(30)
    np.testing.assert_array_equal(cached.execute([ones(), ones()]).outputs[0], 2 * ones())
    tampered = bytearray(pm.model_cache)
    tampered[-1] ^= 1
    cb = device.prepare_model_from_cache(bytes(tampered), token)
    assert cb.wait(10) and cb.status == ErrorStatus.INVALID_ARGUMENT and "authentication" in cb.message
    cb2 = device.prepare_model_from_cache(pm.model_cache[:20], token)
    assert cb2.wait(10) and cb2.status == ErrorStatus.INVALID_ARGUMENT
    cb3 = device.prepare_model_from_cache(pm.model_cache, bytes(32))
    assert cb3.wait(10) and cb3.status == ErrorStatus.INVALID_ARGUMENT


def _add_request(value: float = 1.0) -> Request:
    data = np.full(16, value, np.float32).tobytes()
    return Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (InlinePool(data, 64), InlinePool(b"", 32)),
    )


def test_fenced_execution_chain_and_burst(device: Device) -> None:
    with device.prepare_model_sync(add_model()) as pm:
        first = pm.execute_fenced(_add_request(1.0), measure=True)
        second = pm.execute_fenced(_add_request(2.0), wait_for=[first])
        info = second.get_execution_info(wait=True, timeout=10)
        assert info.status == ErrorStatus.NONE
        got = np.frombuffer(output_bytes(_add_request(), info.output_pools[1], 0), np.float32)
        np.testing.assert_array_equal(got, np.full(8, 4.0, np.float32))
        assert first.get_execution_info().timing.time_on_device != NO_TIMING
        with pm.burst() as burst:
            for v in (1.0, 3.0):
                o = burst.execute(_add_request(v))
                assert o.status == ErrorStatus.NONE
                assert np.frombuffer(o.output_pools[1], np.float32)[0] == 2 * v


def test_callbacks_fire_once_on_async_error(device: Device) -> None:
    with device.prepare_model_sync(relu_chain(4)) as pm:
        device.set_faults(execute_delay_ms=300)
        try:
            cb = pm.execute_async([np.ones((1, 64), np.float32)], timeout=0.1)
            fired = _once(cb)
            assert cb.wait(10)
            assert cb.status in (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
            time.sleep(0.1)
            assert fired[0] == 1
        finally:
            device.set_faults()


def test_concurrent_clients_share_the_device(server: LocalServer) -> None:
    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            with Device.connect(server.address) as dev, dev.prepare_model_sync(add_model()) as pm:
                for _ in range(20):
                    a = np.full((2, 4), k, np.float32)
                    np.testing.assert_array_equal(pm.execute([a, a]).outputs[0], 2 * a)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_reflection_lists_the_services(server: LocalServer) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    with grpc.insecure_channel(server.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
        names = {s.name for r in replies for s in r.list_services_response.service}
    assert {"nnhal.v1.Device", "nnhal.v1.PreparedModel", "nnhal.v1.Buffer", "grpc.health.v1.Health"} <= names


def test_prepared_model_released_on_garbage_collection(device: Device) -> None:
    import gc

    before = device.stats()["prepared_models"]
    pm = device.prepare_model_sync(add_model())
    assert device.stats()["prepared_models"] == before + 1
    del pm
    gc.collect()
    deadline = time.monotonic() + 5
    while device.stats()["prepared_models"] != before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert device.stats()["prepared_models"] == before

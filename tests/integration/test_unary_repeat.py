"""Unary repeated layouts across processes: a real ``nnhal serve --no-fast-path`` and the public
client's ``pm.execute`` (numpy) and ``execute_request`` (the canonical ``executeSynchronously_1_3``).
Repeated calls (answered from their bytes by the device's ``executions.repeats.Repeats``) give
the full path's outputs; measure, a deadline, a profile, another data size, a released model, a
closed session and an armed fault are answered as the full path answers them; the device's
counts are as before and the session's standing charge is given back as the session closes."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from nnhal.bench import ipc
from nnhal.client.device import Device
from nnhal.client.faults import Fault
from nnhal.core import wire_request
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import InlinePool, Request
from nnhal.proto import service_pb2 as spb
from nnhal.testing.local_server import LocalServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
SYNC = "executeSynchronously_1_3"


@pytest.fixture(scope="module")
def server() -> Iterator[LocalServer]:
    with LocalServer("--cache-secret-file", "none", "--no-fast-path", "--enable-fault-injection") as srv:
        yield srv


@pytest.fixture
def device(server: LocalServer) -> Iterator[Device]:
    with Device.connect(server.address, client_name="unary-repeats") as dev:
        yield dev


def _request(value: float) -> tuple[Request, np.ndarray]:
    a, b = ipc._small_inputs()
    return ipc._small_request(a * value, b), a * value + b


def _got(outcome: object) -> np.ndarray:
    pools = outcome.output_pools  # type: ignore[attr-defined]
    return np.frombuffer(pools[1], np.float32).reshape(ipc.SMALL_SHAPE)


def test_repeated_calls_answer_right_and_count_as_before(device: Device) -> None:
    a, b = ipc._small_inputs()
    with device.prepare_model_sync(ipc._add_model()) as pm:
        for _ in range(3):
            pm.execute([a, b])  # its duration known, its layout's Repeat made
        before = device.stats()
        for value in range(1, 41):
            outcome = pm.execute([a * value, b])
            np.testing.assert_array_equal(outcome.outputs[0], a * value + b)
            request, expected = _request(float(value))
            canonical = pm.execute_request(request)
            assert canonical.status == ErrorStatus.NONE
            np.testing.assert_array_equal(_got(canonical), expected)
        after = device.stats()
        assert after["executions"] - before["executions"] == 80
        assert after["bytes_in_use"] == before["bytes_in_use"]  # the session's standing charge, kept as before


def test_what_is_not_a_repeat_is_answered_as_the_full_path_answers_it(device: Device) -> None:
    a, b = ipc._small_inputs()
    with device.prepare_model_sync(ipc._add_model()) as pm:
        for value in (1.0, 2.0, 3.0):
            np.testing.assert_array_equal(pm.execute([a * value, b]).outputs[0], a * value + b)
        measured = pm.execute([a, b], measure=True)
        assert measured.timing.time_on_device != 2**64 - 1
        timed = pm.execute([a, b], timeout=30.0)
        profiled = pm.execute([a, b], profile=True)
        assert profiled.profile
        for outcome in (measured, timed, profiled):
            np.testing.assert_array_equal(outcome.outputs[0], a + b)
        request, expected = _request(4.0)
        for _ in range(3):  # the canonical request's layout (two pools) repeats too
            np.testing.assert_array_equal(_got(pm.execute_request(request)), expected)
        data = a.tobytes() + a.tobytes()[:16]  # the second input's last half zero-padded
        padded = pm.execute_request(Request(request.inputs, request.outputs, (InlinePool(data, 64), request.pools[1])))
        np.testing.assert_array_equal(
            _got(padded), a + np.concatenate([a.ravel()[:4], np.zeros(4, np.float32)]).reshape(2, 4)
        )
        device.inject_faults(Fault.error(SYNC, ErrorStatus.GENERAL_FAILURE))
        try:
            faulted = pm.execute_request(request)
        finally:
            device.clear_faults()
        assert faulted.status == ErrorStatus.GENERAL_FAILURE and "injected fault" in faulted.message
        np.testing.assert_array_equal(_got(pm.execute_request(request)), expected)
        pm.release()
        for _ in range(2):  # the stale layout found, then dropped: the full path's refusal both times
            refused = pm.execute_request(request)
            assert refused.status == ErrorStatus.INVALID_ARGUMENT and "prepared model" in refused.message


def test_a_closed_sessions_calls_get_the_full_paths_status_and_its_charge_back(server: LocalServer) -> None:
    a, b = ipc._small_inputs()
    with Device.connect(server.address, client_name="watcher") as watcher:
        baseline = watcher.stats()["bytes_in_use"]
        dev = Device.connect(server.address, client_name="closing")
        pm = dev.prepare_model_sync(ipc._add_model())
        for value in range(5):
            np.testing.assert_array_equal(pm.execute([a * value, b]).outputs[0], a * value + b)
        assert watcher.stats()["bytes_in_use"] > baseline  # its model and its standing charge
        sid, handle = dev.remote.session_id, pm.handle
        request, _ = _request(1.0)
        for _ in range(3):
            assert pm.execute_request(request).status == ErrorStatus.NONE
        dev.close()
        with pytest.raises(HalError):
            pm.execute([a, b])  # a closed client: refused
        assert watcher.stats()["bytes_in_use"] == baseline
        # The closed session's message, sent by another client: the full path's refusal.
        msg = spb.ExecuteRequest(session=sid, prepared_model=handle)
        wire_request.request_to(request, msg.request)
        for _ in range(2):
            refused = watcher.remote.stubs.prepared_model.executeSynchronously_1_3(msg, timeout=20.0)
            assert refused.status == ErrorStatus.INVALID_ARGUMENT and not refused.output_pools

"""A burst's repeated layout across processes: a real ``nnhal serve --no-fast-path`` and the
public client's ``Burst``. Repeated messages (answered from their bytes by the stream's
``executions.repeat.Repeat``) give the full path's outputs; measure, a deadline, another data
size, a released model and an armed fault are answered as the full path answers them; the
device's counts and its bytes in use are as before (the standing charge given back as the
stream ends)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from nnhal.bench import ipc
from nnhal.client.device import Device
from nnhal.client.faults import Fault
from nnhal.core.enums import ErrorStatus
from nnhal.core.types import InlinePool, Request
from nnhal.testing.local_server import LocalServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def device() -> Iterator[Device]:
    with (
        LocalServer("--cache-secret-file", "none", "--no-fast-path", "--enable-fault-injection") as srv,
        Device.connect(srv.address, client_name="repeats") as dev,
    ):
        yield dev


def _request(value: float) -> tuple[Request, np.ndarray]:
    a, b = ipc._small_inputs()
    return ipc._small_request(a * value, b), a * value + b


def test_repeated_messages_answer_right_and_count_as_before(device: Device) -> None:
    with device.prepare_model_sync(ipc._add_model()) as pm:
        pm.execute(list(ipc._small_inputs()))  # run once: its duration known
        before = device.stats()
        with pm.burst() as burst:
            for value in range(1, 41):
                request, expected = _request(float(value))
                outcome = burst.execute(request)
                assert outcome.status == ErrorStatus.NONE
                got = np.frombuffer(outcome.output_pools[1], np.float32).reshape(ipc.SMALL_SHAPE)
                np.testing.assert_array_equal(got, expected)
            during = device.stats()
            assert during["executions"] - before["executions"] == 40
            assert during["bytes_in_use"] > before["bytes_in_use"]  # the stream's standing charge
        for _ in range(200):  # the stream's end is the server's, after the client's
            if device.stats()["bytes_in_use"] == before["bytes_in_use"]:
                break
            time.sleep(0.02)
        assert device.stats()["bytes_in_use"] == before["bytes_in_use"]


def test_what_is_not_a_repeat_is_answered_as_the_full_path_answers_it(device: Device) -> None:
    with device.prepare_model_sync(ipc._add_model()) as pm:
        pm.execute(list(ipc._small_inputs()))
        with pm.burst() as burst:
            for value in (1.0, 2.0, 3.0):
                assert burst.execute(_request(value)[0]).status == ErrorStatus.NONE
            request, expected = _request(4.0)
            measured = burst.execute(request, measure=True)
            assert measured.status == ErrorStatus.NONE and measured.timing.time_on_device != 2**64 - 1
            timed = burst.execute(request, timeout=30.0)
            assert timed.status == ErrorStatus.NONE
            for outcome in (measured, timed):
                got = np.frombuffer(outcome.output_pools[1], np.float32).reshape(ipc.SMALL_SHAPE)
                np.testing.assert_array_equal(got, expected)
            a, _ = ipc._small_inputs()
            data = a.tobytes() + a.tobytes()[:16]  # the second input's last half zero-padded
            padded = burst.execute(Request(request.inputs, request.outputs, (InlinePool(data, 64), request.pools[1])))
            got = np.frombuffer(padded.output_pools[1], np.float32).reshape(ipc.SMALL_SHAPE)
            np.testing.assert_array_equal(
                got, a + np.concatenate([a.ravel()[:4], np.zeros(4, np.float32)]).reshape(2, 4)
            )
            device.inject_faults(Fault.error("configureExecutionBurst", ErrorStatus.GENERAL_FAILURE))
            try:
                faulted = burst.execute(request)
            finally:
                device.clear_faults()
            assert faulted.status == ErrorStatus.GENERAL_FAILURE and "injected fault" in faulted.message
            assert burst.execute(request).status == ErrorStatus.NONE
            pm.release()
            refused = burst.execute(request)
            assert refused.status == ErrorStatus.INVALID_ARGUMENT and "prepared model" in refused.message

"""Partitioning across devices and servers (nnhal.client.partition), across processes.

One server hosting {cpu, ort}: a model whose middle operation the ort device does not
support runs as three steps (ort, cpu, ort) and matches the CPU device alone; a result
the first step writes for the third stays in the server in a driver-managed buffer,
freed with the model. Two
servers with one device each: the partitioner uses both, and killing one while its
step runs releases the waiter with DEAD_OBJECT at once.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest

from nnhal.client.device import Device, list_devices
from nnhal.client.partition import Partitioner
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import ErrorStatus, OperandType as T, OperationType as O
from nnhal.core.errors import GeneralFailure, HalError
from nnhal.core.types import Model
from nnhal.testing.local_server import LocalServer

pytestmark = pytest.mark.integration
SHAPE = (1, 6, 6, 3)


def sandwich() -> Model:
    """CONV_2D → LOCAL_RESPONSE_NORMALIZATION (no ort conversion) → CONV_2D, float32 NHWC."""
    rng = np.random.default_rng(0)
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, SHAPE)
    w1 = b.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    c1 = b.op(
        O.CONV_2D, [x, w1, b.constant(np.zeros(4, np.float32)), *b.ints(1, 1, 1, 1)], T.TENSOR_FLOAT32, [1, 6, 6, 4]
    )
    n = b.op(O.LOCAL_RESPONSE_NORMALIZATION, [c1, *_lrn(b)], T.TENSOR_FLOAT32, [1, 6, 6, 4])
    w2 = b.constant(rng.standard_normal((2, 1, 1, 4)).astype(np.float32))
    c2 = b.op(
        O.CONV_2D, [n, w2, b.constant(np.ones(2, np.float32)), *b.ints(1, 1, 1, 0)], T.TENSOR_FLOAT32, [1, 6, 6, 2]
    )
    return b.outputs(c2).finish()


def _lrn(b: ModelBuilder) -> list[int]:
    """LOCAL_RESPONSE_NORMALIZATION's radius, bias, alpha, beta (the ort device has no conversion)."""
    return [b.int32(1), b.float32(1.0), b.float32(1.0), b.float32(0.5)]


def shared_temporary() -> Model:
    """c = CONV_2D(x); n = LOCAL_RESPONSE_NORMALIZATION(c) (no ort conversion); r = RELU(c);
    out = CONV_2D(n + r): steps ort [CONV_2D, RELU], cpu [LOCAL_RESPONSE_NORMALIZATION], ort [ADD,
    CONV_2D], and r goes from the first step to the third on the ort device."""
    rng = np.random.default_rng(3)
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, SHAPE)
    w1 = b.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    c = b.op(
        O.CONV_2D, [x, w1, b.constant(np.zeros(4, np.float32)), *b.ints(1, 1, 1, 0)], T.TENSOR_FLOAT32, [1, 6, 6, 4]
    )
    n = b.op(O.LOCAL_RESPONSE_NORMALIZATION, [c, *_lrn(b)], T.TENSOR_FLOAT32, [1, 6, 6, 4])
    r = b.op(O.RELU, [c], T.TENSOR_FLOAT32, [1, 6, 6, 4])
    s = b.op(O.ADD, [n, r, b.int32(0)], T.TENSOR_FLOAT32, [1, 6, 6, 4])
    w2 = b.constant(rng.standard_normal((2, 1, 1, 4)).astype(np.float32))
    out = b.op(
        O.CONV_2D, [s, w2, b.constant(np.ones(2, np.float32)), *b.ints(1, 1, 1, 0)], T.TENSOR_FLOAT32, [1, 6, 6, 2]
    )
    return b.outputs(out).finish()


@pytest.fixture(scope="module")
def two_devices() -> Iterator[LocalServer]:
    with LocalServer("--device", "cpu", "--device", "ort:strict", "--cache-secret-file", "none") as srv:
        yield srv


def _reference(address: str, model: Model, x: np.ndarray) -> np.ndarray:
    """The output on the server's default device (the CPU reference)."""
    with Device.connect(address) as cpu, cpu.prepare_model_sync(model) as pm:
        return pm.execute([x]).outputs[0]


def test_the_server_lists_both_devices(two_devices: LocalServer) -> None:
    devices = list_devices(two_devices.address)
    assert [(d.name, d.kind) for d in devices] == [("cpu", "cpu"), ("ort", "ort")]
    with Device.connect(two_devices.address, device="ort") as ort:
        assert ort.name == "ort" and "ONNX Runtime" in ort.version_string()


def test_info_lists_every_device(two_devices: LocalServer) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nnhal", "info", two_devices.address], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "cpu (default)" in done.stdout and "device ort" in done.stdout and "ONNX Runtime" in done.stdout


def test_an_unknown_device_is_refused_naming_the_devices(two_devices: LocalServer) -> None:
    with pytest.raises(HalError, match="no device named 'gpu'; its devices: cpu, ort"):
        Device.connect(two_devices.address, device="gpu")


def test_a_middle_operation_the_ort_device_lacks_runs_as_three_steps(two_devices: LocalServer) -> None:
    model, x = sandwich(), np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    with Device.connect(two_devices.address, device="ort") as ort, Device.connect(two_devices.address) as cpu:
        support = ort.supported_operations_with_reasons(model)
        assert [ok for ok, _ in support] == [True, False, True]
        assert "LOCAL_RESPONSE_NORMALIZATION" in support[1][1]
        with Partitioner([ort, cpu], fallback=cpu).prepare(model) as pm:
            rows = pm.plan.rows()
            assert [(device, step) for _, _, device, step, _ in rows] == [("ort", 0), ("cpu", 1), ("ort", 2)]
            assert pm.plan.operations_per_device() == {"ort": 2, "cpu": 1}
            assert "not supported by ort" in rows[1][4]
            out = pm.execute([x])[0]
    np.testing.assert_allclose(out, _reference(two_devices.address, model, x), rtol=1e-5, atol=1e-5)


def test_a_temporary_between_steps_on_one_device_stays_in_a_driver_buffer(two_devices: LocalServer) -> None:
    model, x = shared_temporary(), np.random.default_rng(4).standard_normal(SHAPE).astype(np.float32)
    with Device.connect(two_devices.address, device="ort") as ort, Device.connect(two_devices.address) as cpu:
        before = ort.stats()["buffers"]
        pm = Partitioner([ort, cpu], fallback=cpu).prepare(model)
        assert [(s.device, len(s.operations)) for s in pm.plan.steps] == [(0, 2), (1, 1), (0, 2)]
        kinds = {(t.producer, t.consumers): t.kind for t in pm.plan.temporaries}
        # c: ort -> cpu, n: cpu -> ort (inline); r: ort step 0 -> ort step 2 (a driver buffer).
        assert kinds == {(0, (1,)): "inline", (1, (2,)): "inline", (0, (2,)): "driver buffer"}
        assert "driver buffer" in str(pm.plan)
        assert ort.stats()["buffers"] == before + 1
        expected = _reference(two_devices.address, model, x)
        for _ in range(2):  # the buffer is written and read again by the next execution
            np.testing.assert_allclose(pm.execute([x])[0], expected, rtol=1e-5, atol=1e-5)
        pm.release()
        assert ort.stats()["buffers"] == before


def test_an_allocation_the_device_refuses_leaves_the_temporary_inline(
    two_devices: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, x = shared_temporary(), np.random.default_rng(5).standard_normal(SHAPE).astype(np.float32)
    with Device.connect(two_devices.address, device="ort") as ort, Device.connect(two_devices.address) as cpu:

        def refuse(*args: object) -> None:
            raise GeneralFailure("no memory for a buffer")

        monkeypatch.setattr(ort, "allocate", refuse)
        with Partitioner([ort, cpu], fallback=cpu).prepare(model) as pm:
            assert pm.plan.driver_buffers() == ()
            refused = [t.why for t in pm.plan.temporaries if "allocate refused" in t.why]
            assert refused == ["allocate refused (GENERAL_FAILURE: no memory for a buffer)"]
            out = pm.execute([x])[0]
    np.testing.assert_allclose(out, _reference(two_devices.address, model, x), rtol=1e-5, atol=1e-5)


def test_two_servers_are_both_used_and_a_killed_one_is_dead_object_at_once() -> None:
    model, x = sandwich(), np.random.default_rng(2).standard_normal(SHAPE).astype(np.float32)
    with (
        LocalServer("--device", "ort:strict", "--cache-secret-file", "none") as a,
        LocalServer("--enable-fault-injection", "--cache-secret-file", "none") as b,
        Device.connect(a.address) as ort,
        Device.connect(b.address) as cpu,
    ):
        pm = Partitioner([ort, cpu], fallback=cpu).prepare(model)
        assert [s.device for s in pm.plan.steps] == [0, 1, 0]
        np.testing.assert_allclose(pm.execute([x])[0], _reference(b.address, model, x), rtol=1e-5, atol=1e-5)
        cpu.set_faults(execute_delay_ms=60_000)
        cb = pm.execute_async([x])
        end = time.monotonic() + 30
        while cpu.stats()["queue_depth"] == 0 and time.monotonic() < end:  # the cpu step is running
            time.sleep(0.02)
        assert cpu.stats()["queue_depth"] == 1
        b.kill()
        # Well before the injected 60 s delay could end: the death, not the step, ends the wait.
        assert cb.wait(30)
        assert cb.status == ErrorStatus.DEAD_OBJECT, cb.message

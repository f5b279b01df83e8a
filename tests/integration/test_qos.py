"""Quality of service across the process boundary (VTS QualityOfServiceTests / DeadlineTest
over public conformance models, pre-emption, overload, resource limits)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nnhal.client.device import Device
from nnhal.conformance.compare import compare_case
from nnhal.conformance.variants import build_request, output_bytes
from nnhal.conformance.vectors import TestCase, load_file
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import ErrorStatus, OperandType as T, OperationType as O, Priority
from nnhal.core.errors import ResourceExhaustedPersistent, ResourceExhaustedTransient
from nnhal.core.types import DataLocation, InlinePool, Model, PoolData, Request, RequestArgument
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, one_io_request, ones, relu_chain

pytestmark = pytest.mark.integration
VECTORS = Path(__file__).resolve().parents[2] / "conformance" / "vectors"
MISSED = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)
DEADLINES = {"NOW": 0.0, "SHORT": 0.005, "UNLIMITED": None}


def _public_models(device: Device, limit: int = 12) -> list[TestCase]:
    cases: list[TestCase] = []
    for name in ("add", "relu", "conv_float", "avg_pool_float_1", "softmax_float_1", "fully_connected_float", "mul"):
        path = VECTORS / "V1_0" / f"{name}.json.gz"
        if path.exists():
            for case in load_file(path):
                if not case.expect_failure and all(device.supported_operations(case.model)):
                    cases.append(case)
    return cases[:limit]


def _check_values(case: TestCase, pools: dict[int, PoolData]) -> None:
    request = build_request(case)
    actual = [output_bytes(request, pools.get(1, b""), k) for k in range(len(case.outputs))]
    assert compare_case(case, list(case.inputs), actual) is None


@pytest.mark.parametrize("priority", list(Priority))
def test_prepare_with_each_priority(device: Device, priority: Priority) -> None:
    for case in _public_models(device, 4):
        with device.prepare_model_sync(case.model, priority=priority) as pm:
            outcome = pm.execute_request(build_request(case))
            assert outcome.status == ErrorStatus.NONE
            _check_values(case, outcome.output_pools)


@pytest.mark.parametrize("kind", list(DEADLINES))
def test_deadlines_on_prepare_and_executions(device: Device, kind: str) -> None:
    timeout = DEADLINES[kind]
    cases = _public_models(device)
    assert cases
    for case in cases:
        cb = device.prepare_model(case.model, timeout=timeout)
        assert cb.wait(30)
        if kind == "UNLIMITED":
            assert cb.status == ErrorStatus.NONE, cb.message
        else:
            assert cb.status in (ErrorStatus.NONE, *MISSED), cb.status
        with device.prepare_model_sync(case.model) as pm:
            for run_async in (False, True):
                request = build_request(case)
                if run_async:
                    acb = pm.execute_request_async(request, timeout=timeout)
                    assert acb.wait(30)
                    outcome = acb.value
                    assert outcome is not None
                else:
                    outcome = pm.execute_request(request, timeout=timeout)
                if kind == "UNLIMITED":
                    assert outcome.status == ErrorStatus.NONE, outcome.message
                else:
                    assert outcome.status in (ErrorStatus.NONE, *MISSED), outcome.status
                if outcome.status == ErrorStatus.NONE:
                    _check_values(case, outcome.output_pools)


def test_deadline_shorter_than_any_run_is_refused_at_launch(device: Device) -> None:
    model = relu_chain(300, (64, 4096))
    x = np.ones((64, 4096), np.float32)
    with device.prepare_model_sync(model) as pm:
        full = pm.execute([x], measure=True).timing.time_on_device / 1e6
        outcome = pm.execute_request(one_io_request(x), timeout=full / 10)
        assert outcome.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT
        assert "refused at launch" in outcome.message


def test_deadline_passed_before_launch_is_persistent(device: Device) -> None:
    with device.prepare_model_sync(add_model()) as pm:
        outcome = pm.execute_request(build_request_add(), deadline_at=time.monotonic() - 1)
        assert outcome.status == ErrorStatus.MISSED_DEADLINE_PERSISTENT


def build_request_add() -> Request:
    data = np.ones(16, np.float32).tobytes()
    return Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (InlinePool(data, 64), InlinePool(b"", 32)),
    )


def test_deadline_expiring_mid_execution_is_reported_promptly(device: Device) -> None:
    # Long enough that a quiet machine's fastest run stays well over the 50 ms below (2,000
    # operations ran in 44 ms there: the check refused a machine for being fast).
    n_ops = 6000
    model = relu_chain(n_ops, (64, 4096))
    x = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)
    with device.prepare_model_sync(model) as pm:
        # The fastest of three runs: a run measured while the machine was busier than during
        # the timed one would give a budget the timed run could finish within.
        total = min(pm.execute([x], measure=True).timing.time_on_device for _ in range(3)) / 1e6
        per_op = total / n_ops
        assert total > 0.05, f"chain too fast to test ({total * 1e3:.1f} ms)"
        budget = total / 4
    # A fresh prepared model has no run history, so the driver cannot refuse at launch:
    # the deadline must stop the execution at an operation boundary.
    with device.prepare_model_sync(model) as pm:
        t0 = time.monotonic()
        outcome = pm.execute_request_async(one_io_request(x), timeout=budget)
        assert outcome.wait(30)
        late = time.monotonic() - (t0 + budget)
        assert outcome.status in MISSED
        assert "during execution" in outcome.message, outcome.message
        # The status proves the execution was stopped at an operation boundary (a run that
        # finished would be NONE). How soon after the deadline a loaded 2-core machine lets the
        # server report it is not the server's to promise: the bound is generous (well before
        # the rest of the chain could have run on the earlier measurement, and at least a second,
        # which a 2-core machine at a load average of 10 still keeps: 318 ms late was seen there).
        bound = max(1.0, 0.5 * (total - budget))
        assert late <= bound, (
            f"reported {late * 1e3:.1f} ms after the deadline (op {per_op * 1e3:.2f} ms, bound {bound * 1e3:.0f} ms)"
        )


def test_high_priority_preempts_low_of_the_same_client(device: Device) -> None:
    long_model = relu_chain(6000, (64, 4096))  # ≈ 130 ms a run on a quiet machine: still running at the HIGH call
    x = np.ones((64, 4096), np.float32)
    with (
        device.prepare_model_sync(long_model, priority=Priority.LOW) as low,
        device.prepare_model_sync(add_model(), priority=Priority.HIGH) as high,
    ):
        done: dict[str, float] = {}
        low_cbs = [low.execute_async([x]) for _ in range(2)]

        def low_done(_c: object) -> None:
            done.setdefault("low", time.monotonic())

        for cb in low_cbs:
            cb.add_done_callback(low_done)
        time.sleep(0.05)
        t0 = time.monotonic()
        out = high.execute([ones(), ones()])
        t_high = time.monotonic() - t0
        done["high"] = time.monotonic()
        np.testing.assert_array_equal(out.outputs[0], 2 * ones())
        for cb in low_cbs:
            np.testing.assert_array_equal(cb.get(60).outputs[0], x)
        assert done["high"] < done["low"], "HIGH finished after LOW"
        assert t_high < 2.0  # far below the LOW chain it overtook; generous for a loaded machine


def test_overload_sheds_with_resource_exhausted_transient() -> None:
    with LocalServer("--enable-fault-injection", "--slots", "2", "--queue-depth", "8") as srv:
        n = 50
        barrier = threading.Barrier(n, timeout=60)
        results: list[tuple[ErrorStatus, bool]] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def client(k: int) -> None:
            try:
                with (
                    Device.connect(srv.address, client_name=f"load-{k}") as dev,
                    dev.prepare_model_sync(add_model()) as pm,
                ):
                    dev.set_faults(execute_delay_ms=300)
                    a = np.full((2, 4), k, np.float32)
                    barrier.wait()
                    try:
                        out = pm.execute([a, a], timeout=30)
                        ok = bool(np.array_equal(out.outputs[0], 2 * a))
                        status = ErrorStatus.NONE
                    except ResourceExhaustedTransient:
                        status, ok = ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, True
                    with lock:
                        results.append((status, ok))
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(n)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        assert not any(t.is_alive() for t in threads), "a client hung"
        assert not errors, errors[:3]
        accepted = [ok for status, ok in results if status == ErrorStatus.NONE]
        shed = [s for s, _ in results if s == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT]
        assert len(results) == n
        assert len(accepted) >= 10 and shed, (len(accepted), len(shed))
        assert all(accepted), "an accepted execution returned a wrong result"
        assert time.monotonic() - t0 < 90
        import grpc

        with grpc.insecure_channel(srv.address) as channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        with Device.connect(srv.address) as dev:
            stats = dev.stats()
            assert stats["queue_depth"] == 0 and stats["prepared_models"] == 0


def _model_with_constant(nbytes: int) -> Model:
    b = ModelBuilder()
    n = nbytes // 4
    x = b.input(T.TENSOR_FLOAT32, [n])
    c = b.constant(np.zeros(n, np.float32))
    return b.outputs(b.op(O.ADD, [x, c, b.int32(0)], T.TENSOR_FLOAT32, [n])).finish()


def test_memory_limits_transient_and_persistent() -> None:
    with LocalServer("--memory-per-client", "100000") as srv, Device.connect(srv.address) as dev:
        with pytest.raises(ResourceExhaustedPersistent):
            dev.prepare_model_sync(_model_with_constant(200_000))
        first = dev.prepare_model_sync(_model_with_constant(60_000))
        with pytest.raises(ResourceExhaustedTransient):
            dev.prepare_model_sync(_model_with_constant(60_000))
        first.release()
        dev.prepare_model_sync(_model_with_constant(60_000)).release()
        assert dev.limits()["memory_per_client"] == 100000


def test_session_limit_is_transient_and_frees_up() -> None:
    with LocalServer("--max-sessions", "2") as srv:
        a = Device.connect(srv.address)
        b = Device.connect(srv.address)
        with pytest.raises(ResourceExhaustedTransient):
            Device.connect(srv.address, timeout=5)
        a.close()
        deadline = time.monotonic() + 5
        while True:
            try:
                c = Device.connect(srv.address, timeout=5)
                break
            except ResourceExhaustedTransient:
                assert time.monotonic() < deadline, "the closed session's slot never came back"
                time.sleep(0.05)
        assert c.capabilities().operand_performance
        b.close()
        c.close()

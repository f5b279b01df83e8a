"""A connection that grants no HTTP/2 flow-control window cannot wedge the device (issue #24).

The attacker answers PINGs and SETTINGS (keepalive sees a live peer) but never lets the
server write a message, and starts more ``execute_1_3`` calls than the device has slots
and queue places. Their launch statuses are never written, so they never take a scheduler
ticket: the victim's executions, in both forms, are all NONE meanwhile.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.remote.messages import ExecutionOptions, execute_request
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import ErrorStatus, OperandType as T, OperationType as O
from nnhal.core.types import DataLocation, InlinePool, Model, Request, RequestArgument
from nnhal.proto import service_pb2 as spb
from nnhal.testing.local_server import LocalServer
from tests.adversarial.conftest import chaos, prepared_small, victim_runs
from tests.adversarial.raw_h2 import ZeroWindowClient
from tests.conftest import one_io_request, ones

pytestmark = pytest.mark.integration

EXECUTE_1_3 = "/nnhal.v1.PreparedModel/execute_1_3"
EXECUTE_SYNC = "/nnhal.v1.PreparedModel/executeSynchronously_1_3"
BURST = "/nnhal.v1.PreparedModel/configureExecutionBurst"


@pytest.mark.timeout(120)
def test_zero_window_execute_calls_leave_the_device_to_the_victim() -> None:
    calls = 70  # more than slots + queue depth (2 + 64): before #24 this refused everyone else
    with LocalServer("--slots", "2", "--queue-depth", "64") as srv:
        host, port = srv.address.rsplit(":", 1)
        with Device.connect(srv.address, client_name="attacker") as attacker, prepared_small(attacker) as apm:
            msg, _ = execute_request(attacker.remote.session_id, apm.handle, one_io_request(ones()), ExecutionOptions())
            raw = ZeroWindowClient(host, int(port))
            stop = threading.Event()

            def pumping() -> None:
                for _ in range(600):
                    if not stop.is_set():
                        raw.pump(0.2)

            pump = threading.Thread(target=pumping)
            try:
                for _ in range(calls):
                    raw.start(EXECUTE_1_3, msg.SerializeToString())
                pump.start()
                with Device.connect(srv.address, client_name="victim") as victim, prepared_small(victim) as vpm:
                    statuses = victim_runs(vpm, chaos(40, 400))
                    stats = victim.stats()
            finally:
                stop.set()
                if pump.is_alive():
                    pump.join(10)
                raw.close()
    assert statuses and set(statuses) == {ErrorStatus.NONE}, statuses
    assert stats["queue_depth"] <= 2  # the stalled calls hold no ticket


@pytest.mark.timeout(120)
def test_burst_answers_a_zero_window_connection_never_takes_hold_no_slot() -> None:
    """Bursts whose every answer waits in the transport, one per slot: each ran, and its
    answer waits for window that never comes. The work an execution leaves for after its
    answer (its slot given back: ``executions.afterwards``) runs once the answer was handed
    to gRPC, not once the write completes, so the device's slots are free meanwhile."""
    with LocalServer("--slots", "2") as srv:
        host, port = srv.address.rsplit(":", 1)
        with Device.connect(srv.address, client_name="attacker") as attacker, prepared_small(attacker) as apm:
            msg, _ = execute_request(attacker.remote.session_id, apm.handle, one_io_request(ones()), ExecutionOptions())
            body = spb.BurstRequest(execute=msg).SerializeToString()
            raw = ZeroWindowClient(host, int(port))
            try:
                for _ in range(2):
                    raw.start(BURST, body)
                held = -1
                for _ in range(50):  # at most ≈ 10 s: both bursts ran, their answers unwritten
                    raw.pump(0.2)
                    stats = attacker.stats()
                    held = stats["queue_depth"]
                    if stats["executions"] >= 2 and held == 0:
                        break
                with Device.connect(srv.address, client_name="victim") as victim, prepared_small(victim) as vpm:
                    statuses = victim_runs(vpm, chaos(10, 100))
            finally:
                raw.close()
    assert stats["executions"] >= 2, stats  # both bursts' executions ran
    assert held == 0, f"{held} slots held by answers a client does not take"
    assert statuses and set(statuses) == {ErrorStatus.NONE}, statuses


#: Elements of the widening model's output: 256 KiB of float32, past the 64 KiB window.
WIDE = 64 * 1024


def _widening_model() -> Model:
    """out = x (1 x 1) + a constant (1 x WIDE): a 4-byte request, a 256 KiB answer."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, (1, 1))
    wide = b.constant(np.zeros((1, WIDE), np.float32))
    return b.outputs(b.op(O.ADD, [x, wide, b.int32(0)], T.TENSOR_FLOAT32, (1, WIDE))).finish()


@pytest.mark.timeout(120)
def test_large_unary_answers_a_zero_window_connection_never_takes_are_refused_in_time() -> None:
    """One large unary answer per connection waits in the transport; the next ones are
    refused RESOURCE_EXHAUSTED (trailers only, which need no window) once the first was not
    taken within the write bound (10 s), and their answers are dropped."""
    with LocalServer() as srv:
        host, port = srv.address.rsplit(":", 1)
        with (
            Device.connect(srv.address, client_name="attacker") as attacker,
            attacker.prepare_model_sync(_widening_model()) as apm,
        ):
            request = Request(  # a 4-byte input, a 256 KiB answer
                (RequestArgument(location=DataLocation(0, 0, 4)),),
                (RequestArgument(location=DataLocation(1, 0, WIDE * 4)),),
                (InlinePool(np.ones(1, np.float32).tobytes(), 4), InlinePool(b"", WIDE * 4)),
            )
            msg, _ = execute_request(attacker.remote.session_id, apm.handle, request, ExecutionOptions())
            raw = ZeroWindowClient(host, int(port))
            try:
                streams = [raw.start(EXECUTE_SYNC, msg.SerializeToString()) for _ in range(3)]
                for _ in range(150):  # at most 30 s
                    raw.pump(0.2)
                    if len([s for s in streams if s in raw.ended]) >= 2:
                        break
                ended = [s for s in streams if s in raw.ended]
            finally:
                raw.close()
            with prepared_small(attacker) as small:
                statuses = victim_runs(small, 4)
    assert len(ended) == 2, raw.ended  # the first answer waits in the transport, the others were refused
    assert set(statuses) == {ErrorStatus.NONE}

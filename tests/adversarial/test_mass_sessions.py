"""An attacker with many plaintext sessions in one process, each holding never-read
``execute_1_3`` streams and open bursts, cannot shut a newcomer out (issue #24): the
newcomer connects, prepares and executes, and the server's memory stays bounded.

Without TLS each session is a client: the fair shares of the memory total and of the
long-lived calls keep room for a client below its share.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.remote.messages import ExecutionOptions, execute_request
from nnhal.core.enums import ErrorStatus
from nnhal.proto import service_pb2 as spb, service_pb2_grpc as sgrpc
from nnhal.testing.local_server import LocalServer
from tests.adversarial.conftest import chaos, let_go, prepared_small, victim_runs
from tests.adversarial.test_message_caps import MARGIN, PeakRss
from tests.conftest import one_io_request, relu_chain

pytestmark = pytest.mark.integration

MiB = 1 << 20
#: A connection of its own per attacker (channels with the same options share one by default).
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 1 << 30), ("grpc.use_local_subchannel_pool", 1)]
PER_CLIENT, TOTAL = 8 * MiB, 64 * MiB


def _idle(stop: threading.Event) -> Iterator[spb.BurstRequest]:
    """A burst's requests: none, until the test ends (the stream stays open and idle)."""
    stop.wait(120)
    yield from ()


@pytest.mark.timeout(300)
def test_many_sessions_holding_unread_streams_and_bursts_leave_room_for_a_newcomer() -> None:
    sessions, calls = chaos(12, 50), chaos(4, 8)
    # The first attacker opens bursts up to its own cap (16): the server-wide cap, but for
    # the places kept for clients below their fair share.
    cap = 16
    x = np.ones((1, MiB // 4), np.float32)
    limits = ("--memory-per-client", str(PER_CLIENT), "--memory-total", str(TOTAL), "--max-long-calls", str(cap))
    with LocalServer(*limits) as srv:
        peak = PeakRss(srv.proc.pid)
        start = peak.peak
        devices, channels = [], []
        pending: list[Any] = []  # the raw calls' futures and streams (the gRPC stubs are untyped)
        stop = threading.Event()
        try:
            for _ in range(sessions):
                dev = Device.connect(srv.address, client_name="mass")
                devices.append(dev)
                pm = dev.prepare_model_sync(relu_chain(1, x.shape))
                msg, _ = execute_request(dev.remote.session_id, pm.handle, one_io_request(x), ExecutionOptions())
                channel = grpc.insecure_channel(srv.address, options=CHANNEL_OPTIONS)
                channels.append(channel)
                stub = sgrpc.PreparedModelStub(channel)
                # Bursts opened and never used: each holds a long-lived place.
                if not pending:
                    pending += [stub.configureExecutionBurst(_idle(stop), timeout=120) for _ in range(cap)]
                pending += [stub.execute_1_3(msg, timeout=120) for _ in range(calls)]
            with Device.connect(srv.address, client_name="newcomer") as newcomer, prepared_small(newcomer) as vpm:
                long_calls = devices[0].stats()["long_calls"]
                statuses = victim_runs(vpm, chaos(30, 200))
        finally:
            stop.set()
            let_go(pending, channels, devices)
            top = peak.stop()
    print(f"peak RSS {top / MiB:.0f} MiB (start {start / MiB:.0f} MiB), newcomer {len(statuses)} executions")
    print(f"long-lived calls held by the attacker: {long_calls}")
    assert set(statuses) == {ErrorStatus.NONE}, statuses
    assert long_calls == cap - cap // 8  # the attacker reached the places kept for others
    assert top - start <= TOTAL + MARGIN, f"peak RSS {top / MiB:.0f} MiB from {start / MiB:.0f} MiB"

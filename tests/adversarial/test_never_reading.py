"""Clients that never read their answers cannot bloat the server or starve a victim (issue #24).

Ordinary gRPC clients start ``execute_1_3`` calls with large results and never read them.
An answer waiting to be written is charged to its session (``Executions``: results
waiting to be written), so each attacker holds at most its own limit and the fair share
keeps room for the victim: its executions, in both forms, are all NONE and the server's
resident memory stays within the total limit plus a stated margin.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.remote.messages import ExecutionOptions, execute_request
from nnhal.core.enums import ErrorStatus
from nnhal.proto import service_pb2_grpc as sgrpc
from nnhal.testing.local_server import LocalServer
from tests.adversarial.conftest import chaos, let_go, prepared_small, victim_runs
from tests.adversarial.test_message_caps import MARGIN, PeakRss
from tests.conftest import one_io_request, relu_chain

pytestmark = pytest.mark.integration

MiB = 1 << 20
#: A connection of its own per attacker (channels with the same options share one by default).
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", 1 << 30), ("grpc.use_local_subchannel_pool", 1)]
PER_CLIENT, TOTAL = 16 * MiB, 64 * MiB


@pytest.mark.timeout(240)
def test_clients_that_never_read_large_results_leave_the_victim_served() -> None:
    attackers, calls = chaos(3, 12), chaos(10, 40)
    x = np.ones((1, (2 * MiB) // 4), np.float32)
    with LocalServer("--memory-per-client", str(PER_CLIENT), "--memory-total", str(TOTAL)) as srv:
        peak = PeakRss(srv.proc.pid)
        start = peak.peak
        devices, channels, pending = [], [], []
        try:
            for _ in range(attackers):
                dev = Device.connect(srv.address, client_name="never-reads")
                devices.append(dev)
                pm = dev.prepare_model_sync(relu_chain(1, x.shape))
                msg, _ = execute_request(dev.remote.session_id, pm.handle, one_io_request(x), ExecutionOptions())
                channel = grpc.insecure_channel(srv.address, options=CHANNEL_OPTIONS)
                channels.append(channel)
                stub = sgrpc.PreparedModelStub(channel)
                # Started, never iterated: the client reads nothing of these streams.
                pending += [stub.execute_1_3(msg, timeout=120) for _ in range(calls)]
            with Device.connect(srv.address, client_name="victim") as victim, prepared_small(victim) as vpm:
                statuses = victim_runs(vpm, chaos(40, 200))
                held = victim.stats()["bytes_in_use"]
        finally:
            let_go(pending, channels, devices)
            top = peak.stop()
    assert set(statuses) == {ErrorStatus.NONE}, statuses
    assert held <= TOTAL
    print(f"peak RSS {top / MiB:.0f} MiB (start {start / MiB:.0f} MiB), victim {len(statuses)} NONE")
    assert top - start <= TOTAL + MARGIN, f"peak RSS {top / MiB:.0f} MiB from {start / MiB:.0f} MiB"

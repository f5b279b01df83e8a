"""A connection that grants no HTTP/2 flow-control window cannot wedge the device (issue #24).

The attacker answers PINGs and SETTINGS (keepalive sees a live peer) but never lets the
server write a message, and starts more ``execute_1_3`` calls than the device has slots
and queue places. Their launch statuses are never written, so they never take a scheduler
ticket: the victim's executions, in both forms, are all NONE meanwhile.
"""

from __future__ import annotations

import threading

import pytest

from nnhal.client.device import Device
from nnhal.client.remote.messages import ExecutionOptions, execute_request
from nnhal.core.enums import ErrorStatus
from nnhal.testing.local_server import LocalServer
from tests.adversarial.conftest import chaos, prepared_small, victim_runs
from tests.adversarial.raw_h2 import ZeroWindowClient
from tests.conftest import one_io_request, ones

pytestmark = pytest.mark.integration

EXECUTE_1_3 = "/nnhal.v1.PreparedModel/execute_1_3"


@pytest.mark.timeout(120)
def test_zero_window_execute_calls_leave_the_device_to_the_victim() -> None:
    calls = 70  # more than slots + queue depth (2 + 64): before #24 this refused everyone else
    with LocalServer("--slots", "2", "--queue-depth", "64") as srv:
        host, port = srv.address.rsplit(":", 1)
        with Device.connect(srv.address, client_name="attacker") as attacker, prepared_small(attacker) as apm:
            msg, _ = execute_request(attacker.remote.session_id, apm.handle, one_io_request(ones()), ExecutionOptions())
            raw = ZeroWindowClient(host, int(port))
            stop = threading.Event()
            pump = threading.Thread(target=lambda: [raw.pump(0.2) for _ in range(600) if not stop.is_set()])
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

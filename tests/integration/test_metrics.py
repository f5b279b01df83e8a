"""The metrics listener of a real server (``--metrics-listen 127.0.0.1:0``): after a short
workload, ``GET /metrics`` shows executions by status, a latency histogram and the gauges.
The bound metrics address is in ``<port file>.metrics``."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

from nnhal.client.device import Device
from nnhal.core.errors import HalError
from nnhal.testing import LocalServer
from tests.conftest import add_model, ones

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _scrape(address: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_metrics_after_a_short_workload() -> None:
    with LocalServer("--enable-fault-injection", "--metrics-listen", "127.0.0.1:0") as srv:
        address = srv.port_file.with_name(srv.port_file.name + ".metrics").read_text().strip()
        assert re.fullmatch(r"127\.0\.0\.1:\d+", address)
        with Device.connect(srv.address) as dev:
            pm = dev.prepare_model_sync(add_model())
            for _ in range(3):
                pm.execute([ones(), ones()])
            assert pm.execute_async([ones(), ones()]).wait(20)
            dev.set_faults(execute_delay_ms=300)
            with pytest.raises(HalError):
                pm.execute([ones(), ones()], timeout=0.05)  # the deadline passes in the delay
            m = _scrape(address)
            assert m['nnhal_rpcs_total{device="nnhal-cpu",method="executeSynchronously_1_3",status="NONE"}'] == 3
            assert m['nnhal_rpcs_total{device="nnhal-cpu",method="execute_1_3",status="NONE"}'] == 1
            assert (
                m[
                    'nnhal_rpcs_total{device="nnhal-cpu",method="executeSynchronously_1_3",status="MISSED_DEADLINE_TRANSIENT"}'
                ]
                == 1
            )
            assert m['nnhal_deadline_misses_total{device="nnhal-cpu",kind="transient"}'] == 1
            assert m['nnhal_rpcs_total{device="nnhal-cpu",method="prepareModel_1_3",status="NONE"}'] == 1
            timed = {k: v for k, v in m.items() if k.startswith("nnhal_execute_seconds_count{")}
            assert sum(timed.values()) == 5, timed
            assert m['nnhal_execute_seconds_count{device="nnhal-cpu",method="execute_1_3",status="NONE"}'] == 1
            assert (
                m['nnhal_prepare_seconds_bucket{device="nnhal-cpu",le="60.0",method="prepareModel_1_3",status="NONE"}']
                == 1
            )
            assert m['nnhal_sessions{device="nnhal-cpu"}'] == 1
            assert m['nnhal_prepared_models{device="nnhal-cpu"}'] == 1
            assert m['nnhal_memory_bytes{device="nnhal-cpu",kind="model_constants"}'] > 0
            assert m['nnhal_executions_running{device="nnhal-cpu"}'] == 0
            assert m['nnhal_queue_depth{device="nnhal-cpu"}'] == 0
            assert m["process_resident_memory_bytes"] > 0
            assert any(k.startswith("nnhal_build_info{") for k in m)
            assert not any("_created" in k for k in m)
        # The session's end is counted and the gauge follows (bounded poll: the end is asynchronous).
        end = time.monotonic() + 20
        while _scrape(address)['nnhal_sessions{device="nnhal-cpu"}'] != 0 and time.monotonic() < end:
            time.sleep(0.05)
        m = _scrape(address)
        assert m['nnhal_sessions{device="nnhal-cpu"}'] == 0
        assert m['nnhal_sessions_ended_total{device="nnhal-cpu",reason="client"}'] == 1
        assert m['nnhal_sessions_ended_total{device="nnhal-cpu",reason="server"}'] == 0


def test_no_metrics_listener_by_default(server: LocalServer) -> None:
    # The shared server is started without --metrics-listen.
    assert not server.port_file.with_name(server.port_file.name + ".metrics").exists()

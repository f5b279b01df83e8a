"""Metrics without a server process: a registry per server, answers counted by method and
status (with their deadline or resource kind), gauges read from the driver when scraped,
memory by kind, and a listener that binds port 0 and stops cleanly."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest
from prometheus_client import generate_latest

from nnhal.core.enums import ErrorStatus, Priority
from nnhal.server.budget import MemoryBudget
from nnhal.server.driver import DeviceConfig, Driver
from nnhal.server.metrics import Metrics

#: The device label of a default Driver's series.
DEVICE = Driver().config.name


def _value(m: Metrics, name: str, labels: dict[str, str] | None = None, device: str | None = DEVICE) -> float | None:
    """A sample's value; every nnhal series but the build info carries its ``device``."""
    return m.registry.get_sample_value(name, {**({"device": device} if device else {}), **(labels or {})})


def test_answers_are_counted_by_method_and_status_with_their_kind() -> None:
    m = Metrics(Driver())
    m.rpc("execute_1_3", ErrorStatus.NONE)
    m.rpc("execute_1_3", ErrorStatus.NONE)
    m.rpc("execute_1_3", ErrorStatus.MISSED_DEADLINE_PERSISTENT)
    m.rpc("prepareModel_1_3", ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT)
    m.rpc("allocate", 99)  # a status outside the enum is still counted, by number
    assert _value(m, "nnhal_rpcs_total", {"method": "execute_1_3", "status": "NONE"}) == 2
    assert _value(m, "nnhal_deadline_misses_total", {"kind": "persistent"}) == 1
    assert _value(m, "nnhal_resource_exhausted_total", {"kind": "transient"}) == 1
    assert _value(m, "nnhal_rpcs_total", {"method": "allocate", "status": "99"}) == 1
    m.session_ended("client")
    assert _value(m, "nnhal_sessions_ended_total", {"reason": "client"}) == 1


def test_two_servers_in_one_process_do_not_clash() -> None:
    a, b = Metrics(Driver()), Metrics(Driver())
    a.rpc("execute_1_3", ErrorStatus.NONE)
    assert _value(a, "nnhal_rpcs_total", {"method": "execute_1_3", "status": "NONE"}) == 1
    assert _value(b, "nnhal_rpcs_total", {"method": "execute_1_3", "status": "NONE"}) is None


def test_gauges_are_read_from_the_driver_when_scraped() -> None:
    driver = Driver()
    m = Metrics(driver)
    assert _value(m, "nnhal_sessions") == 0
    session = driver.open_session("t", "unix:x")
    driver.budget.charge(session.id, 100)
    running = driver.scheduler.admit(session.id, Priority.MEDIUM)
    driver.scheduler.acquire(running, None)
    assert _value(m, "nnhal_sessions") == 1
    assert _value(m, "nnhal_executions_running") == 1
    assert _value(m, "nnhal_memory_bytes", {"kind": "model_constants"}) == 100
    assert _value(m, "nnhal_draining") == 0
    driver.lifecycle.begin_drain()
    assert _value(m, "nnhal_draining") == 1
    driver.scheduler.release(running)
    driver.close_session(session.id)
    assert _value(m, "nnhal_sessions") == 0
    assert _value(m, "nnhal_memory_bytes", {"kind": "model_constants"}) == 0
    assert f'nnhal_queue_depth{{device="{DEVICE}"}} 0.0'.encode() in generate_latest(m.registry)


def test_the_memory_limits_are_gauges_beside_the_bytes_held() -> None:
    m = Metrics(Driver(DeviceConfig(memory_per_client=64 << 20, memory_total=256 << 20)))
    assert _value(m, "nnhal_memory_limit_bytes", {"scope": "per_client"}) == 64 << 20
    assert _value(m, "nnhal_memory_limit_bytes", {"scope": "total"}) == 256 << 20


def test_memory_is_kept_by_kind_and_given_back_with_the_session() -> None:
    budget = MemoryBudget()
    budget.open_session("s")
    budget.charge("s", 10)
    budget.charge("s", 5, "request data")
    budget.account("s", 7, "buffer contents")
    budget.account("s", -3, "buffer contents")
    budget.uncharge("s", 5, "request data")
    assert budget.by_kind() == {"model constants": 10, "request data": 0, "buffer contents": 4}
    assert budget.total == 14
    budget.close_session("s")
    assert budget.by_kind() == {"model constants": 0, "request data": 0, "buffer contents": 0}
    assert budget.total == 0


def test_listener_binds_port_zero_and_stops() -> None:
    m = Metrics(Driver())
    address = m.serve("127.0.0.1:0")
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
            assert f'nnhal_sessions{{device="{DEVICE}"}} 0.0'.encode() in reply.read()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://{address}/other", timeout=10)
        assert err.value.code == 404
        err.value.close()
    finally:
        m.close()
    m.close()  # idempotent


def test_labelled_counters_exist_from_the_start_and_created_series_are_off() -> None:
    m = Metrics({"a": Driver(), "b": Driver()})
    for device in ("a", "b"):
        for kind in ("transient", "persistent"):
            assert _value(m, "nnhal_deadline_misses_total", {"kind": kind}, device) == 0
            assert _value(m, "nnhal_resource_exhausted_total", {"kind": kind}, device) == 0
        assert _value(m, "nnhal_sessions_ended_total", {"reason": "client"}, device) == 0
        assert _value(m, "nnhal_sessions", None, device) == 0
        for transport in ("grpc", "streamed", "same_host"):
            assert _value(m, "nnhal_executions_total", {"transport": transport}, device) == 0
    m.device("a").execution("same_host")
    assert _value(m, "nnhal_executions_total", {"transport": "same_host"}, "a") == 1
    assert m.device("a").executions_by_transport() == {"grpc": 0, "streamed": 0, "same_host": 1}
    assert m.device("b").executions_by_transport()["same_host"] == 0
    text = generate_latest(m.registry).decode()
    assert "_created" not in text
    assert "process_resident_memory_bytes" in text
    assert 'nnhal_build_info{grpc="' in text


def test_histograms_are_by_device_method_and_status() -> None:
    m = Metrics(Driver())
    d = m.device(DEVICE)
    observe = d.timer("execute")
    assert observe is not None and d.timer(None) is None
    observe("executeSynchronously_1_3", ErrorStatus.NONE, 0.002)
    observe("executeSynchronously_1_3", ErrorStatus.MISSED_DEADLINE_TRANSIENT, 0.2)
    labels = {"method": "executeSynchronously_1_3", "status": "NONE"}
    assert _value(m, "nnhal_execute_seconds_count", labels) == 1
    assert _value(m, "nnhal_execute_seconds_bucket", {**labels, "le": "0.0025"}) == 1
    with pytest.raises(ValueError):
        d.timer("compile")

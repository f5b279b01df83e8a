"""Metrics without a server process: a registry per server, answers counted by method and
status (with their deadline or resource kind), gauges read from the driver when scraped,
memory by kind, and a listener that binds port 0 and stops cleanly."""

from __future__ import annotations

import urllib.request

from prometheus_client import generate_latest

from nnhal.core.enums import ErrorStatus, Priority
from nnhal.server.budget import MemoryBudget
from nnhal.server.driver import Driver
from nnhal.server.metrics import Metrics


def _value(m: Metrics, name: str, labels: dict[str, str] | None = None) -> float | None:
    return m.registry.get_sample_value(name, labels or {})


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
    assert b"nnhal_queue_depth 0.0" in generate_latest(m.registry)


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
            assert b"nnhal_sessions 0.0" in reply.read()
    finally:
        m.close()
    m.close()  # idempotent

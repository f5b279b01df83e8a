"""Metrics without a server process: a registry per server, answers counted by method and
status (with their deadline or resource kind), gauges read from the driver when scraped,
memory by kind, and a listener that binds port 0 and stops cleanly."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from nnhal.core.enums import ErrorStatus, Priority
from nnhal.server.budget import MemoryBudget
from nnhal.server.driver import DeviceConfig, Driver
from nnhal.server.metrics import BUCKETS, FOLD_AT, TIMERS, TRANSPORTS, Metrics, _Counts

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


class _Reference:
    """The counted series as prometheus-client's own ``Counter`` and ``Histogram`` keep them
    (how ``Metrics`` counted before its store of plain numbers): what the store must expose."""

    def __init__(self, devices: list[str]) -> None:
        self.registry = r = CollectorRegistry()
        docs = {f.name: f.documentation for f in _Counts().collect()}
        labels = ["device", "method", "status"]
        self.rpcs = Counter("nnhal_rpcs", docs["nnhal_rpcs"], labels, registry=r)
        self.deadline = Counter("nnhal_deadline_misses", docs["nnhal_deadline_misses"], ["device", "kind"], registry=r)
        self.resource = Counter(
            "nnhal_resource_exhausted", docs["nnhal_resource_exhausted"], ["device", "kind"], registry=r
        )
        self.ended = Counter("nnhal_sessions_ended", docs["nnhal_sessions_ended"], ["device", "reason"], registry=r)
        self.executions = Counter("nnhal_executions", docs["nnhal_executions"], ["device", "transport"], registry=r)
        self.timed = {
            t: Histogram(f"nnhal_{t}_seconds", docs[f"nnhal_{t}_seconds"], labels, buckets=BUCKETS, registry=r)
            for t in TIMERS
        }
        for device in devices:
            for kind in ("transient", "persistent"):
                self.deadline.labels(device, kind)
                self.resource.labels(device, kind)
            for reason in ("client", "server"):
                self.ended.labels(device, reason)
            for transport in TRANSPORTS:
                self.executions.labels(device, transport)

    def answer(self, device: str, method: str, status: int, timer: str | None, seconds: float | None) -> None:
        try:
            name = ErrorStatus(status).name
        except ValueError:
            name = str(status)
        self.rpcs.labels(device, method, name).inc()
        if name.startswith(("MISSED_DEADLINE_", "RESOURCE_EXHAUSTED_")):
            kinds = self.deadline if name.startswith("MISSED") else self.resource
            kinds.labels(device, name.rsplit("_", 1)[1].lower()).inc()
        if timer is not None:  # a timed method's refusal made its (empty) histogram too
            histogram = self.timed[timer].labels(device, method, name)
            if seconds is not None:
                histogram.observe(seconds)


def _exposition(m: Metrics) -> str:
    """The text a scrape shows of ``m``'s counted series (those ``_Reference`` keeps)."""
    r = CollectorRegistry()
    r.register(m.counts)
    return generate_latest(r).decode()


#: Answers of every kind: statuses of each family, one outside the enum; durations on bucket
#: bounds, between them, zero and past the last one.
_ANSWERS = [
    ("executeSynchronously_1_3", ErrorStatus.NONE, "execute", 0.0005),
    ("executeSynchronously_1_3", ErrorStatus.NONE, "execute", 0.0007),
    ("executeSynchronously_1_3", ErrorStatus.MISSED_DEADLINE_TRANSIENT, "execute", 1.0),
    ("execute_1_3", ErrorStatus.MISSED_DEADLINE_PERSISTENT, "execute", 0.0),
    ("execute_1_3", ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, None, None),
    ("prepareModel_1_3", ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT, "prepare", 61.5),
    ("prepareModel_1_3", ErrorStatus.NONE, "prepare", 2.4999),
    ("allocate", 99, None, None),
    ("executeSynchronously_1_3", ErrorStatus.GENERAL_FAILURE, "execute", None),
]


def test_the_exposition_is_prometheus_clients_own_for_the_same_answers() -> None:
    m = Metrics({"a": Driver(), "b": Driver()})
    ref = _Reference(["a", "b"])
    for device in ("b", "a"):
        d = m.device(device)
        for method, status, timer, seconds in _ANSWERS:
            d.recorder(method, timer)(status, seconds)
            ref.answer(device, method, status, timer, seconds)
        d.rpc("openSession", ErrorStatus.NONE)
        ref.answer(device, "openSession", ErrorStatus.NONE, None, None)
        d.session_ended("client")
        ref.ended.labels(device, "client").inc()
        d.execution("streamed")
        ref.executions.labels(device, "streamed").inc()
    observe = m.device("a").timer("execute")
    assert observe is not None
    observe("execute_1_3", ErrorStatus.NONE, 30.0)
    ref.answer("a", "execute_1_3", ErrorStatus.NONE, "execute", 30.0)
    ref.rpcs.remove("a", "execute_1_3", "NONE")  # ``observe`` times without counting the answer
    assert _exposition(m) == generate_latest(ref.registry).decode()
    assert _value(m, "nnhal_deadline_misses_total", {"kind": "transient"}, "a") == 1
    assert (
        _value(m, "nnhal_prepare_seconds_bucket", {"method": "prepareModel_1_3", "status": "NONE", "le": "2.5"}, "b")
        == 1
    )


def test_answers_from_several_threads_are_counted_exactly() -> None:
    m = Metrics(Driver())
    ref = _Reference([DEVICE])
    d = m.device(DEVICE)
    threads, per_thread = 4, 2000
    # Durations of a few bits (k/1024 s): their sum is exact in any order, as the reference's.
    durations = [k / 1024 for k in (0, 1, 2, 3, 5, 8, 13, 21, 100, 1000, 40000, 70000)]
    record = d.recorder("executeSynchronously_1_3", "execute")

    def work(t: int) -> None:
        for i in range(per_thread):
            status = ErrorStatus.NONE if (i + t) % 5 else ErrorStatus.MISSED_DEADLINE_TRANSIENT
            d.execution("same_host")
            record(status, durations[(i * 7 + t) % len(durations)])

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert not any(w.is_alive() for w in workers)
    for t in range(threads):
        for i in range(per_thread):
            status = ErrorStatus.NONE if (i + t) % 5 else ErrorStatus.MISSED_DEADLINE_TRANSIENT
            ref.executions.labels(DEVICE, "same_host").inc()
            ref.answer(DEVICE, "executeSynchronously_1_3", status, "execute", durations[(i * 7 + t) % len(durations)])
    assert d.executions_by_transport()["same_host"] == threads * per_thread
    assert _value(m, "nnhal_execute_seconds_count", {"method": "executeSynchronously_1_3", "status": "NONE"}) == (
        threads * per_thread * 4 // 5
    )
    # The first status each thread answers decides the series' order: compare them as sets of lines.
    assert sorted(_exposition(m).splitlines()) == sorted(generate_latest(ref.registry).decode().splitlines())


def test_durations_wait_unfolded_at_most_fold_at_and_are_exact_when_read() -> None:
    """A timed answer's duration is appended to its histogram's pending observations, folded
    into the cells by the call that brings :data:`FOLD_AT` of them, and by every read: a scrape
    shows every duration, in every bucket and the sum, whenever it comes."""
    m = Metrics(Driver())
    record = m.device(DEVICE).recorder("executeSynchronously_1_3", "execute")
    histogram = m.device(DEVICE)._histogram("execute", "executeSynchronously_1_3", ErrorStatus.NONE)
    durations = [k / 1024 for k in range(FOLD_AT + 3)]  # a few bits each: their sum is exact
    for seconds in durations[:FOLD_AT]:
        record(ErrorStatus.NONE, seconds)
    assert histogram.pending == []  # the FOLD_AT-th folded them
    for seconds in durations[FOLD_AT:]:
        record(ErrorStatus.NONE, seconds)
    assert len(histogram.pending) == 3
    labels = {"method": "executeSynchronously_1_3", "status": "NONE"}
    assert _value(m, "nnhal_execute_seconds_count", labels) == len(durations)
    assert _value(m, "nnhal_execute_seconds_sum", labels) == sum(durations)
    assert _value(m, "nnhal_execute_seconds_bucket", {**labels, "le": "0.0005"}) == 1  # 0.0 only
    assert _value(m, "nnhal_rpcs_total", labels) == len(durations)
    assert histogram.pending == []


def test_an_untimed_recorder_counts_its_answers_and_times_none() -> None:
    """``recorder(method, None)``: every answer counted, a duration handed with one ignored (no
    histogram series made); a timed one's durations go to its timer's histogram."""
    m = Metrics(Driver())
    d = m.device(DEVICE)
    untimed = d.recorder("getSupportedOperations", None)
    untimed(ErrorStatus.NONE, 0.002)
    untimed(ErrorStatus.NONE, None)
    labels = {"method": "getSupportedOperations", "status": "NONE"}
    assert _value(m, "nnhal_rpcs_total", labels) == 2
    assert _value(m, "nnhal_execute_seconds_count", labels) is None
    assert _value(m, "nnhal_prepare_seconds_count", labels) is None
    timed = d.recorder("prepareModel", "prepare")
    timed(ErrorStatus.GENERAL_FAILURE, 0.5)
    timed(ErrorStatus.GENERAL_FAILURE, None)
    failed = {"method": "prepareModel", "status": "GENERAL_FAILURE"}
    assert _value(m, "nnhal_rpcs_total", failed) == 2
    assert _value(m, "nnhal_prepare_seconds_count", failed) == 1

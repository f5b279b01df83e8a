"""Prometheus metrics of one server, on a listener of their own (``--metrics-listen``).

Each ``Metrics`` has its own ``CollectorRegistry`` (never the process-global
one), so several servers in one process do not clash. Two kinds of series:

- counted where it happens, by the RPC layer (``rpc``, ``observe_*``,
  ``session_ended``): ``nnhal_rpcs_total{method,status}`` (every answer with a
  HAL status, ``status`` its ErrorStatus name; a burst's executions count as
  ``configureExecutionBurst``), ``nnhal_deadline_misses_total{kind}`` and
  ``nnhal_resource_exhausted_total{kind}`` (``kind``: transient or persistent,
  derived from the same statuses; refused sessions count too),
  ``nnhal_prepare_seconds`` and ``nnhal_execute_seconds`` (histograms of the
  server-side time from launch to the callback's notify; fenced executions are
  not timed), ``nnhal_sessions_ended_total{reason}``;
- read from the driver when scraped (a custom collector, nothing on hot paths):
  ``nnhal_sessions``, ``nnhal_prepared_models``, ``nnhal_buffers``,
  ``nnhal_fences``, ``nnhal_queue_depth`` (executions waiting for a slot),
  ``nnhal_executions_running``, ``nnhal_executions_preempted`` (paused by a
  pre-emption, not yet resumed), ``nnhal_memory_bytes{kind}`` (what the memory
  budget holds: model_constants, buffer_contents, request_data),
  ``nnhal_draining`` (1 during a drain).

Session end reasons: ``client`` (the client ended its session stream — a close,
a crash and a keepalive expiry look the same to gRPC's server API, so they
share this reason) and ``server`` (the server ended it: a drain or a stop).

The cost of counting one answer is one dict lookup and one or two locked
increments (children are cached per method and status). Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nnhal.core.enums import ErrorStatus
from nnhal.server.driver import Driver

#: Seconds: sub-millisecond executions of small models up to long preparations.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

_KIND = {
    ErrorStatus.MISSED_DEADLINE_TRANSIENT: ("deadline", "transient"),
    ErrorStatus.MISSED_DEADLINE_PERSISTENT: ("deadline", "persistent"),
    ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT: ("resource", "transient"),
    ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT: ("resource", "persistent"),
}


def _status_name(status: int) -> str:
    try:
        return ErrorStatus(status).name
    except ValueError:
        return str(status)


class _DriverCollector(Collector):
    """Gauges read from the driver at scrape time."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver

    def collect(self) -> Iterator[Metric]:
        driver = self._driver
        stats = driver.stats()
        running, queued, preempted = driver.scheduler.counts()
        for name, value, doc in (
            ("sessions", stats["sessions"], "Open client sessions."),
            ("prepared_models", stats["prepared_models"], "Prepared models held for clients."),
            ("buffers", stats["buffers"], "Driver-managed buffers (IDevice::allocate) held for clients."),
            ("fences", stats["fences"], "Sync fences of fenced executions held for clients."),
            ("queue_depth", queued, "Executions waiting for a slot (pre-empted ones included)."),
            ("executions_running", running, "Executions holding a slot."),
            ("executions_preempted", preempted, "Executions paused by a pre-emption, not yet resumed."),
            ("draining", int(driver.lifecycle.draining), "1 while the server drains (shutting down)."),
        ):
            yield GaugeMetricFamily(f"nnhal_{name}", doc, value=value)
        memory = GaugeMetricFamily("nnhal_memory_bytes", "Bytes the memory budget holds, by kind.", labels=["kind"])
        for kind, nbytes in sorted(driver.budget.by_kind().items()):
            memory.add_metric([kind.replace(" ", "_")], nbytes)
        yield memory


class Metrics:
    """The metrics of one server (its driver). ``serve`` starts the HTTP listener."""

    def __init__(self, driver: Driver) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._rpcs = Counter(
            "nnhal_rpcs", "Answers by RPC method and HAL ErrorStatus.", ["method", "status"], registry=r
        )
        self._deadline = Counter("nnhal_deadline_misses", "MISSED_DEADLINE_* answers by kind.", ["kind"], registry=r)
        self._resource = Counter(
            "nnhal_resource_exhausted", "RESOURCE_EXHAUSTED_* refusals by kind.", ["kind"], registry=r
        )
        self._ended = Counter("nnhal_sessions_ended", "Sessions ended, by who ended them.", ["reason"], registry=r)
        self.prepare_seconds = Histogram(
            "nnhal_prepare_seconds",
            "Server time from a preparation's launch to its notify.",
            buckets=BUCKETS,
            registry=r,
        )
        self.execute_seconds = Histogram(
            "nnhal_execute_seconds",
            "Server time from an execution's launch to its result.",
            buckets=BUCKETS,
            registry=r,
        )
        r.register(_DriverCollector(driver))
        self._lock = threading.Lock()
        self._children: dict[tuple[str, int], tuple[Counter, ...]] = {}
        self._httpd: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def rpc(self, method: str, status: int) -> None:
        """Count one answer of ``method`` with HAL ``status`` (and its miss or refusal kind)."""
        children = self._children.get((method, status))
        if children is None:
            children = self._make_children(method, status)
        for child in children:
            child.inc()

    def _make_children(self, method: str, status: int) -> tuple[Counter, ...]:
        with self._lock:
            children: tuple[Counter, ...] = (self._rpcs.labels(method, _status_name(status)),)
            family, kind = _KIND.get(status, ("", ""))  # type: ignore[call-overload]
            if family == "deadline":
                children += (self._deadline.labels(kind),)
            elif family == "resource":
                children += (self._resource.labels(kind),)
            self._children[(method, status)] = children
            return children

    def session_ended(self, reason: str) -> None:
        self._ended.labels(reason).inc()

    # -- the listener -------------------------------------------------------------
    def serve(self, address: str) -> str:
        """Serve ``GET /metrics`` on ``address`` (host:port; port 0 picks one) in a daemon
        thread; returns the bound host:port. Raises ValueError for a malformed address,
        OSError when it cannot be bound."""
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"metrics address {address!r} must be host:port")
        host = host.strip("[]")
        self._httpd, self._thread = start_http_server(int(port), host, registry=self.registry)
        bound = self._httpd.server_address[1]
        return f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"

    def close(self) -> None:
        """Stop the listener (if any) and wait for its thread. Idempotent."""
        httpd, self._httpd = self._httpd, None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None

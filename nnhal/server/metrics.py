"""Prometheus metrics of one server, on a listener of their own (``--metrics-listen``).

Each ``Metrics`` has its own ``CollectorRegistry`` (never the process-global one), so several
servers in one process do not clash. ``docs/metrics.md`` lists every series. In short:

- counted where it happens, per device (``DeviceMetrics``, one per hosted device, which the
  device's owner of HAL calls and its session servicer use):
  ``nnhal_rpcs_total{device,method,status}`` (every answer with a HAL status, ``status`` its
  ErrorStatus name; a burst's executions count under the burst's method),
  ``nnhal_deadline_misses_total{device,kind}`` and ``nnhal_resource_exhausted_total{device,kind}``
  (``kind``: transient or persistent, derived from the same statuses),
  ``nnhal_prepare_seconds{device,method,status}`` and ``nnhal_execute_seconds{device,method,status}``
  (histograms of the server-side time from arrival to the answer of launched calls),
  ``nnhal_sessions_ended_total{device,reason}``,
  ``nnhal_executions_total{device,transport}`` (executions launched, by the transport that
  carried them: ``grpc``, ``streamed``, ``same_host``; also in ``getStats``). Labelled
  counters exist from the start at 0 for every label value they can take that is known up
  front (kinds, reasons, transports).
- read from the drivers when scraped (a custom collector, nothing on hot paths), each with
  its ``device`` label: ``nnhal_sessions``, ``nnhal_prepared_models``, ``nnhal_buffers``,
  ``nnhal_fences``, ``nnhal_queue_depth``, ``nnhal_executions_running``,
  ``nnhal_executions_preempted``, ``nnhal_memory_bytes{kind}``,
  ``nnhal_memory_limit_bytes{scope}`` (``per_client``, ``total``; 0: none), ``nnhal_draining``;
- the process: prometheus-client's standard ``process_*`` (RSS, CPU seconds, open fds …) and
  ``python_info``, and ``nnhal_build_info{version,python,grpc}`` (always 1).

``*_created`` series are off (they double every counter's series for a value nobody graphs).
The listener answers ``GET /metrics`` only; any other path is 404.

Session end reasons: ``client`` (the client ended its session stream — a close, a crash and a
keepalive expiry look the same to gRPC's server API) and ``server`` (a drain or a stop).

The cost of counting one answer is one dict lookup and two or three increments (children are
cached per method and status). Thread-safe.
"""

from __future__ import annotations

import platform
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from importlib import metadata
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import prometheus_client
from prometheus_client import (
    PLATFORM_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from nnhal import __version__
from nnhal.core.enums import ErrorStatus
from nnhal.server.driver import Driver

# A ``_created`` sample beside every counter and histogram doubles the series for a value
# nobody graphs; prometheus-client turns them off process-wide only.
prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

#: The transports an execution can come by (``nnhal_executions_total``'s ``transport``).
TRANSPORTS = ("grpc", "streamed", "same_host")
#: Seconds: sub-millisecond executions of small models up to long preparations.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: The histograms a HAL method's answers may be timed in (``Executions.method``'s ``timer``).
TIMERS = ("prepare", "execute")
_KINDS = ("transient", "persistent")
_REASONS = ("client", "server")

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
    """Gauges read from every device's driver at scrape time, labelled by device."""

    _GAUGES = (
        ("sessions", "Open client sessions."),
        ("prepared_models", "Prepared models held for clients."),
        ("buffers", "Driver-managed buffers (IDevice::allocate) held for clients."),
        ("fences", "Sync fences of fenced executions held for clients."),
        ("queue_depth", "Executions waiting for a slot (pre-empted ones included)."),
        ("executions_running", "Executions holding a slot."),
        ("executions_preempted", "Executions paused by a pre-emption, not yet resumed."),
        ("draining", "1 while the server drains (shutting down)."),
    )

    def __init__(self, drivers: Mapping[str, Driver]) -> None:
        self._drivers = drivers

    def collect(self) -> Iterator[Metric]:
        families = {name: GaugeMetricFamily(f"nnhal_{name}", doc, labels=["device"]) for name, doc in self._GAUGES}
        memory = GaugeMetricFamily(
            "nnhal_memory_bytes", "Bytes the memory budget holds, by kind.", labels=["device", "kind"]
        )
        limits = GaugeMetricFamily(
            "nnhal_memory_limit_bytes",
            "The memory budget's limits (scope per_client or total; 0: no limit).",
            labels=["device", "scope"],
        )
        for device, driver in self._drivers.items():
            stats = driver.stats()
            running, queued, preempted = driver.scheduler.counts()
            values = {
                "sessions": stats["sessions"],
                "prepared_models": stats["prepared_models"],
                "buffers": stats["buffers"],
                "fences": stats["fences"],
                "queue_depth": queued,
                "executions_running": running,
                "executions_preempted": preempted,
                "draining": int(driver.lifecycle.draining),
            }
            for name, value in values.items():
                families[name].add_metric([device], value)
            for kind, nbytes in sorted(driver.budget.by_kind().items()):
                memory.add_metric([device, kind.replace(" ", "_")], nbytes)
            limits.add_metric([device, "per_client"], driver.budget.per_client)
            limits.add_metric([device, "total"], driver.budget.limit_total)
        yield from families.values()
        yield memory
        yield limits


class DeviceMetrics:
    """The counted series of one device (module docstring). Thread-safe."""

    def __init__(self, metrics: Metrics, device: str) -> None:
        self._m = metrics
        self.device = device
        self._lock = threading.Lock()
        self._children: dict[tuple[str, int], tuple[Counter, ...]] = {}
        self._timed: dict[tuple[str, str, int], Histogram] = {}
        for kind in _KINDS:  # present from the start at 0
            metrics.deadline_misses.labels(device, kind)
            metrics.resource_exhausted.labels(device, kind)
        for reason in _REASONS:
            metrics.sessions_ended.labels(device, reason)
        self._by_transport = {t: metrics.executions.labels(device, t) for t in TRANSPORTS}

    @property
    def registry(self) -> CollectorRegistry:
        """The server's registry, which holds these series."""
        return self._m.registry

    def rpc(self, method: str, status: int) -> None:
        """Count one answer of ``method`` with HAL ``status`` (and its miss or refusal kind)."""
        children = self._children.get((method, status))
        if children is None:
            children = self._make_children(method, status)
        for child in children:
            child.inc()

    def _make_children(self, method: str, status: int) -> tuple[Counter, ...]:
        m = self._m
        with self._lock:
            children: tuple[Counter, ...] = (m.rpcs.labels(self.device, method, _status_name(status)),)
            family, kind = _KIND.get(status, ("", ""))  # type: ignore[call-overload]
            if family == "deadline":
                children += (m.deadline_misses.labels(self.device, kind),)
            elif family == "resource":
                children += (m.resource_exhausted.labels(self.device, kind),)
            self._children[(method, status)] = children
            return children

    def observe(self, timer: str, method: str, status: int, seconds: float) -> None:
        """Time one launched call of ``method`` answered with ``status`` in histogram ``timer``."""
        self._histogram(timer, method, status).observe(seconds)

    def _histogram(self, timer: str, method: str, status: int) -> Histogram:
        child = self._timed.get((timer, method, status))
        if child is None:
            family = self._m.prepare_seconds if timer == "prepare" else self._m.execute_seconds
            with self._lock:
                child = self._timed.setdefault(
                    (timer, method, status), family.labels(self.device, method, _status_name(status))
                )
        return child

    def recorder(self, method: str, timer: str | None) -> Callable[[int, float | None], None]:
        """``record(status, seconds)`` of one method: ``rpc`` (and, with ``seconds`` not None,
        ``observe`` in histogram ``timer``; None: not timed) with the series of each status
        resolved once — a call pays plain increments, no label lookup."""
        if timer is not None and timer not in TIMERS:
            raise ValueError(f"unknown timer {timer!r} (one of {', '.join(TIMERS)})")
        resolved: dict[int, tuple[tuple[Callable[[], None], ...], Callable[[float], None] | None]] = {}

        def record(status: int, seconds: float | None) -> None:
            series = resolved.get(status)
            if series is None:
                children = self._children.get((method, status)) or self._make_children(method, status)
                timed = None if timer is None else self._histogram(timer, method, status).observe
                series = resolved.setdefault(status, (tuple(c.inc for c in children), timed))
            for inc in series[0]:
                inc()
            if seconds is not None and series[1] is not None:
                series[1](seconds)

        return record

    def timer(self, timer: str | None) -> Callable[[str, int, float], None] | None:
        """``observe`` bound to histogram ``timer`` (None: not timed)."""
        if timer is None:
            return None
        if timer not in TIMERS:
            raise ValueError(f"unknown timer {timer!r} (one of {', '.join(TIMERS)})")
        return lambda method, status, seconds: self.observe(timer, method, status, seconds)

    def session_ended(self, reason: str) -> None:
        self._m.sessions_ended.labels(self.device, reason).inc()

    def execution(self, transport: str) -> None:
        """Count one execution launched over ``transport`` (one of ``TRANSPORTS``)."""
        self._by_transport[transport].inc()  # the series' own count is the one kept (no second)

    def executions_by_transport(self) -> dict[str, int]:
        """The executions counted so far, by transport (every one of ``TRANSPORTS``): read
        from the ``nnhal_executions`` series, each of which is thread-safe."""
        counts = dict.fromkeys(TRANSPORTS, 0)
        for family in self._m.executions.collect():
            for sample in family.samples:
                labels = sample.labels
                if sample.name.endswith("_total") and labels.get("device") == self.device:
                    counts[labels["transport"]] = int(sample.value)
        return counts


class Metrics:
    """The metrics of one server: ``drivers`` by device name (or one driver, named after its
    config). :meth:`device` gives a device's counted series; ``serve`` starts the listener."""

    def __init__(self, drivers: Driver | Mapping[str, Driver]) -> None:
        if isinstance(drivers, Driver):
            drivers = {drivers.config.name: drivers}
        self.drivers = dict(drivers)
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.rpcs = Counter(
            "nnhal_rpcs",
            "Answers by device, RPC method and HAL ErrorStatus.",
            ["device", "method", "status"],
            registry=r,
        )
        self.deadline_misses = Counter(
            "nnhal_deadline_misses", "MISSED_DEADLINE_* answers by kind.", ["device", "kind"], registry=r
        )
        self.resource_exhausted = Counter(
            "nnhal_resource_exhausted", "RESOURCE_EXHAUSTED_* refusals by kind.", ["device", "kind"], registry=r
        )
        self.sessions_ended = Counter(
            "nnhal_sessions_ended", "Sessions ended, by who ended them.", ["device", "reason"], registry=r
        )
        self.executions = Counter(
            "nnhal_executions",
            "Executions launched, by the transport that carried them.",
            ["device", "transport"],
            registry=r,
        )
        labels = ["device", "method", "status"]
        self.prepare_seconds = Histogram(
            "nnhal_prepare_seconds",
            "Server time from a preparation's arrival to its notify.",
            labels,
            buckets=BUCKETS,
            registry=r,
        )
        self.execute_seconds = Histogram(
            "nnhal_execute_seconds",
            "Server time from an execution's arrival to its result.",
            labels,
            buckets=BUCKETS,
            registry=r,
        )
        build = Gauge(
            "nnhal_build_info", "nnhal's version and its runtime (always 1).", ["version", "python", "grpc"], registry=r
        )
        build.labels(__version__, platform.python_version(), _grpc_version()).set(1)
        ProcessCollector(registry=r)
        if PLATFORM_COLLECTOR is not None:
            PlatformCollector(registry=r)
        r.register(_DriverCollector(self.drivers))
        self._devices = {name: DeviceMetrics(self, name) for name in self.drivers}
        self._default = next(iter(self._devices.values()))
        self._httpd: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def device(self, name: str) -> DeviceMetrics:
        """The counted series of device ``name`` (KeyError for a device not hosted)."""
        return self._devices[name]

    # The default device's (a server hosting one device, and older callers).
    def rpc(self, method: str, status: int) -> None:
        self._default.rpc(method, status)

    def session_ended(self, reason: str) -> None:
        self._default.session_ended(reason)

    # -- the listener -------------------------------------------------------------
    def serve(self, address: str) -> str:
        """Serve ``GET /metrics`` on ``address`` (host:port; port 0 picks one) in a daemon
        thread; returns the bound host:port. Raises ValueError for a malformed address,
        OSError when it cannot be bound."""
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"metrics address {address!r} must be host:port")
        host = host.strip("[]")
        server_class = _IPv6Server if ":" in host else _Server
        self._httpd = make_server(host, int(port), _only_metrics(make_wsgi_app(self.registry)), server_class, _Quiet)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="nnhal-metrics", daemon=True)
        self._thread.start()
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


def _grpc_version() -> str:
    """grpcio's version, from its distribution's metadata (this module imports no gRPC)."""
    try:
        return metadata.version("grpcio")
    except metadata.PackageNotFoundError:  # pragma: no cover - grpcio is a dependency
        return "unknown"


def _only_metrics(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    """``app`` at ``/metrics``; 404 elsewhere (a scraper given a wrong path should see it)."""

    def only(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "") not in ("/metrics", "/metrics/"):
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: the metrics are at /metrics\n"]
        return app(environ, start_response)

    return only


class _Server(ThreadingMixIn, WSGIServer):
    """One thread per scrape: a slow scraper holds up no other."""

    daemon_threads = True


class _IPv6Server(_Server):
    address_family = socket.AF_INET6


class _Quiet(WSGIRequestHandler):
    """No access log line on stderr per scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

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

Counting an answer costs one dict lookup and one lock-free C increment, timing it one list
append (folded into the histogram's cells in batches, and when read): the counted series are
plain numbers (``_Counts``), turned into Prometheus families only when scraped.
Thread-safe.
"""

from __future__ import annotations

import collections
import itertools
import platform
import socket
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import reduce
from importlib import metadata
from itertools import repeat
from operator import add
from socketserver import ThreadingMixIn
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import prometheus_client
from prometheus_client import (
    PLATFORM_COLLECTOR,
    CollectorRegistry,
    Gauge,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from nnhal import __version__
from nnhal.core.enums import ErrorStatus
from nnhal.server.counts import Counter
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

#: The (family, kind) an answer's status counts under too, by status name.
_KIND_BY_NAME = {
    ErrorStatus.MISSED_DEADLINE_TRANSIENT.name: ("deadline", "transient"),
    ErrorStatus.MISSED_DEADLINE_PERSISTENT.name: ("deadline", "persistent"),
    ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT.name: ("resource", "transient"),
    ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT.name: ("resource", "persistent"),
}
#: A histogram's bucket bounds as its ``le`` labels (``+Inf`` last), as prometheus-client writes them.
_LE = (*(floatToGoString(b) for b in BUCKETS), "+Inf")  # type: ignore[no-untyped-call]
#: A histogram's cells: a count per bucket (``+Inf`` last), then the sum.
_CELLS = len(BUCKETS) + 2
_K = TypeVar("_K")
_V = TypeVar("_V", int, float)
#: Observations a histogram series keeps unfolded (``_Histogram``) before the thread recording
#: the next one folds them: bounds what waits between scrapes.
FOLD_AT = 256


class _Histogram:
    """One histogram series: ``cells`` (a count per bucket, ``+Inf`` last, then the sum; read
    and written under ``lock``, the counts') and the observations not yet in them (``pending``):
    ``observe`` appends one there — one C call, no lock, until :data:`FOLD_AT` wait — and
    ``fold``, under the lock, adds them to the cells in the order they were made (the sum
    exactly as one ``+=`` per observation made it). Whoever reads the cells folds first."""

    __slots__ = ("cells", "lock", "pending")

    def __init__(self, lock: threading.Lock) -> None:
        self.cells: list[float] = [0] * _CELLS
        self.pending: list[float] = []
        self.lock = lock

    def observe(self, seconds: float) -> None:
        """Count one observation (folded once :data:`FOLD_AT` wait, else when read)."""
        pending = self.pending
        pending.append(seconds)
        if len(pending) >= FOLD_AT:
            with self.lock:
                self.fold()

    def fold(self) -> None:
        """Add the pending observations to the cells. Hold ``lock`` (one fold at a time;
        observations appended meanwhile stay pending)."""
        pending = self.pending
        n = len(pending)
        if not n:
            return
        batch = pending[:n]
        del pending[:n]
        cells = self.cells
        # The first bound ≥ each (prometheus-client's ``amount <= bound``), counted by ``map``.
        for bucket, k in collections.Counter(map(bisect_left, repeat(BUCKETS), batch)).items():
            cells[bucket] += k
        cells[-1] = reduce(add, batch, cells[-1])


def _status_name(status: int) -> str:
    try:
        return ErrorStatus(status).name
    except ValueError:
        return str(status)


def _untimed(seconds: float) -> None:
    """The ``observe`` of a method whose answers are not timed (``DeviceMetrics.recorder``)."""


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


class _Counts(Collector):
    """The counted series of every device of one server, kept in plain lists under one lock
    and exposed at scrape time as prometheus-client's ``Counter`` and ``Histogram`` expose them
    (same names, help, labels, values, series order).

    Why not those classes: one answer counted and timed through them is a dozen Python calls
    (a label lookup, ``inc`` and ``observe``, a lock per value, the histogram's bucket walk);
    here it is one C increment and one list append. An answer count is a ``counts.Counter``
    (exact without a lock); a histogram a ``_Histogram``: cells ``[bucket 0, …, bucket +Inf,
    sum]`` (non-cumulative buckets, the one an observation falls in found by ``bisect_left`` over
    ``BUCKETS``: the first bound ≥ it, as prometheus-client's ``amount <= bound``) and the
    observations not yet folded into them. Every write to the cells and every read of them is
    under ``lock`` (a ``+=`` on a list item is several bytecodes: threads could lose counts), a
    read folding first; series are added under it too, so a scrape never iterates a dict that
    grows. The deadline and resource kinds are not kept: a scrape sums the answer counts of
    their statuses."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: Answer counts by (device, method, status name), in the order they were first counted:
        #: lock-free counts (one C call per answer, exact: ``counts.Counter``).
        self.rpcs: dict[tuple[str, str, str], Counter] = {}
        #: Sessions ended by (device, reason).
        self.sessions_ended: dict[tuple[str, str], list[int]] = {}
        #: Executions launched by (device, transport): lock-free counts (one C call per
        #: execution, exact: ``counts.Counter``).
        self.executions: dict[tuple[str, str], Counter] = {}
        #: Histograms by timer, then (device, method, status name).
        self.timed: dict[str, dict[tuple[str, str, str], _Histogram]] = {t: {} for t in TIMERS}
        #: The devices, in the order they were added (the kinds' series' order).
        self.devices: list[str] = []

    def add_device(self, device: str) -> None:
        with self.lock:
            self.devices.append(device)
            for reason in _REASONS:  # present from the start at 0
                self.sessions_ended[(device, reason)] = [0]
            for transport in TRANSPORTS:
                self.executions[(device, transport)] = Counter()

    def series(self, table: dict[_K, list[_V]], key: _K, size: int) -> list[_V]:
        """``table``'s series ``key``, added (``size`` zeros) when new."""
        with self.lock:
            return table.setdefault(key, [0] * size)

    def answers(self, key: tuple[str, str, str]) -> Counter:
        """The answer count ``key`` of ``rpcs``, added when new."""
        with self.lock:
            cell = self.rpcs.get(key)
            if cell is None:
                cell = self.rpcs[key] = Counter()
            return cell

    def histogram(self, timer: str, key: tuple[str, str, str]) -> _Histogram:
        """The series ``key`` of histogram ``timer``, added when new."""
        with self.lock:
            series = self.timed[timer]
            cells = series.get(key)
            if cells is None:
                cells = series[key] = _Histogram(self.lock)
            return cells

    def collect(self) -> Iterator[Metric]:
        with self.lock:  # a copy, so that the families are built without holding up a count
            rpcs = [(k, v.value) for k, v in self.rpcs.items()]
            ended = [(k, v[0]) for k, v in self.sessions_ended.items()]
            executions = [(k, v.value) for k, v in self.executions.items()]
            for table in self.timed.values():
                for unfolded in table.values():
                    unfolded.fold()
            timed = {t: [(k, list(v.cells)) for k, v in series.items()] for t, series in self.timed.items()}
            devices = list(self.devices)
        labels = ["device", "method", "status"]
        answers = CounterMetricFamily("nnhal_rpcs", "Answers by device, RPC method and HAL ErrorStatus.", labels=labels)
        kinds = {(d, family, kind): 0 for d in devices for family in ("deadline", "resource") for kind in _KINDS}
        for (device, method, status), n in rpcs:
            answers.add_metric([device, method, status], float(n))
            family_kind = _KIND_BY_NAME.get(status)
            if family_kind is not None:
                kinds[(device, *family_kind)] += n
        yield answers
        for family, name, doc in (
            ("deadline", "nnhal_deadline_misses", "MISSED_DEADLINE_* answers by kind."),
            ("resource", "nnhal_resource_exhausted", "RESOURCE_EXHAUSTED_* refusals by kind."),
        ):
            counter = CounterMetricFamily(name, doc, labels=["device", "kind"])
            for device in devices:
                for kind in _KINDS:
                    counter.add_metric([device, kind], float(kinds[(device, family, kind)]))
            yield counter
        for name, doc, label, values in (
            ("nnhal_sessions_ended", "Sessions ended, by who ended them.", "reason", ended),
            ("nnhal_executions", "Executions launched, by the transport that carried them.", "transport", executions),
        ):
            counter = CounterMetricFamily(name, doc, labels=["device", label])
            for key, n in values:
                counter.add_metric(list(key), float(n))
            yield counter
        for timer, doc in (
            ("prepare", "Server time from a preparation's arrival to its notify."),
            ("execute", "Server time from an execution's arrival to its result."),
        ):
            histogram = HistogramMetricFamily(f"nnhal_{timer}_seconds", doc, labels=labels)
            for series, cells in timed[timer]:
                cumulative = list(itertools.accumulate(cells[:-1]))
                histogram.add_metric(list(series), [(le, float(n)) for le, n in zip(_LE, cumulative)], cells[-1])
            yield histogram


class DeviceMetrics:
    """The counted series of one device (module docstring). Thread-safe."""

    def __init__(self, metrics: Metrics, device: str) -> None:
        self._m = metrics
        self.device = device
        self._counts = counts = metrics.counts
        counts.add_device(device)
        self._by_transport = {t: counts.executions[(device, t)] for t in TRANSPORTS}
        self._answers: dict[tuple[str, int], Counter] = {}
        self._timed: dict[tuple[str, str, int], _Histogram] = {}

    @property
    def registry(self) -> CollectorRegistry:
        """The server's registry, which holds these series."""
        return self._m.registry

    def _answer(self, method: str, status: int) -> Counter:
        """The answer count of ``method`` and ``status`` (resolved once)."""
        cell = self._answers.get((method, status))
        if cell is None:
            cell = self._counts.answers((self.device, method, _status_name(status)))
            self._answers[(method, status)] = cell
        return cell

    def _histogram(self, timer: str, method: str, status: int) -> _Histogram:
        """The histogram ``timer`` of ``method`` and ``status`` (resolved once)."""
        cells = self._timed.get((timer, method, status))
        if cells is None:
            cells = self._counts.histogram(timer, (self.device, method, _status_name(status)))
            self._timed[(timer, method, status)] = cells
        return cells

    def rpc(self, method: str, status: int) -> None:
        """Count one answer of ``method`` with HAL ``status`` (and its miss or refusal kind)."""
        self._answer(method, status).increment()

    def observe(self, timer: str, method: str, status: int, seconds: float) -> None:
        """Time one launched call of ``method`` answered with ``status`` in histogram ``timer``."""
        self._histogram(timer, method, status).observe(seconds)

    def recorder(self, method: str, timer: str | None) -> Callable[[int, float | None], None]:
        """``record(status, seconds)`` of one method: ``rpc`` (and, with ``seconds`` not None,
        ``observe`` in histogram ``timer``; None: not timed) with the series of each status
        resolved once — a call pays a C increment and a list append, no lock or label lookup."""
        if timer is not None and timer not in TIMERS:
            raise ValueError(f"unknown timer {timer!r} (one of {', '.join(TIMERS)})")
        resolved: dict[int, tuple[Callable[[], int], Callable[[float], None]]] = {}

        def resolve(status: int) -> tuple[Callable[[], int], Callable[[float], None]]:
            """The series of ``status``, resolved once: its count and its histogram's ``observe``."""
            count = self._answer(method, status).increment
            observe = _untimed if timer is None else self._histogram(timer, method, status).observe
            return resolved.setdefault(status, (count, observe))

        def record(status: int, seconds: float | None) -> None:
            try:
                count, observe = resolved[status]
            except KeyError:  # the status's first answer
                count, observe = resolve(status)
            count()
            if seconds is not None:
                observe(seconds)

        return record

    def timer(self, timer: str | None) -> Callable[[str, int, float], None] | None:
        """``observe`` bound to histogram ``timer`` (None: not timed)."""
        if timer is None:
            return None
        if timer not in TIMERS:
            raise ValueError(f"unknown timer {timer!r} (one of {', '.join(TIMERS)})")
        return lambda method, status, seconds: self.observe(timer, method, status, seconds)

    def session_ended(self, reason: str) -> None:
        counts = self._counts
        cell = counts.series(counts.sessions_ended, (self.device, reason), 1)
        with counts.lock:
            cell[0] += 1

    def execution(self, transport: str) -> None:
        """Count one execution launched over ``transport`` (one of ``TRANSPORTS``)."""
        self._by_transport[transport].increment()

    def execution_counts(self) -> dict[str, Callable[[], object]]:
        """Per transport, what counts one execution launched over it (``execution``, resolved:
        one C call)."""
        return {t: c.increment for t, c in self._by_transport.items()}

    def executions_by_transport(self) -> dict[str, int]:
        """The executions counted so far, by transport (every one of ``TRANSPORTS``)."""
        return {t: count.value for t, count in self._by_transport.items()}


class Metrics:
    """The metrics of one server: ``drivers`` by device name (or one driver, named after its
    config). :meth:`device` gives a device's counted series; ``serve`` starts the listener."""

    def __init__(self, drivers: Driver | Mapping[str, Driver]) -> None:
        if isinstance(drivers, Driver):
            drivers = {drivers.config.name: drivers}
        self.drivers = dict(drivers)
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        #: Every device's counted series (registered first: the exposition's order as before).
        self.counts = _Counts()
        r.register(self.counts)
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

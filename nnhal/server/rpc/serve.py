"""Starting and stopping the gRPC server: listeners, keepalive, health, reflection, metrics, drain.

Lifecycle (DESIGN.md §12): SIGTERM or SIGINT starts a drain — health answers
NOT_SERVING at once, every session stream gets an event with ``draining`` set,
new work is refused with DEVICE_UNAVAILABLE (``nnhal.server.lifecycle``) and
launched work has ``drain_seconds`` to finish. Work still running then is ended
with DEVICE_UNAVAILABLE (``lifecycle.DRAIN_EXPIRED``) at its next operation
boundary, so each callback still gets its one notify (a kernel that does not
return within ``EXPIRE_GRACE_S`` more is cut off by the exit: the client's death
monitor then notifies it, once, with DEAD_OBJECT). Then the session streams end,
the sessions' objects are released and the process exits with status 0. A
second signal during the drain ends the drain time at once.

Keepalive: the server pings a client after 2 s without hearing from it (also
with no data flowing: a session stream is silent after its first event) and
drops a connection whose ping, or any other ping, is not acknowledged within
2 s; the streams on it end, so a frozen or vanished client's sessions and
objects are released within the documented bound of 10 s.

TLS (``tls``, ``nnhal.server.rpc.identity``): with a certificate and key every TCP
listener serves TLS, loopback included (one rule, and a client configured for TLS
works on any of them); unix sockets stay plaintext, guarded by the socket file's
permissions. With a client CA clients must present a certificate it signed (mTLS)
and that certificate's identity is the HAL client of the sessions they open.
Serving plaintext on a TCP address that is not loopback logs a warning.

Metrics (``metrics_listen``, off by default): ``nnhal.server.metrics`` on an
HTTP listener of their own. With a ``port_file`` the bound metrics address is
written to the file next to it named ``<port_file>.metrics`` (one line), so the
port file itself keeps one gRPC address per line.

Health-only listener (``health_listen``, off by default): a plaintext gRPC listener
serving ``grpc.health.v1`` and nothing else (any HAL RPC there is UNIMPLEMENTED), for
probes that cannot speak TLS (the kubelet's native gRPC probes). It shares the main
listeners' health state, so it answers NOT_SERVING from the start of a drain, and it
stops last. Its bound address goes to ``<port_file>.health``.

Request ids (``nnhal.server.rpc.request_id``): every call gets one, logged with the
call's log lines and sent back in its trailing metadata (the handlers are wrapped when
registered, ``sync_handlers.Collector``: no interceptor runs per call without mTLS).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from nnhal.core import telemetry
from nnhal.core.wire import MAX_MESSAGE_BYTES, max_inline_bytes
from nnhal.proto import (
    devices_pb2 as dpb,
    fastpath_pb2 as fpb,
    service_pb2 as spb,
    service_pb2_grpc as sgrpc,
    streamed_pb2 as stpb,
)
from nnhal.server.call_log import CallLog
from nnhal.server.defaults import EVENT_LOOPS
from nnhal.server.device_config import READ_SHARE
from nnhal.server.devices import DeviceSpec, make_backend
from nnhal.server.driver import DeviceConfig, Driver
from nnhal.server.executions import Executions
from nnhal.server.memory_release import configure_allocator
from nnhal.server.metrics import Metrics
from nnhal.server.recorder import Recorder
from nnhal.server.rpc.buffer_servicer import EchoServicer
from nnhal.server.rpc.forms import SERVICE_NAMES as FORM_SERVICE_NAMES
from nnhal.server.rpc.identity import IdentityInterceptor, ServerTls
from nnhal.server.rpc.inbound import Inbound
from nnhal.server.rpc.reflection import add_reflection
from nnhal.server.rpc.routing import add_device_services
from nnhal.server.rpc.sync_handlers import Collector, use_pool
from nnhal.server.rpc.tracing import server_interceptors
from nnhal.server.tracing import SpanObserver

log = logging.getLogger(__name__)

T = TypeVar("T")

SWITCH_INTERVAL_S = 0.0002
#: After the drain time, how long work that was told to end may take to send its status.
EXPIRE_GRACE_S = 2.0
#: How often a drain looks whether launched work is done.
_DRAIN_POLL_S = 0.02
#: How much longer than its grace the gRPC server may take to stop.
_STOP_SLACK_S = 2.0
#: After every session was told of the drain, the least time before the server stops:
#: the client reads the event on one thread and sees the connection close on another.
_NOTICE_S = 0.25

#: Clients ping every second to detect a frozen server; allow it, and pings on idle channels.
SERVER_OPTIONS: list[tuple[str, int]] = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 200),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 200),
    ("grpc.http2.max_ping_strikes", 0),
    # The server also pings clients, so a frozen or vanished client's session ends.
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 2000),
    # By default gRPC stops pinging after 2 pings with no data sent; a session stream
    # sends none after its first event, so a client that sends no pings of its own and
    # freezes later would go unnoticed.
    ("grpc.http2.max_pings_without_data", 0),
    # A flow-control (BDP) ping outstanding when the client froze blocks the keepalive
    # ping, and waits 60 s by default: the frozen client's session then stayed ~60 s.
    ("grpc.http2.ping_timeout_ms", 2000),
    ("grpc.so_reuseport", 0),
    # A stream's window stays the initial 64 KiB until its handler reads (the whole message is
    # then granted): BDP probing would grow every stream's window, and with it the bytes the
    # transport takes in before a request is admitted (``nnhal.server.rpc.inbound``).
    ("grpc.http2.bdp_probe", 0),
]


def server_options(receive_cap: int) -> list[tuple[str, int]]:
    """:data:`SERVER_OPTIONS` with messages received capped at ``receive_cap`` bytes
    (``DeviceConfig.message_cap``: what one client may hold, read within the reads'
    share), so that a larger one is refused
    (RESOURCE_EXHAUSTED) before the server buffers it."""
    return [(k, receive_cap if k == "grpc.max_receive_message_length" else v) for k, v in SERVER_OPTIONS]


SERVICE_NAMES = (
    *(
        spb.DESCRIPTOR.services_by_name[name].full_name
        for name in ("Device", "PreparedModel", "FencedExecutionCallback", "Buffer", "Echo")
    ),
    fpb.DESCRIPTOR.services_by_name["FastPath"].full_name,
    stpb.DESCRIPTOR.services_by_name["StreamedExecution"].full_name,
    dpb.DESCRIPTOR.services_by_name["DeviceManager"].full_name,
)


@dataclass
class ServerOptions:
    listen: list[str] = field(default_factory=lambda: ["127.0.0.1:50051"])
    port_file: Path | None = None
    max_threads: int = 256
    device: DeviceConfig = field(default_factory=DeviceConfig)
    #: Seconds launched work may take to finish after SIGTERM / SIGINT.
    drain_seconds: float = 10.0
    #: host:port of the Prometheus metrics listener; None: no listener.
    metrics_listen: str | None = None
    #: Certificate, key and optional client CA (mTLS) for the TCP listeners; None: plaintext.
    tls: ServerTls | None = None
    #: host:port of a plaintext listener serving only grpc.health.v1; None: no such listener.
    health_listen: str | None = None
    #: Offer same-host clients bursts over shared memory (``openFastBurst``).
    fast_path: bool = True
    #: The devices hosted (``nnhal.server.devices``), the first the default; empty: one CPU
    #: device named ``device.name``. Each gets ``device``'s settings under its own name.
    devices: list[DeviceSpec] = field(default_factory=list)
    #: Intra-op threads of each ort device's sessions.
    ort_threads: int = 1
    #: Record every session's HAL calls into this folder (``nnhal.server.recorder``); None: off.
    record: Path | None = None
    #: The event loop the gRPC servers run on (one of :data:`EVENT_LOOPS`; :func:`new_event_loop`).
    event_loop: str = "auto"


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """A new event loop of ``kind``: ``"uvloop"`` (libuv's, written in C: its scheduling,
    polling and timers cost no Python calls, where asyncio's own loop makes about a hundred
    per RPC), ``"asyncio"`` (the standard library's), or ``"auto"``: uvloop where it is
    installed, else asyncio. Both serve the same: one thread, the same coroutines, handles
    and futures. ValueError for another kind, or for ``"uvloop"`` where it is not installed."""
    if kind not in EVENT_LOOPS:
        raise ValueError(f"unknown event loop {kind!r} (one of {', '.join(EVENT_LOOPS)})")
    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise ValueError("the uvloop event loop is not installed (pip install uvloop)") from None
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    return asyncio.new_event_loop()


def is_loopback_host(host: str) -> bool:
    """True for a listen host only this machine can reach."""
    host = host.strip("[]").lower()
    return host == "localhost" or host.startswith("127.") or host == "::1"


class Server:
    """A running nnhal server; ``drain`` then ``stop`` end it (sessions are released).

    The gRPC servers are ``grpc.aio`` servers on an event loop running on a thread of its
    own (``nnhal-aio``), so that the methods here stay plain blocking calls for the main
    thread, which keeps the signals (``run_forever``). Handlers that do work run on the
    worker pool (``max_threads``; ``nnhal.server.rpc.sync_handlers``); waits that hold no
    work (session streams, idle bursts, a parked preparation or execution stream) hold no
    thread. The loop and its thread end with ``stop``."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        base = dataclasses.replace(options.device, max_threads=options.max_threads)
        #: Every device by name, the default first; ``driver`` is the default device's.
        self.drivers: dict[str, Driver] = {}
        for spec in options.devices or [DeviceSpec(base.name, "cpu")]:
            backend = make_backend(spec.kind, options.ort_threads, spec.strict)
            config = dataclasses.replace(base, name=spec.name, executor=backend.description)
            self.drivers[spec.name] = Driver(config, backend)
        self.driver = next(iter(self.drivers.values()))
        #: The largest message the server receives: what the most limited device's client may
        #: hold, read within the share of the memory total kept for reads (``message_cap``).
        self.receive_cap = min(d.config.message_cap(MAX_MESSAGE_BYTES) for d in self.drivers.values())
        #: The admission of request bytes and the bound on writes (``nnhal.server.rpc.inbound``):
        #: the devices share the process's memory, so the default device's limits.
        self.inbound = Inbound(
            self.receive_cap,
            base.memory_per_client,
            self.driver.budget,
            read_bytes=base.memory_total // READ_SHARE,
            verified=options.tls is not None and options.tls.client_ca is not None,
        )
        self.metrics = Metrics(self.drivers)
        #: The one owner of each device's HAL calls, handed to every servicer of the device.
        self.executions = {name: Executions(d, self.metrics, max_inline_bytes) for name, d in self.drivers.items()}
        for executions in self.executions.values():
            executions.observe(CallLog())  # every failed call on the log once, with its request id
        #: The recorders of ``--record`` (one per device), ended by ``stop``.
        self.recorders: list[Recorder] = []
        if options.record is not None:
            for name, x in self.executions.items():
                recorder = Recorder(options.record, self.drivers[name])
                x.observe(recorder)
                self.recorders.append(recorder)
        if telemetry.configure("nnhal-server"):
            for name, x in self.executions.items():
                x.observe(SpanObserver(name))
        #: The bound metrics address once ``start`` served it.
        self.metrics_address: str | None = None
        #: The bound health-only address once built (``health_listen``).
        self.health_address: str | None = None
        self._credentials = options.tls.credentials() if options.tls is not None else None
        self.health = health.aio.HealthServicer()
        self.addresses: list[str] = []
        self._health_grpc: aio.Server | None = None
        self._pool = futures.ThreadPoolExecutor(max_workers=options.max_threads, thread_name_prefix="nnhal-rpc")
        self._loop = new_event_loop(options.event_loop)
        use_pool(self._loop, self._pool)
        self._thread = threading.Thread(target=self._serve_loop, name="nnhal-aio", daemon=True)
        self._thread.start()
        self._stopped = False
        try:
            self._grpc = self._on_loop(self._build())
        except BaseException:
            self._end_loop()
            raise

    def _serve_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        finally:
            self._loop.close()  # also shuts the worker pool down (not waiting for busy threads)

    def _on_loop(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``work`` on the server's loop; its result (or exception)."""
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout)

    def call_on_loop(self, fn: Callable[[], T], timeout: float | None = 10.0) -> T:
        """``fn()`` run on the thread of the server's event loop (which serves every call's
        grpc.aio side and the short executions); its result (or exception), waited for at most
        ``timeout`` seconds (TimeoutError)."""

        async def call() -> T:
            return fn()

        return self._on_loop(call(), timeout)

    async def _build(self) -> aio.Server:
        """The servers (made on the loop: grpc.aio binds a server to the loop it is made on)."""
        options = self.options
        # Only with mTLS: the identity interceptor wraps openSession, every other RPC is passed through.
        mtls = options.tls is not None and options.tls.client_ca is not None
        interceptors: list[aio.ServerInterceptor] = [*server_interceptors()]
        if mtls:
            interceptors.append(IdentityInterceptor())
        server = aio.server(options=server_options(self.receive_cap), interceptors=interceptors)
        # Every device's HAL services: 1.3, the fast path, the HIDL 1.0-1.2 and AIDL forms.
        # Every handler is served through generic handlers (``sync_handlers.Collector`` says why).
        add_device_services(server, self.executions, options.fast_path, self.inbound)
        others = Collector()
        sgrpc.add_EchoServicer_to_server(EchoServicer(), others)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, others)
        add_reflection(others, (*SERVICE_NAMES, *FORM_SERVICE_NAMES, health.SERVICE_NAME))
        server.add_generic_rpc_handlers((others,))
        for addr in options.listen:
            self.addresses.append(self._bind(server, addr))
        if options.health_listen is not None:
            # Health checks are coroutines on the loop: the probes never wait for a worker thread.
            self._health_grpc = aio.server(options=[("grpc.so_reuseport", 0)])
            probes = Collector()
            health_pb2_grpc.add_HealthServicer_to_server(self.health, probes)
            self._health_grpc.add_generic_rpc_handlers((probes,))
            self.health_address = _bind_plaintext(self._health_grpc, options.health_listen)
        return server

    def _bind(self, server: aio.Server, addr: str) -> str:
        if addr.startswith("unix:"):
            return _bind_plaintext(server, addr)
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"listen address {addr!r} must be host:port or unix:PATH")
        if self._credentials is None:
            if not is_loopback_host(host):
                log.warning(
                    "serving PLAINTEXT on %s, reachable from other hosts: anyone who reaches it can use the "
                    "device; give --tls-cert and --tls-key (and --tls-client-ca to require client certificates)",
                    addr,
                )
            return _bind_plaintext(server, addr)
        bound = server.add_secure_port(addr, self._credentials)
        if bound == 0:
            raise OSError(f"could not listen on {addr}")
        return f"{host}:{bound}"

    def start(self) -> None:
        """Serve; with ``metrics_listen`` also the metrics (ValueError / OSError when that
        address is malformed or cannot be bound)."""
        if self.options.metrics_listen is not None:
            self.metrics_address = self.metrics.serve(self.options.metrics_listen)
        self._on_loop(self._start())
        port_file = self.options.port_file
        if port_file is not None:
            if self.metrics_address is not None:
                _write_atomically(port_file.with_name(port_file.name + ".metrics"), self.metrics_address + "\n")
            if self.health_address is not None:
                _write_atomically(port_file.with_name(port_file.name + ".health"), self.health_address + "\n")
            _write_atomically(port_file, "\n".join(self.addresses) + "\n")
        tls = self.options.tls
        mode = "plaintext" if tls is None else ("mTLS" if tls.client_ca else "TLS")
        log.info("nnhal serving %s on %s (%s)", ", ".join(self.drivers), ", ".join(self.addresses), mode)
        if self.metrics_address is not None:
            log.info("metrics on http://%s/metrics", self.metrics_address)
        if self.options.device.fault_injection:
            log.warning(
                "fault injection is ON (--enable-fault-injection): any client may make this server fail, delay "
                "or abort its calls; for tests only, never on a shared server"
            )
        if self.health_address is not None:
            log.info("health only (grpc.health.v1, plaintext) on %s", self.health_address)

    async def _start(self) -> None:
        if self._health_grpc is not None:
            await self._health_grpc.start()
        await self._grpc.start()
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    def drain(self, seconds: float, hurry: threading.Event | None = None) -> bool:
        """Drain (module docstring): refuse new work, wait up to ``seconds`` (less once
        ``hurry`` is set) for launched work, then end what is left. True when all launched
        work finished by itself."""
        drivers = list(self.drivers.values())
        if not any([d.lifecycle.begin_drain() for d in drivers]):  # a list: every device begins
            return all(d.idle for d in drivers)
        self._on_loop(self.health.enter_graceful_shutdown())
        log.info("draining: new work is refused; launched work has %.1f s to finish", seconds)
        hurry = hurry or threading.Event()
        start = time.monotonic()
        end = start + max(0.0, seconds)

        def idle() -> bool:
            return all(d.idle for d in drivers)

        def done() -> bool:
            if not (idle() and all(d.lifecycle.all_told for d in drivers)):
                return False
            return time.monotonic() >= min(end, start + _NOTICE_S)

        while not done() and time.monotonic() < end and not hurry.wait(_DRAIN_POLL_S):
            pass
        if idle():
            log.info("drained: all launched work finished")
            return True
        if hurry.is_set():
            log.warning("second interrupt: stopping now, ending the work left with DEVICE_UNAVAILABLE")
        else:
            log.warning("the drain time ran out: ending the work left with DEVICE_UNAVAILABLE")
        for d in drivers:
            d.expire_drain()
        end = time.monotonic() + EXPIRE_GRACE_S
        while not idle() and time.monotonic() < end:
            time.sleep(_DRAIN_POLL_S)
        return False

    def stop(self, grace: float = 1.0) -> None:
        """End the session streams (their objects are released), the servers and their loop.
        Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        # Refuse new calls (gRPC answers UNAVAILABLE: DEAD_OBJECT to the client) before the
        # sessions close: a call that arrived between the two found its session gone and was
        # answered INVALID_ARGUMENT "unknown session", though its server was what went away.
        refusing = threading.Event()
        stopping = asyncio.run_coroutine_threadsafe(self._stop(grace, refusing), self._loop)
        refusing.wait(_STOP_SLACK_S)
        for driver in self.drivers.values():
            driver.lifecycle.stop()
        try:
            stopping.result(grace + _STOP_SLACK_S)
        except futures.TimeoutError:  # gRPC cancels what is left after ``grace``; this bounds the wait
            log.warning("the gRPC server did not stop within %.1f s; ending anyway", grace + _STOP_SLACK_S)
        finally:
            for recorder in self.recorders:
                recorder.close()
            self.metrics.close()
            self._end_loop()
            telemetry.shutdown()  # export the spans still buffered

    async def _stop(self, grace: float, refusing: threading.Event) -> None:
        await self.health.enter_graceful_shutdown()
        stopping = asyncio.ensure_future(self._grpc.stop(grace))
        await asyncio.sleep(0)  # the stop's first step shuts the listeners and refuses new calls
        refusing.set()
        await stopping
        if self._health_grpc is not None:
            await self._health_grpc.stop(0)

    def _end_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)

    def wait(self) -> None:
        """Until the server stopped."""
        self._thread.join()


def run_forever(options: ServerOptions) -> None:
    # Kernels hold the GIL between numpy calls; a short switch interval lets the
    # gRPC threads of high-priority work in quickly (the default is 5 ms).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    # Large messages and tensors come and go with the calls: their memory goes back at once.
    configure_allocator()
    server = Server(options)
    server.start()
    # What start made (modules, protobuf descriptors, devices) lives as long as the process:
    # out of the collector's generations, a full collection (the trimmer's, or one the
    # allocations trigger, both holding the GIL and so stalling every execution thread) walks
    # only what calls made since.
    gc.freeze()
    done, hurry = threading.Event(), threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if done.is_set():
            log.info("signal %d again: ending the drain now", signum)
            hurry.set()
            return
        log.info("signal %d: draining, then shutting down", signum)
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not done.wait(0.5):
        pass
    server.drain(options.drain_seconds, hurry)
    server.stop()
    _remove_port_files(options.port_file)
    logging.shutdown()
    # Worker threads may still sit inside a long kernel or an injected delay;
    # in-flight RPCs had their grace period, so end the process now.
    os._exit(0)


def _remove_port_files(port_file: Path | None) -> None:
    """Remove the port file and its ``.metrics`` / ``.health`` companions: once the server has
    stopped they name addresses nothing listens on."""
    if port_file is None:
        return
    for path in (
        port_file,
        port_file.with_name(port_file.name + ".metrics"),
        port_file.with_name(port_file.name + ".health"),
    ):
        try:
            path.unlink(missing_ok=True)
        except OSError as err:  # a folder or permissions changed meanwhile: the exit goes on
            log.warning("could not remove %s: %s", path, err.strerror or err)


def _bind_plaintext(server: aio.Server, addr: str) -> str:
    """Bind ``addr`` (host:port or unix:PATH) without TLS; the bound address."""
    if addr.startswith("unix:"):
        path = Path(addr[len("unix:") :])
        if path.exists() and path.is_socket():
            # A socket file outlives a killed server (stale: replaced); one that answers is
            # another server's, which unlinking would leave running and unreachable.
            if _unix_socket_answers(path):
                raise OSError(f"{addr} is in use: another process is listening on it (stop it or choose another path)")
            path.unlink()
        server.add_insecure_port(addr)
        return addr
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"listen address {addr!r} must be host:port or unix:PATH")
    bound = server.add_insecure_port(addr)
    if bound == 0:
        raise OSError(f"could not listen on {addr}")
    return f"{host}:{bound}"


def _unix_socket_answers(path: Path) -> bool:
    """True when something accepts connections on the unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        try:
            probe.connect(str(path))
        except TimeoutError:  # a listener whose backlog is full is still a listener
            return True
        except OSError:  # ECONNREFUSED: nothing listens (a stale file)
            return False
    return True


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)

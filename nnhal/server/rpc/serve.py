"""Assembling, starting and stopping the gRPC server: services, health, reflection, metrics, drain.

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

The settings are :class:`~nnhal.server.rpc.server_options.ServerOptions`; the channel
arguments (message sizes, keepalive) :mod:`nnhal.server.rpc.channel_args`; the listeners
are bound by :mod:`nnhal.server.rpc.listeners` (TLS on every TCP listener when configured)
and the bound addresses written by :mod:`nnhal.server.rpc.port_files`.

TLS (``tls``, ``nnhal.server.rpc.identity``): with a client CA clients must present a
certificate it signed (mTLS) and that certificate's identity is the HAL client of the
sessions they open.

Metrics (``metrics_listen``, off by default): ``nnhal.server.metrics`` on an
HTTP listener of their own.

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
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent import futures
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
from nnhal.server.device_config import READ_SHARE
from nnhal.server.devices import DeviceSpec, make_backend
from nnhal.server.driver import Driver
from nnhal.server.executions import Executions
from nnhal.server.memory_release import configure_allocator
from nnhal.server.metrics import Metrics
from nnhal.server.recorder import Recorder
from nnhal.server.rpc.buffer_servicer import EchoServicer
from nnhal.server.rpc.channel_args import server_options
from nnhal.server.rpc.event_loop import new_event_loop
from nnhal.server.rpc.forms import SERVICE_NAMES as FORM_SERVICE_NAMES
from nnhal.server.rpc.identity import IdentityInterceptor
from nnhal.server.rpc.inbound import Inbound
from nnhal.server.rpc.listeners import bind, bind_plaintext
from nnhal.server.rpc.port_files import remove_port_files, write_port_files
from nnhal.server.rpc.reflection import add_reflection
from nnhal.server.rpc.routing import add_device_services
from nnhal.server.rpc.server_options import ServerOptions
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

SERVICE_NAMES = (
    *(
        spb.DESCRIPTOR.services_by_name[name].full_name
        for name in ("Device", "PreparedModel", "FencedExecutionCallback", "Buffer", "Echo")
    ),
    fpb.DESCRIPTOR.services_by_name["FastPath"].full_name,
    stpb.DESCRIPTOR.services_by_name["StreamedExecution"].full_name,
    dpb.DESCRIPTOR.services_by_name["DeviceManager"].full_name,
)


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
            self.addresses.append(bind(server, addr, self._credentials))
        if options.health_listen is not None:
            # Health checks are coroutines on the loop: the probes never wait for a worker thread.
            self._health_grpc = aio.server(options=[("grpc.so_reuseport", 0)])
            probes = Collector()
            health_pb2_grpc.add_HealthServicer_to_server(self.health, probes)
            self._health_grpc.add_generic_rpc_handlers((probes,))
            self.health_address = bind_plaintext(self._health_grpc, options.health_listen)
        return server

    def start(self) -> None:
        """Serve; with ``metrics_listen`` also the metrics (ValueError / OSError when that
        address is malformed or cannot be bound)."""
        if self.options.metrics_listen is not None:
            self.metrics_address = self.metrics.serve(self.options.metrics_listen)
        self._on_loop(self._start())
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
        # Last: whoever waits for the port file finds the server serving and these lines logged.
        if self.options.port_file is not None:
            write_port_files(self.options.port_file, self.addresses, self.metrics_address, self.health_address)

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
    remove_port_files(options.port_file)
    logging.shutdown()
    # Worker threads may still sit inside a long kernel or an injected delay;
    # in-flight RPCs had their grace period, so end the process now.
    os._exit(0)

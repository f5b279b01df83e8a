"""Starting the gRPC server: listeners, keepalive policy, health and reflection."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from nnhal.core.wire import MAX_MESSAGE_BYTES
from nnhal.proto import service_pb2 as spb
from nnhal.proto import service_pb2_grpc as sgrpc
from nnhal.server.driver import DeviceConfig, Driver
from nnhal.server.rpc.buffer_servicer import BufferServicer, EchoServicer
from nnhal.server.rpc.device_servicer import DeviceServicer
from nnhal.server.rpc.prepared_model_servicer import FencedExecutionCallbackServicer, PreparedModelServicer

log = logging.getLogger(__name__)

SWITCH_INTERVAL_S = 0.0002

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
    ("grpc.so_reuseport", 0),
]

SERVICE_NAMES = tuple(
    spb.DESCRIPTOR.services_by_name[name].full_name
    for name in ("Device", "PreparedModel", "FencedExecutionCallback", "Buffer", "Echo")
)


@dataclass
class ServerOptions:
    listen: list[str] = field(default_factory=lambda: ["127.0.0.1:50051"])
    port_file: Path | None = None
    max_threads: int = 256
    device: DeviceConfig = field(default_factory=DeviceConfig)


class Server:
    """A running nnhal server; ``stop`` ends it (sessions are released)."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.driver = Driver(options.device)
        self._stopping = threading.Event()
        self._grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=options.max_threads, thread_name_prefix="nnhal-rpc"),
            options=SERVER_OPTIONS,
        )
        sgrpc.add_DeviceServicer_to_server(DeviceServicer(self.driver, self._stopping), self._grpc)
        sgrpc.add_PreparedModelServicer_to_server(PreparedModelServicer(self.driver), self._grpc)
        sgrpc.add_FencedExecutionCallbackServicer_to_server(FencedExecutionCallbackServicer(self.driver), self._grpc)
        sgrpc.add_BufferServicer_to_server(BufferServicer(self.driver), self._grpc)
        sgrpc.add_EchoServicer_to_server(EchoServicer(), self._grpc)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._grpc)
        reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), self._grpc)
        self.addresses: list[str] = []
        for addr in options.listen:
            self.addresses.append(self._bind(addr))

    def _bind(self, addr: str) -> str:
        if addr.startswith("unix:"):
            path = Path(addr[len("unix:") :])
            if path.exists() and path.is_socket():
                path.unlink()
            self._grpc.add_insecure_port(addr)
            return addr
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"listen address {addr!r} must be host:port or unix:PATH")
        bound = self._grpc.add_insecure_port(addr)
        if bound == 0:
            raise OSError(f"could not listen on {addr}")
        return f"{host}:{bound}"

    def start(self) -> None:
        self._grpc.start()
        for name in ("", *SERVICE_NAMES):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.options.port_file is not None:
            tmp = self.options.port_file.with_suffix(".tmp")
            tmp.write_text("\n".join(self.addresses) + "\n")
            tmp.replace(self.options.port_file)
        log.info("nnhal serving %s on %s", self.driver.config.name, ", ".join(self.addresses))

    def stop(self, grace: float = 1.0) -> None:
        self._stopping.set()
        self.health.enter_graceful_shutdown()
        self._grpc.stop(grace).wait(grace + 1)

    def wait(self) -> None:
        self._grpc.wait_for_termination()


def run_forever(options: ServerOptions) -> None:
    # Kernels hold the GIL between numpy calls; a short switch interval lets the
    # gRPC threads of high-priority work in quickly (the default is 5 ms).
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    server = Server(options)
    server.start()
    done = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d: shutting down", signum)
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not done.wait(0.5):
        pass
    server.stop()
    logging.shutdown()
    # Worker threads may still sit inside a long kernel or an injected delay;
    # in-flight RPCs had their grace period, so end the process now.
    os._exit(0)

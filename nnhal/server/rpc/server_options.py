"""What a server serves and how: listeners, threads, devices, drain time, TLS, metrics,
health-only listener, recording and event loop (``nnhal.server.rpc.serve.Server``'s settings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nnhal.server.devices import DeviceSpec
from nnhal.server.driver import DeviceConfig
from nnhal.server.rpc.identity import ServerTls


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
    #: The event loop the gRPC servers run on (one of ``nnhal.server.defaults.EVENT_LOOPS``;
    #: ``nnhal.server.rpc.event_loop.new_event_loop``).
    event_loop: str = "auto"

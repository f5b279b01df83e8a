"""DeviceConfig: what a device offers and the limits it keeps (the driver reads it at start).

Also the vendor extensions a device can offer, by name (``AVAILABLE_EXTENSIONS``).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from nnhal import __version__
from nnhal.core.enums import DeviceType, HalVersion
from nnhal.server.executor import example_extension
from nnhal.server.shared_regions import SharedMemoryPolicy

#: The vendor extensions a device can offer (``DeviceConfig.extensions``), by name.
AVAILABLE_EXTENSIONS = {example_extension.NAME: example_extension.DEFINITION}

#: Requests being read may hold this share of the memory total (at least one request's).
READ_SHARE = 4
#: gRPC's Python server holds a message being read about three times: the transport's slices,
#: the buffer they are gathered into and the ``bytes`` made of it; then the ``bytes`` and the
#: message parsed from them. A read's place is this many times the largest message.
READ_COPIES = 3


@dataclass
class DeviceConfig:
    """A device's identity (name, feature level, type), its limits and its options."""

    name: str = "nnhal-cpu"
    feature_level: HalVersion = HalVersion.AIDL_V4
    device_type: DeviceType = DeviceType.CPU
    shared_memory: SharedMemoryPolicy | None = None
    #: Concurrent executions and how many more may queue (RESOURCE_EXHAUSTED_TRANSIENT beyond).
    slots: int = 2
    queue_depth: int = 64
    #: Bytes (model constants, buffers, in-flight request data) per client and in total; 0 = no limit.
    memory_per_client: int = 0
    memory_total: int = 0
    #: Sessions open at once. A session holds no thread (its stream is a coroutine), only
    #: memory, its connection's included (``python -m nnhal.bench.scale`` measures how much).
    max_sessions: int = 1024
    #: Sessions open at once per client unit (``session.peer_unit``: a verified identity, or a
    #: remote TCP peer's address; same-host peers are not capped by this).
    max_sessions_per_peer: int = 64
    #: Long-lived calls (open bursts, getExecutionInfo waits) per client, and in total (0: derived
    #: from the worker threads, so that some always stay free for executions, stats and releases).
    max_bursts_per_session: int = 16
    max_fence_waits_per_session: int = 16
    #: Preparations between launch and notify per client (each holds a worker thread while it works).
    max_preparations_per_session: int = 16
    max_long_calls: int = 0
    #: The server's worker threads (ServerOptions.max_threads), for the derived total.
    max_threads: int = 256
    #: Executions the client gave no deadline end (MISSED_DEADLINE_PERSISTENT) after this; 0 = never.
    max_execution_seconds: float = 0.0
    fault_injection: bool = False
    #: With fault_injection: the seed of a seeded fault schedule (None: none) and the share
    #: of scoped calls it faults (``nnhal.server.rpc.faults``).
    fault_seed: int | None = None
    fault_rate: float = 0.1
    #: Vendor extensions this device offers, by name (each in AVAILABLE_EXTENSIONS).
    extensions: tuple[str, ...] = ()
    #: Seals compilation caches; persist it (cache.load_secret) so caches survive restarts.
    cache_secret: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    #: What computes (the backend's description), for the version string.
    executor: str = "numpy CPU executor"

    @property
    def version_string(self) -> str:
        return f"nnhal {__version__} (NN HAL {self.feature_level.label}, {self.executor})"

    def receive_cap(self, transport_max: int) -> int:
        """The largest message a client of this device may send (at most ``transport_max``): a
        message larger than the memory one client may hold (the smallest non-zero memory
        limit) could never be charged, so the transport refuses it before buffering it."""
        limits = [n for n in (self.memory_per_client, self.memory_total) if n > 0]
        return min([transport_max, *limits])

    def message_cap(self, transport_max: int) -> int:
        """The largest single message a client of this device may send (at most
        ``receive_cap``): one whose read, :data:`READ_COPIES` times its size while the
        transport hands it over and it is parsed, fits in the :data:`READ_SHARE` of the memory
        total kept for reads. A larger request travels in chunks (``executeStreamed``, charged
        chunk by chunk) or in shared memory; sent as one message, the transport refuses it
        before buffering it."""
        cap = self.receive_cap(transport_max)
        if self.memory_total > 0:
            cap = min(cap, max(1, self.memory_total // (READ_SHARE * READ_COPIES)))
        return cap

    def limits(self) -> dict[str, int]:
        return {
            "slots": self.slots,
            "queue_depth": self.queue_depth,
            "memory_per_client": self.memory_per_client,
            "memory_total": self.memory_total,
            "max_sessions": self.max_sessions,
            "max_sessions_per_peer": self.max_sessions_per_peer,
        }

"""A client session: the scope of every object a client creates (DESIGN.md §3).

A session opens when a client's session stream starts and closes when it ends
(clean close, crash, lost network, keepalive expiry); the device then releases
everything the session owns. Whether the peer is on the server's host (which
decides if it may name shared-memory regions) is decided once, here, from the
address of the stream that opened the session.

Identity (DESIGN.md §12): with mTLS the RPC layer publishes the verified certificate
identity in ``VERIFIED_CLIENT`` while a session opens; such a session's ``client_key``
(the scope of priorities and of the per-client memory quota) is that identity, shared by
every session of the same certificate. Without one a session is its own client.

Lock order: a session's lock is taken before any handle table's lock (tables
are leaves); the device's session-map lock is never held while taking it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nnhal.core.errors import InvalidArgument, MissedDeadlineTransient
from nnhal.server.shared_regions import RegionCache

if TYPE_CHECKING:
    from nnhal.server.executions.lean import Standing

CLOSED = "unknown or closed session; open a session first"
STOPPED = "the server is stopping and its sessions ended with it; reconnect once it restarted"
#: The verified (mTLS) identity of the client whose session opens on this thread, if any.
VERIFIED_CLIENT: ContextVar[str | None] = ContextVar("nnhal_verified_client", default=None)
_LOCAL_PREFIXES = ("unix:", "ipv4:127.", "ipv6:[::1]", "ipv6:%5B::1%5D")


def is_local_address(peer: str) -> bool:
    """True for a gRPC peer address on this host (unix socket or loopback)."""
    return peer.startswith(_LOCAL_PREFIXES)


def peer_unit(peer: str, identity: str | None) -> str | None:
    """What sessions are capped by (``DeviceConfig.max_sessions_per_peer``): the verified
    identity, else a remote TCP peer's address without its port; None for a peer on this host
    (a unix socket or loopback: without TLS same-host processes look alike by address)."""
    if identity is not None:
        return client_key_of(identity)
    if is_local_address(peer):
        return None
    host, sep, _port = peer.rpartition(":")
    return host if sep else peer


@dataclass(frozen=True)
class Faults:
    """Test-only delays (``--enable-fault-injection``); zero means none."""

    prepare_delay_ms: int = 0
    execute_delay_ms: int = 0


def delay(ms: int, deadline_ns: int | None, check: Callable[[], None] | None = None) -> None:
    """Sleep ``ms`` (an injected fault), ending early with MISSED_DEADLINE_TRANSIENT
    when the deadline passes meanwhile, or with whatever ``check`` raises (it is
    called every 10 ms: the end of a server's drain)."""
    if not ms:
        return
    end = time.monotonic_ns() + ms * 1_000_000
    while time.monotonic_ns() < end:
        time.sleep(min(0.01, (end - time.monotonic_ns()) / 1e9 + 1e-4))
        if check is not None:
            check()
        if deadline_ns is not None and time.monotonic_ns() >= deadline_ns:
            raise MissedDeadlineTransient("the deadline passed while the device was delayed")


def client_key_of(identity: str) -> str:
    """The ``client_key`` of the sessions of a verified identity."""
    return f"x509:{identity}"


class Session:
    """One client's session. ``closed`` only ever goes from False to True."""

    def __init__(
        self, sid: str, client_name: str, peer: str, identity: str | None = None, protocol_version: int = 1
    ) -> None:
        self.id = sid
        #: The wire protocol version the session speaks (``nnhal.core.wire_session``): how the
        #: server reads its requests' omitted fields.
        self.protocol_version = protocol_version
        #: The verified certificate identity (mTLS), which is then also the client name.
        self.identity = identity
        self.client_name = identity if identity is not None else client_name
        #: Who priorities and the per-client quota are scoped to: the identity, else this session.
        self.client_key = client_key_of(identity) if identity is not None else sid
        self.peer = peer
        self.is_local = is_local_address(peer)
        self.lock = threading.Lock()
        self.closed = False
        self.faults = Faults()
        #: Shared regions this session's requests named, kept mapped between executions.
        self.regions = RegionCache()
        #: The standing charge of its small executions' request data run on the event loop's
        #: thread (``executions.lean.Standing``, made by the first): given back with the session.
        self.standing: Standing | None = None

    @contextmanager
    def adding(self, closed_message: str = CLOSED) -> Iterator[None]:
        """Hold while adding an object to a handle table: once ``close`` returned, nothing
        more is added, so the device's release of the session's tables misses nothing.
        INVALID_ARGUMENT ``closed_message`` when the session is already closed."""
        with self.lock:
            if self.closed:
                raise InvalidArgument(closed_message)
            yield

    def close(self) -> None:
        with self.lock:
            self.closed = True
        self.regions.close()

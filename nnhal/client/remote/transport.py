"""Transport: channel options, the table from gRPC failures to HAL errors, deadline arithmetic, stubs.

Mapping (DESIGN §2), applied by :func:`map_rpc_error` only, which the session's
one call path (``SessionChannel.invoke``) calls for every failed RPC:

==========================  =============================================
gRPC status                 HAL error
==========================  =============================================
UNAVAILABLE, CANCELLED*     DEAD_OBJECT (the service vanished or is unreachable)
DEADLINE_EXCEEDED           MISSED_DEADLINE_TRANSIENT if the call carried a HAL
                            deadline, else DEAD_OBJECT (the server stopped answering)
RESOURCE_EXHAUSTED          RESOURCE_EXHAUSTED_PERSISTENT for a message over the
                            size limit, else RESOURCE_EXHAUSTED_TRANSIENT
anything else               GENERAL_FAILURE with the transport's details
==========================  =============================================

(*) CANCELLED not caused by this client (the channel closed under the call).

Deadlines (DESIGN §2): :func:`remaining_time` turns a relative ``timeout`` and an
absolute ``deadline_at`` (``time.monotonic()``) into the HAL deadline that
travels; :func:`grpc_timeout` adds :data:`DEADLINE_MARGIN` for the transport, so
the server's own MISSED_DEADLINE_* answer arrives first and no call waits forever.

TLS (DESIGN §12): :class:`TlsConfig` names the CA that verifies the server and, for
mTLS, the client's certificate and key (PEM files, read when a channel opens; a file
that cannot be read is INVALID_ARGUMENT). :meth:`TlsConfig.from_env` reads
``NNHAL_TLS_CA``, ``NNHAL_TLS_CERT``, ``NNHAL_TLS_KEY`` and ``NNHAL_TLS_SERVER_NAME``.
The server's name is checked against the host of the address unless ``server_name``
overrides it. Unix-socket addresses are always plaintext, as the server serves them.
"""

from __future__ import annotations

import itertools
import os
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import grpc

from nnhal.client.remote import encoded
from nnhal.core import wire_stream
from nnhal.core.errors import (
    DeadObject,
    GeneralFailure,
    HalError,
    InvalidArgument,
    MissedDeadlineTransient,
    ResourceExhaustedPersistent,
    ResourceExhaustedTransient,
)
from nnhal.core.wire import MAX_MESSAGE_BYTES
from nnhal.proto import (
    aidl_pb2_grpc as agrpc,
    fastpath_pb2_grpc as fpgrpc,
    hidl_pb2_grpc as hgrpc,
    service_pb2 as spb,
    service_pb2_grpc as sgrpc,
    streamed_pb2 as stpb,
)

#: A call's gRPC metadata: (key, value) pairs.
Metadata = tuple[tuple[str, str], ...]
#: Seconds for calls with no HAL deadline: generous, but never unbounded.
DEFAULT_CALL_TIMEOUT = 600.0
#: Margin added to a HAL deadline to form the gRPC deadline, so that the
#: server's own MISSED_DEADLINE_* answer arrives before the transport gives up.
DEADLINE_MARGIN = 2.0
#: The session stream lives as long as the client: far away, but finite.
SESSION_STREAM_TIMEOUT = 365 * 24 * 3600.0
BURST_STREAM_TIMEOUT = DEFAULT_CALL_TIMEOUT * 6
#: A release on garbage collection must not hold up the collecting thread for long.
GC_RELEASE_TIMEOUT = 5.0

#: Keepalive every 1 s, failing after 1 s without an ack: a frozen (SIGSTOP)
#: server is detected within the documented bound (``DEATH_DETECTION_BOUND_S``, 5 s).
KEEPALIVE_TIME_MS = 1000
KEEPALIVE_TIMEOUT_MS = 1000
DEATH_DETECTION_BOUND_S = 5.0


def channel_options(
    keepalive_ms: int = KEEPALIVE_TIME_MS, timeout_ms: int = KEEPALIVE_TIMEOUT_MS
) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", timeout_ms),
        ("grpc.http2.ping_timeout_ms", timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        # Reconnect quickly after a restart (resilient wrappers rely on it).
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        ("grpc.enable_retries", 0),
        # Each proxy owns its connection: another proxy closing its channel must
        # never look like a death of this one.
        ("grpc.use_local_subchannel_pool", 1),
    ]


@dataclass(frozen=True)
class TlsConfig:
    """TLS for a client channel: ``ca`` verifies the server (None: the system's roots);
    ``cert`` and ``key`` (both or neither) are the client's certificate for mTLS;
    ``server_name`` replaces the address's host in the server's certificate check."""

    ca: str | Path | None = None
    cert: str | Path | None = None
    key: str | Path | None = None
    server_name: str | None = None

    ENV = ("NNHAL_TLS_CA", "NNHAL_TLS_CERT", "NNHAL_TLS_KEY", "NNHAL_TLS_SERVER_NAME")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TlsConfig | None:
        """The configuration the NNHAL_TLS_* variables give; None when none is set."""
        env = os.environ if environ is None else environ
        ca, cert, key, name = (env.get(var, "").strip() or None for var in cls.ENV)
        if ca is None and cert is None and key is None:
            return None
        return cls(ca, cert, key, name)

    def credentials(self) -> grpc.ChannelCredentials:
        """The channel credentials (INVALID_ARGUMENT for a file that cannot be read)."""
        if (self.cert is None) != (self.key is None):
            raise InvalidArgument("TLS: a client certificate needs its key and a key its certificate")
        return grpc.ssl_channel_credentials(
            root_certificates=_pem(self.ca, "CA") if self.ca is not None else None,
            private_key=_pem(self.key, "key") if self.key is not None else None,
            certificate_chain=_pem(self.cert, "certificate") if self.cert is not None else None,
        )

    def options(self) -> list[tuple[str, str]]:
        return [] if self.server_name is None else [("grpc.ssl_target_name_override", self.server_name)]


def _pem(path: str | Path, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise InvalidArgument(f"TLS {what} file {path}: cannot read it ({err.strerror or err})") from None
    if b"-----BEGIN " not in data:
        raise InvalidArgument(f"TLS {what} file {path}: not a PEM file")
    return data


def open_channel(address: str, options: list[tuple[str, int]], tls: TlsConfig | None) -> grpc.Channel:
    """A channel to ``address``: TLS with ``tls`` on TCP, plaintext otherwise (and on unix sockets)."""
    from nnhal.client.remote.tracing import traced  # it imports this module's neighbours

    target = target_of(address)
    if tls is None or target.startswith("unix:"):
        return traced(grpc.insecure_channel(target, options=options))
    all_options: list[tuple[str, int | str]] = [*options, *tls.options()]
    return traced(grpc.secure_channel(target, tls.credentials(), options=all_options))


def target_of(address: str) -> str:
    """``host:port`` or ``unix:PATH`` as given; ``unix://`` absolute forms are accepted too."""
    if address.startswith("unix://"):
        return "unix:" + address[len("unix://") :]
    return address


def map_rpc_error(err: grpc.RpcError, *, had_deadline: bool = False, what: str = "call") -> HalError:
    """The HAL error a transport failure stands for (see the module table)."""
    code = err.code() if hasattr(err, "code") else None
    details = err.details() if hasattr(err, "details") else str(err)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return DeadObject(f"{what}: the nnhal service is gone or unreachable ({details})")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        if had_deadline:
            return MissedDeadlineTransient(f"{what}: no answer before the deadline ({details})")
        return DeadObject(f"{what}: the server stopped answering ({details})")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if details and "larger than max" in details:
            return ResourceExhaustedPersistent(f"{what}: message over the size limit ({details})")
        return ResourceExhaustedTransient(f"{what}: {details}")
    return GeneralFailure(f"{what}: transport error {code.name if code else '?'}: {details}")


# -- request ids -------------------------------------------------------------------
_ID_PREFIX = secrets.token_hex(4)

#: A fresh request id: this process's random prefix and a counter, in hex (unique, cheap: made
#: in C — ``next`` of the counter's ids, each formatted as it is taken; thread-safe, as a C
#: iterator's step holds the GIL).
new_request_id: Callable[[], str] = partial(next, map(f"{_ID_PREFIX}-{{:x}}".format, itertools.count(1)))


def request_id_of(err: BaseException) -> str | None:
    """The request id of the call a HalError came from (None when it came from no call)."""
    rid = getattr(err, "request_id", None)
    return rid if isinstance(rid, str) else None


def tag_request_id(err: HalError, request_id: str) -> HalError:
    """``err`` carrying ``request_id`` (kept when it already has one)."""
    if request_id and request_id_of(err) is None:
        err.request_id = request_id  # type: ignore[attr-defined]
    return err


# -- deadlines ---------------------------------------------------------------------
def remaining_time(timeout: float | None, deadline_at: float | None = None) -> float | None:
    """Seconds left of the HAL deadline set by a relative ``timeout`` and/or an absolute
    ``deadline_at`` (``time.monotonic()``), the earlier winning; None for no deadline."""
    if deadline_at is None:
        return timeout
    left = deadline_at - time.monotonic()
    # Conditional expressions, not min() and max() (here and below): the same values without
    # a builtin's call on every call with a deadline.
    return left if timeout is None or left < timeout else timeout


def grpc_timeout(remaining: float | None) -> float | None:
    """The gRPC timeout covering a HAL deadline (None without one: the call default applies)."""
    return None if remaining is None else (remaining if remaining > 0.0 else 0.0) + DEADLINE_MARGIN


def wait_bound(timeout: float | None) -> float:
    """How long to wait for the callback of an asynchronous call given ``timeout``:
    its gRPC deadline plus one more margin for the delivery."""
    bound = grpc_timeout(timeout)
    return DEFAULT_CALL_TIMEOUT if bound is None else bound + DEADLINE_MARGIN


class Stubs:
    """The generated stubs of one channel."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.device = sgrpc.DeviceStub(channel)
        self.prepared_model = sgrpc.PreparedModelStub(channel)
        self.fenced = sgrpc.FencedExecutionCallbackStub(channel)
        self.buffer = sgrpc.BufferStub(channel)
        self.echo = sgrpc.EchoStub(channel)
        # The HIDL 1.0-1.2 and AIDL method forms (hidl.proto, aidl.proto).
        self.hidl_device = hgrpc.HidlDeviceStub(channel)
        self.hidl_prepared_model = hgrpc.HidlPreparedModelStub(channel)
        self.aidl_device = agrpc.AidlDeviceStub(channel)
        self.aidl_prepared_model = agrpc.AidlPreparedModelStub(channel)
        self.aidl_fenced = agrpc.AidlFencedExecutionCallbackStub(channel)
        self.execution = agrpc.ExecutionStub(channel)
        self.burst = agrpc.BurstStub(channel)
        self.fast_path = fpgrpc.FastPathStub(channel)
        self.streamed = StreamedStub(channel)
        # ``executeSynchronously_1_3`` and the burst stream taking requests already serialized
        # and giving answers read apart (``nnhal.client.remote.encoded``): the same messages on
        # the wire. The unary one is not registered: a registered method costs the calling
        # thread an observability look-up more per call in grpcio, and saves it nothing.
        service = spb.DESCRIPTOR.services_by_name["PreparedModel"].full_name
        self._channel = channel
        self._execute = f"/{service}/executeSynchronously_1_3"
        self.execute_encoded = self.execute_reading(encoded.execute_answered)  # an ``encoded.Answer``
        self.burst_encoded = channel.stream_stream(
            f"/{service}/configureExecutionBurst",
            request_serializer=None,
            response_deserializer=encoded.burst_answered,  # an ``encoded.Answer``
            _registered_method=True,
        )

    def execute_reading(self, read: Callable[[bytes], Any]) -> Any:
        """``execute_encoded`` whose answers are read by ``read`` (a layout's own reader:
        ``encoded.Framed.read``)."""
        return self._channel.unary_unary(self._execute, request_serializer=None, response_deserializer=read)


class StreamedStub:
    """``StreamedExecutionStub`` with ``wire_stream``'s (de)serializers: a chunk to send is
    a view of the pool joined once with its header, a chunk received a view of the received
    bytes; the same messages on the wire."""

    def __init__(self, channel: grpc.Channel) -> None:
        service = stpb.DESCRIPTOR.services_by_name["StreamedExecution"].full_name
        self.executeStreamed = channel.stream_stream(
            f"/{service}/executeStreamed",
            request_serializer=wire_stream.write_part,
            response_deserializer=wire_stream.parser(stpb.StreamedExecuteResult),
            _registered_method=True,
        )

"""TLS material of the server and the verified identity of an mTLS client (DESIGN.md §12).

Listeners: with a certificate and key every TCP listener (loopback too) serves TLS;
unix sockets stay plaintext (their access is the socket file's permissions). With a
client CA the server requires a client certificate signed by it (mTLS) and the
certificate's identity — its subject CN, else its first subject alternative name —
*is* the HAL client: :class:`IdentityInterceptor` sets it as the client name of the
session the connection opens (the name the client declares is ignored) and publishes
it to the driver through ``nnhal.server.session.VERIFIED_CLIENT`` while the session
opens, so the session's scheduling scope and memory quota key on it
(``Session.client_key``). A session opened over a unix socket has no identity and keys
on itself, as without mTLS.

Files are checked when loaded (:func:`load_server_tls`): missing, unreadable, not PEM,
or a key that does not match the certificate is a ValueError naming the file.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc import aio

from nnhal.server.session import VERIFIED_CLIENT, client_key_of

log = logging.getLogger(__name__)

#: The RPC whose stream opens a session (the only one the interceptor wraps).
OPEN_SESSION = "/nnhal.v1.Device/openSession"


@dataclass(frozen=True)
class ServerTls:
    """PEM bytes of the server's certificate chain and key, and of the client CA (mTLS) or None."""

    cert: bytes
    key: bytes
    client_ca: bytes | None = None

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)],
            root_certificates=self.client_ca,
            require_client_auth=self.client_ca is not None,
        )


def _read(path: Path, what: str) -> bytes:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{what} {path}: no such file") from None
    except OSError as err:
        raise ValueError(f"{what} {path}: cannot read it ({err.strerror or err})") from None
    if b"-----BEGIN " not in data:
        raise ValueError(f"{what} {path}: not a PEM file (no -----BEGIN line)")
    return data


def load_server_tls(cert: Path, key: Path, client_ca: Path | None = None) -> ServerTls:
    """Read and check the files (ValueError naming the bad one). The stdlib's TLS context
    checks what gRPC would only find at the first handshake: a key of another certificate."""
    tls = ServerTls(_read(cert, "TLS certificate"), _read(key, "TLS key"))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as err:
        reason = "the key does not match the certificate" if "MISMATCH" in str(err) else f"not usable ({err})"
        raise ValueError(f"TLS certificate {cert} and key {key}: {reason}") from None
    if client_ca is None:
        return tls
    ca = _read(client_ca, "TLS client CA")
    try:
        ctx.load_verify_locations(cadata=ca.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as err:
        raise ValueError(f"TLS client CA {client_ca}: no usable certificate in it ({err})") from None
    return ServerTls(tls.cert, tls.key, ca)


def peer_identity(context: grpc.ServicerContext | aio.ServicerContext[Any, Any]) -> str | None:
    """The verified client certificate's subject CN, else its first SAN; None on a
    connection without a client certificate (plaintext, unix socket, server-only TLS)."""
    auth = context.auth_context()
    for prop in ("x509_common_name", "x509_subject_alternative_name"):
        values = auth.get(prop) or []
        if values:
            return bytes(values[0]).decode("utf-8", "replace")
    return None


def stream_client(context: grpc.ServicerContext | aio.ServicerContext[Any, Any]) -> str:
    """Who a stream opened before naming its session (a burst, a streamed execution) belongs
    to for the caps on long-lived calls: with mTLS the verified identity — the same key as its
    sessions' (``session.client_key_of``), so no number of connections multiplies its share —
    else its connection."""
    identity = peer_identity(context)
    return client_key_of(identity) if identity is not None else context.peer() or ""


class IdentityInterceptor(aio.ServerInterceptor):
    """Installed only with mTLS: wraps openSession so that the session it opens belongs to
    the certificate's identity. Every other RPC passes through untouched (one string compare)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler_call_details.method != OPEN_SESSION or handler.unary_stream is None:
            return handler
        inner = handler.unary_stream  # an async generator function: the session stream

        async def open_session(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            identity = peer_identity(context)
            if identity is not None:
                if request.client_name and request.client_name != identity:
                    log.info(
                        "client %r declared the name %r; its certificate's name is used", identity, request.client_name
                    )
                request.client_name = identity
            events = inner(request, context)
            try:
                # The session opens while the first event is made (in this call's task, whose
                # context the identity is set in); it is visible only then.
                token = VERIFIED_CLIENT.set(identity)
                try:
                    first = await anext(events, None)
                finally:
                    VERIFIED_CLIENT.reset(token)
                if first is None:
                    return
                yield first
                async for event in events:
                    yield event
            finally:
                await events.aclose()

        return grpc.unary_stream_rpc_method_handler(
            open_session,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

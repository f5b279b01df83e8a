"""Binding the server's listeners: TCP with or without TLS, unix sockets.

TLS (``tls``, ``nnhal.server.rpc.identity``): with a certificate and key every TCP
listener serves TLS, loopback included (one rule, and a client configured for TLS
works on any of them); unix sockets stay plaintext, guarded by the socket file's
permissions. Serving plaintext on a TCP address that is not loopback logs a warning.
A unix socket file left by a killed server is replaced; one that another process
listens on is refused (OSError).
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import grpc
from grpc import aio

log = logging.getLogger(__name__)


def is_loopback_host(host: str) -> bool:
    """True for a listen host only this machine can reach."""
    host = host.strip("[]").lower()
    return host == "localhost" or host.startswith("127.") or host == "::1"


def bind(server: aio.Server, addr: str, credentials: grpc.ServerCredentials | None) -> str:
    """Bind ``addr`` (host:port or unix:PATH): TLS on TCP when ``credentials`` are given,
    plaintext otherwise (a warning when the host is not loopback); the bound address."""
    if addr.startswith("unix:"):
        return bind_plaintext(server, addr)
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"listen address {addr!r} must be host:port or unix:PATH")
    if credentials is None:
        if not is_loopback_host(host):
            log.warning(
                "serving PLAINTEXT on %s, reachable from other hosts: anyone who reaches it can use the "
                "device; give --tls-cert and --tls-key (and --tls-client-ca to require client certificates)",
                addr,
            )
        return bind_plaintext(server, addr)
    bound = server.add_secure_port(addr, credentials)
    if bound == 0:
        raise OSError(f"could not listen on {addr}")
    return f"{host}:{bound}"


def bind_plaintext(server: aio.Server, addr: str) -> str:
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

"""Connecting a client command (info, run, conformance --target) to a server.

``connect`` waits at most ``timeout`` seconds; when nothing answers it raises UsageError
"no nnhal server answered at ADDR within T s" and nothing else is said: a server that
never answered did not "die". (The client's death monitor logs a death when the session
attempt is given up; that record is dropped while connecting — see ``_NeverConnected``.)

TLS (``tls_of``): every client command takes ``--tls-ca``, ``--tls-cert``, ``--tls-key``
and ``--tls-server-name``; each flag given replaces the matching ``NNHAL_TLS_*`` variable,
which otherwise apply as for ``Device.connect``. A server the command starts itself
(``--start``) is plaintext on loopback, so its connection is too.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Literal

from nnhal.cli.usage import UsageError
from nnhal.core.errors import DeadObject, GeneralFailure, InvalidArgument

if TYPE_CHECKING:  # the client (grpc, numpy) loads only when a command connects
    from nnhal.client.device import Device, TlsConfig

DEFAULT_TIMEOUT = 3.0
_DEATH_LOGGER = "nnhal.client.death"


class _NeverConnected(logging.Filter):
    """Drops the death monitor's records while the first connection is being made."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """The client TLS flags of every client command."""
    for flag, env, what in (
        ("--tls-ca", "NNHAL_TLS_CA", "PEM CA that verifies the server's certificate"),
        ("--tls-cert", "NNHAL_TLS_CERT", "PEM client certificate, for a server requiring one (mTLS)"),
        ("--tls-key", "NNHAL_TLS_KEY", "PEM key of --tls-cert"),
        ("--tls-server-name", "NNHAL_TLS_SERVER_NAME", "name to verify the server's certificate against"),
    ):
        parser.add_argument(flag, metavar="FILE" if flag != "--tls-server-name" else "NAME", help=f"{what} (env {env})")


def tls_of(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> TlsConfig | Literal[False] | None:
    """The TLS of a client command: False for a server it starts, None when no flag is given
    (``Device.connect`` then reads the environment), else the flags over the environment."""
    if getattr(args, "start", False):
        return False
    flags = [getattr(args, key, None) for key in ("tls_ca", "tls_cert", "tls_key", "tls_server_name")]
    if all(flag is None for flag in flags):
        return None
    from nnhal.client.remote.transport import TlsConfig

    env = TlsConfig.from_env(environ) or TlsConfig()
    ca, cert, key, name = flags
    return TlsConfig(ca or env.ca, cert or env.cert, key or env.key, name or env.server_name)


@contextlib.contextmanager
def connect(
    address: str,
    client_name: str,
    timeout: float = DEFAULT_TIMEOUT,
    tls: TlsConfig | Literal[False] | None = None,
    device: str | None = None,
    keepalive_ms: int | None = None,
) -> Iterator[Device]:
    """A Device connected to ``address`` (its device ``device``; None: the default one),
    closed on exit; UsageError if no server answers or it hosts no such device.
    ``keepalive_ms``: the keepalive interval and ping timeout (None: the client's default)."""
    from nnhal.client.device import Device, TlsConfig

    logger = logging.getLogger(_DEATH_LOGGER)
    quiet = _NeverConnected()
    logger.addFilter(quiet)
    try:
        dev = Device.connect(
            address, client_name=client_name, timeout=timeout, keepalive_ms=keepalive_ms, tls=tls, device=device
        )
    except (InvalidArgument, GeneralFailure) as err:
        if device is None:
            raise
        raise UsageError(f"--device {device}: {err.message}; `nnhal info {address}` lists the devices") from None
    except DeadObject:
        uses_tls = tls if tls is not None else TlsConfig.from_env()
        hint = (
            "; with TLS a failed handshake looks the same: check --tls-ca/--tls-cert/--tls-key and that the "
            "server serves TLS"
            if uses_tls and not address.startswith("unix:")
            else ""
        )
        raise UsageError(
            f"no nnhal server answered at {address} within {timeout:g} s; start one (nnhal serve --listen "
            f"{address}) or give --timeout more seconds{hint}"
        ) from None
    finally:
        logger.removeFilter(quiet)
    with dev:
        yield dev

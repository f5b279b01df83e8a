"""Exit 0 when the nnhal server reports SERVING through grpc.health.v1 (the Docker HEALTHCHECK).

``python -m nnhal.tools.healthcheck [ADDR]`` asks ADDR's health service about
``nnhal.v1.Device``. Without ADDR the address is ``$NNHAL_HEALTH_ADDRESS``, else the
server's plaintext health-only listener ``$NNHAL_HEALTH_LISTEN`` (the ``nnhal serve``
setting, its wildcard host dialled as 127.0.0.1; probed in plaintext, whatever TLS the
main listener speaks), else ``127.0.0.1:$NNHAL_PORT``, else ``127.0.0.1:50051``, so the
image's HEALTHCHECK follows the port its CMD serves on (both read ``NNHAL_PORT``).

TLS: when ``NNHAL_TLS_CA`` / ``NNHAL_TLS_CERT`` / ``NNHAL_TLS_KEY`` are set (the client
variables, see ``nnhal.client.remote.transport.TlsConfig``; ``NNHAL_TLS_SERVER_NAME``
names the certificate's host when the probe dials 127.0.0.1) the probe speaks TLS, with
the client certificate if the server requires one; unix sockets stay plaintext.

Exit status follows Docker's HEALTHCHECK contract: 0 healthy, 1 unhealthy. A bad
address or port is also 1, with one line on stderr, because Docker reserves 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nnhal.client.remote.transport import TlsConfig, open_channel
from nnhal.core.errors import HalError

SERVICE = "nnhal.v1.Device"
DEFAULT_PORT = 50051
TIMEOUT_S = 3.0


class AddressError(ValueError):
    """The address to probe cannot be formed (a bad NNHAL_PORT, or too many arguments)."""


def resolve_address(args: list[str], env: Mapping[str, str]) -> str:
    """The address to probe (module docstring)."""
    return resolve_target(args, env)[0]


def resolve_target(args: list[str], env: Mapping[str, str]) -> tuple[str, bool]:
    """The address to probe and whether it is the plaintext health-only listener: the argument,
    NNHAL_HEALTH_ADDRESS, NNHAL_HEALTH_LISTEN, 127.0.0.1:NNHAL_PORT or the default."""
    if len(args) > 1:
        raise AddressError(f"expected at most one address, got {len(args)} arguments")
    if args:
        return args[0], False
    address = env.get("NNHAL_HEALTH_ADDRESS", "").strip()
    if address:
        return address, False
    listen = env.get("NNHAL_HEALTH_LISTEN", "").strip()
    if listen:
        host, sep, port = listen.rpartition(":")
        wildcard = sep and host.strip("[]") in ("0.0.0.0", "::", "")
        return (f"127.0.0.1:{port}" if wildcard and not listen.startswith("unix:") else listen), True
    return _port_address(env), False


def _port_address(env: Mapping[str, str]) -> str:
    port = env.get("NNHAL_PORT", "").strip() or str(DEFAULT_PORT)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise AddressError(f"NNHAL_PORT must be a port number from 1 to 65535, got {port!r}")
    return f"127.0.0.1:{int(port)}"


def main(argv: list[str] | None = None) -> int:
    try:
        address, health_only = resolve_target(sys.argv[1:] if argv is None else argv, os.environ)
    except AddressError as err:
        print(f"nnhal-healthcheck: error: {err}", file=sys.stderr)
        return 1
    try:
        channel = open_channel(address, [], None if health_only else TlsConfig.from_env(os.environ))
    except HalError as err:  # a TLS file that cannot be read
        print(f"nnhal-healthcheck: error: {err.message}", file=sys.stderr)
        return 1
    try:
        with channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=SERVICE), timeout=TIMEOUT_S
            )
    except grpc.RpcError as err:
        print(f"unhealthy: {address}: {err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    print("serving" if serving else f"not serving ({health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)})")
    return 0 if serving else 1


if __name__ == "__main__":
    sys.exit(main())

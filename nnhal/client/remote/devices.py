"""The devices of a server (``DeviceManager.listDevices``) and calls addressed to one of them.

A server may host several devices; every call of a session carries the device's name
in the ``nnhal-device`` metadata (:class:`DeviceMetadata`, a channel interceptor), and
the server routes it to that device. Without a name, calls reach the server's default
(first) device, as they always did.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from nnhal.client.remote.transport import TlsConfig, channel_options, map_rpc_error, open_channel
from nnhal.core import wire_device
from nnhal.core.enums import DeviceStatus, DeviceType
from nnhal.core.protocol import DEVICE_METADATA
from nnhal.core.types import Capabilities
from nnhal.proto import devices_pb2 as dpb, devices_pb2_grpc as dgrpc


@dataclass(frozen=True)
class DeviceInfo:
    """One device of a server, as ``listDevices`` reports it."""

    name: str
    kind: str
    type: DeviceType
    feature_level: int
    version_string: str
    capabilities: Capabilities
    status: DeviceStatus


class _Details(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, details: grpc.ClientCallDetails, metadata: list[tuple[str, str]]) -> None:
        self.method = details.method
        self.timeout = details.timeout
        self.metadata = metadata
        self.credentials = details.credentials
        self.wait_for_ready = details.wait_for_ready
        self.compression = getattr(details, "compression", None)


class DeviceMetadata(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds ``nnhal-device: <name>`` to every call of a channel."""

    def __init__(self, name: str) -> None:
        self._entry = (DEVICE_METADATA, name)

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _Details(details, [*(details.metadata or ()), self._entry])

    def _call(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)

    intercept_unary_unary = _call
    intercept_unary_stream = _call
    intercept_stream_unary = _call
    intercept_stream_stream = _call


def for_device(channel: grpc.Channel, name: str | None) -> grpc.Channel:
    """``channel``, its calls addressed to device ``name`` (None: the default device)."""
    return channel if not name else grpc.intercept_channel(channel, DeviceMetadata(name))


def list_devices(address: str, *, tls: TlsConfig | None = None, timeout: float = 10.0) -> list[DeviceInfo]:
    """Every device of the server at ``address``, the default first. DeadObject when no
    server answers within ``timeout`` seconds."""
    channel = open_channel(address, channel_options(), tls)
    try:
        stub = dgrpc.DeviceManagerStub(channel)
        try:
            reply = stub.listDevices(dpb.ListDevicesRequest(), timeout=timeout, wait_for_ready=True)
        except grpc.RpcError as err:
            raise map_rpc_error(err, had_deadline=False, what="listDevices") from err
    finally:
        channel.close()
    return [
        DeviceInfo(
            e.name,
            e.kind,
            DeviceType(e.type),
            int(e.feature_level),
            e.version_string,
            wire_device.capabilities_from(e.capabilities),
            DeviceStatus(e.status),
        )
        for e in reply.devices
    ]

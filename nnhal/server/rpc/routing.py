"""Several devices behind one server: the device list and the routing of every call.

Each device is a Driver, whose calls its ``Executions`` owns, with its own servicers. One
generic handler routes each call to the servicers of the device its ``nnhal-device``
metadata names (absent: the first device), so a session is opened on one device and every
later call of that session reaches the same Driver: objects belong to the device and
session that made them, and another device's handle is INVALID_ARGUMENT like any unknown
handle. A name no device has is refused alike on every server, one device or several:
``openSession`` answers INVALID_ARGUMENT in its first event naming the devices there are (a
protocol 1 client: the gRPC status NOT_FOUND), every other call ends with NOT_FOUND.

``DeviceManager.listDevices`` (``devices.proto``) lists every device: name, kind,
type, feature level, version string, capabilities and status, the default first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import grpc
from grpc import aio

from nnhal.core import wire_device, wire_session
from nnhal.core.enums import ErrorStatus
from nnhal.core.protocol import DEVICE_METADATA
from nnhal.proto import (
    devices_pb2 as dpb,
    devices_pb2_grpc as dgrpc,
    fastpath_pb2_grpc as fpgrpc,
    service_pb2 as spb,
    service_pb2_grpc as sgrpc,
)
from nnhal.server.driver import Driver
from nnhal.server.executions import Executions
from nnhal.server.rpc import direct, streamed_servicer
from nnhal.server.rpc.buffer_servicer import BufferServicer
from nnhal.server.rpc.device_servicer import DeviceServicer
from nnhal.server.rpc.fastpath_servicer import FastPathServicer
from nnhal.server.rpc.forms import add_method_forms
from nnhal.server.rpc.handler_shape import like
from nnhal.server.rpc.inbound import Inbound
from nnhal.server.rpc.prepared_model_servicer import FencedExecutionCallbackServicer, PreparedModelServicer
from nnhal.server.rpc.request_id import routed, with_request_id
from nnhal.server.rpc.streamed_servicer import StreamedExecutionServicer
from nnhal.server.rpc.sync_handlers import Collector, Table

_OPEN_SESSION = f"/{spb.DESCRIPTOR.services_by_name['Device'].full_name}/openSession"


def _add_servicers(server: Any, executions: Executions, fast_path: bool, devices: Sequence[str]) -> None:
    """Every servicer of one device, each an adapter of its ``executions``."""
    sgrpc.add_DeviceServicer_to_server(DeviceServicer(executions, devices, fast_path), server)
    sgrpc.add_PreparedModelServicer_to_server(PreparedModelServicer(executions), server)
    fpgrpc.add_FastPathServicer_to_server(FastPathServicer(executions, fast_path), server)
    streamed_servicer.add_to_server(StreamedExecutionServicer(executions), server)
    sgrpc.add_FencedExecutionCallbackServicer_to_server(FencedExecutionCallbackServicer(executions), server)
    sgrpc.add_BufferServicer_to_server(BufferServicer(executions), server)
    add_method_forms(server, executions)  # the HIDL 1.0-1.2 and AIDL method forms


def _refusal(handler: grpc.RpcMethodHandler, message: str, method: str) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s shape that refuses the call: NOT_FOUND, or for a protocol 2
    ``openSession`` an in-band INVALID_ARGUMENT in its one event."""

    async def abort(_request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.NOT_FOUND, message)

    async def refuse_session(
        request: spb.OpenSessionRequest, context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[spb.SessionEvent]:
        if wire_session.version_of(request.protocol_version) < wire_session.DEFAULTS_VERSION:
            await context.abort(grpc.StatusCode.NOT_FOUND, message)
        yield spb.SessionEvent(
            status=ErrorStatus.INVALID_ARGUMENT,  # type: ignore[arg-type]
            message=message,
            min_protocol_version=wire_session.MIN_PROTOCOL_VERSION,
            max_protocol_version=wire_session.PROTOCOL_VERSION,
        )

    return with_request_id(like(handler, refuse_session if method == _OPEN_SESSION else abort))


class DeviceRouter(grpc.GenericRpcHandler):
    """Routes a call to the handlers of the device its metadata names."""

    def __init__(self, tables: dict[str, Table], default: str) -> None:
        self._tables = tables
        self._default = default

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        name = self._default
        metadata = handler_call_details.invocation_metadata or ()
        for key, value in metadata:
            if key == DEVICE_METADATA:
                name = value if isinstance(value, str) else value.decode(errors="replace")
        routed(metadata)  # read once: for the call's request id (``request_id.begin``)
        method = handler_call_details.method
        table = self._tables.get(name)
        if table is not None:
            return table.get(method)
        handler = self._tables[self._default].get(method)
        if handler is None:
            return None
        devices = ", ".join(self._tables)
        return _refusal(handler, f"this server has no device named {name!r}; its devices: {devices}", method)


class DeviceManagerServicer(dgrpc.DeviceManagerServicer):
    def __init__(self, drivers: Mapping[str, Driver]) -> None:
        self._drivers = drivers

    def listDevices(self, request: dpb.ListDevicesRequest, context: grpc.ServicerContext) -> dpb.ListDevicesResponse:
        reply = dpb.ListDevicesResponse()
        for name, driver in self._drivers.items():
            entry = reply.devices.add(
                name=name,
                kind=driver.backend.kind,
                type=int(driver.config.device_type),
                feature_level=int(driver.config.feature_level),
                version_string=driver.config.version_string,
                status=int(driver.status()),
            )
            wire_device.capabilities_to(driver.capabilities, entry.capabilities)
        return reply


def add_device_services(
    server: aio.Server, devices: Mapping[str, Executions], fast_path: bool = True, inbound: Inbound | None = None
) -> None:
    """The HAL services of ``devices`` (each device's owner of its calls; the first is the
    default device) and DeviceManager, every handler made async (``sync_handlers.asyncify``);
    with ``inbound``, unary requests but ``openSession``'s are read once admitted by it
    (``gated_handlers.gated``: ``openSession`` keeps its unary request, which the refusal of an
    unknown device reads), ``executeSynchronously_1_3``'s by its direct handler (``direct``);
    the burst stream is served by its direct handler in any case."""
    collectors: dict[str, Collector] = {}
    for name, executions in devices.items():
        # The hot methods served by one coroutine each (``direct``) instead of the layers.
        own = {direct.BURST_STREAM: direct.burst(executions)}
        if inbound is not None:
            own[direct.EXECUTE_SYNC] = direct.execute_sync(executions, inbound)
        collectors[name] = Collector(inbound, (_OPEN_SESSION,), own)
        _add_servicers(collectors[name], executions, fast_path, tuple(devices))
    drivers = {name: executions.driver for name, executions in devices.items()}
    # A router also with one device: a name it does not have is refused as on any server.
    tables = {name: c.table for name, c in collectors.items()}
    server.add_generic_rpc_handlers((DeviceRouter(tables, next(iter(drivers))),))
    manager = Collector()
    dgrpc.add_DeviceManagerServicer_to_server(DeviceManagerServicer(drivers), manager)
    server.add_generic_rpc_handlers((manager,))

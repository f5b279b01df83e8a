"""The Buffer service (IBuffer of memory domains) and the Echo benchmark anchor."""

from __future__ import annotations

import grpc

from nnhal.core import wire_pool
from nnhal.proto import service_pb2 as spb, service_pb2_grpc as sgrpc
from nnhal.server.executions import Executions
from nnhal.server.rpc.common import hal_method


class BufferServicer(sgrpc.BufferServicer):
    def __init__(self, executions: Executions) -> None:
        self.executions = executions
        self.driver = executions.driver

    @hal_method(make=spb.CopyToResponse)
    def copyTo(self, request: spb.CopyToRequest, context: grpc.ServicerContext) -> spb.CopyToResponse:
        session = self.driver.session(request.session)
        data = self.driver.buffer_copy_to(session, request.buffer, wire_pool.pool_from(request.dst, "dst"))
        return spb.CopyToResponse(data=data)

    @hal_method(make=spb.StatusMessage)
    def copyFrom(self, request: spb.CopyFromRequest, context: grpc.ServicerContext) -> spb.StatusMessage:
        session = self.driver.session(request.session)
        self.driver.buffer_copy_from(
            session, request.buffer, wire_pool.pool_from(request.src, "src"), tuple(request.dimensions)
        )
        return spb.StatusMessage()

    @hal_method(make=spb.StatusMessage)
    def release(self, request: spb.ReleaseRequest, context: grpc.ServicerContext) -> spb.StatusMessage:
        self.driver.release_buffer(self.driver.session(request.session), request.handle)
        return spb.StatusMessage()


class EchoServicer(sgrpc.EchoServicer):
    """The benchmark anchor: returns the bytes it received."""

    def echo(self, request: spb.EchoMessage, context: grpc.ServicerContext) -> spb.EchoMessage:
        return spb.EchoMessage(data=request.data)

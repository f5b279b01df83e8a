"""Server reflection under both names clients use: ``grpc.reflection.v1alpha`` and ``grpc.reflection.v1``.

grpcio-reflection ships only the v1alpha service; v1 (what newer grpcurl, Postman and
the grpc-js tools ask for first) has the very same messages under another package. So one
v1alpha servicer serves both: the v1 method reads and writes the v1alpha messages (the
bytes on the wire are the same), and a copy of the v1alpha file descriptor renamed to
``grpc.reflection.v1`` is added to the default descriptor pool, so reflection can describe
its own v1 service too. ``SERVICE_NAMES`` lists both.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

_ALPHA = "grpc.reflection.v1alpha"
_V1 = "grpc.reflection.v1"
V1_SERVICE_NAME = f"{_V1}.ServerReflection"
SERVICE_NAMES = (reflection.SERVICE_NAME, V1_SERVICE_NAME)


def _register_v1_descriptor() -> None:
    """Add the v1 file to the default pool (once; a no-op when something registered it already)."""
    pool = descriptor_pool.Default()
    try:
        pool.FindServiceByName(V1_SERVICE_NAME)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = "grpc/reflection/v1/reflection.proto"
    proto.package = _V1
    for message in proto.message_type:
        for f in message.field:
            if f.HasField("type_name"):  # set only on message and enum fields
                f.type_name = f.type_name.replace(f".{_ALPHA}.", f".{_V1}.")
    for service in proto.service:
        for m in service.method:
            m.input_type = m.input_type.replace(f".{_ALPHA}.", f".{_V1}.")
            m.output_type = m.output_type.replace(f".{_ALPHA}.", f".{_V1}.")
    pool.Add(proto)


def add_reflection(server: Any, service_names: tuple[str, ...]) -> None:
    """Serve reflection (v1alpha and v1) of ``service_names`` and of itself on ``server`` (a
    server, or what stands in for one: ``sync_handlers.Collector``)."""
    _register_v1_descriptor()
    servicer = reflection.aio.ReflectionServicer((*service_names, *SERVICE_NAMES))
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    for name in SERVICE_NAMES:
        server.add_registered_method_handlers(name, {"ServerReflectionInfo": handler})

"""A gRPC method handler with another handler's shape: the same request and response
streaming and (de)serializers, another behaviour. The server wraps and replaces handlers
(request ids, refusals of unknown devices) without caring which of the four kinds they are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

_MAKERS: dict[tuple[bool, bool], Callable[..., grpc.RpcMethodHandler]] = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def behaviour(handler: grpc.RpcMethodHandler) -> Callable[..., Any]:
    """The function serving ``handler``'s calls, whichever of the four kinds it is."""
    fn: Callable[..., Any] | None = (
        handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    )
    assert fn is not None, "a method handler serves calls with one of its four functions"
    return fn


def like(handler: grpc.RpcMethodHandler, fn: Callable[..., Any]) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s shape and (de)serializers whose calls ``fn`` serves."""
    return _MAKERS[(handler.request_streaming, handler.response_streaming)](
        fn, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
    )

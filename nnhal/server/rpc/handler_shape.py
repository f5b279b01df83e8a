"""A gRPC method handler with another handler's shape: the same request and response
streaming and (de)serializers, another behaviour. The server wraps and replaces handlers
(request ids, refusals of unknown devices) without caring which of the four kinds they are."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Generator
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


class Answering:
    """A coroutine function answering one message (a unary-response handler's behaviour) that
    grpc.aio knows is async at its first test. grpc.aio asks of every call's behaviour whether it
    is async (``inspect.isawaitable``, then ``iscoroutinefunction``; twice per call for a request
    stream) before running it on the loop or on a worker thread: a plain coroutine function fails
    the first test and passes the second, at ~90 bytecodes per test; this object passes the first,
    at ~35. Calling it is calling the function; it is not awaited itself (TypeError)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Any, Any], Awaitable[Any]]) -> None:
        self.fn = fn

    def __call__(self, request: Any, context: Any) -> Awaitable[Any]:
        return self.fn(request, context)

    def __await__(self) -> Generator[Any, None, Any]:
        raise TypeError("a method handler is called, not awaited")


def answering(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` (async) with its behaviour an :class:`Answering` when it answers one message
    (the same shape and (de)serializers); a handler of a response stream as it is (grpc.aio tells
    its kinds apart by ``inspect.iscoroutinefunction``, which an object fails)."""
    if handler.response_streaming:
        return handler
    fn = behaviour(handler)
    if isinstance(fn, Answering):
        return handler
    assert inspect.iscoroutinefunction(fn), f"{fn!r}: an async handler answers through a coroutine"
    return like(handler, Answering(fn))

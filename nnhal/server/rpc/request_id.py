"""Request ids: one per RPC, on the server's log lines for the call and sent back to the client.

:func:`with_request_id` wraps a handler so that every call it serves gets an id (the
server wraps each handler once, when ``sync_handlers.Collector`` registers it): the client's ``x-request-id``
metadata when present and sane (1-128 characters of letters, digits and ``._:/+=-``,
starting with a letter or digit), else a generated one. The id is sent back in the
call's trailing metadata (also when the call is aborted) and published in
:data:`REQUEST_ID` in the call's asyncio task, whose context variables a sync handler
runs in a copy of on whichever worker thread (``sync_handlers``), so
:class:`RequestIdFilter` adds it as the ``request_id`` field to every log record of the
call (``--log-format json`` writes it).

Cost per call: one metadata scan and one context-variable set (in the call's own task:
nothing to clear). Not an aio interceptor: grpc.aio runs interceptors as a chain of
coroutines at every call, before the handler lookup; wrapping the handlers once, when they
are registered, costs nothing per call beyond the id itself. (:class:`RequestIdInterceptor`
gives the same to handlers served some other way; with both, the first to run sets the id.)
"""

from __future__ import annotations

import inspect
import itertools
import logging
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import grpc
from grpc import aio

KEY = "x-request-id"
#: The id of the call whose handler runs in this context (its task, or a worker's copy), if any.
REQUEST_ID: ContextVar[str | None] = ContextVar("nnhal_request_id", default=None)
_SANE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/+=-]{0,127}")
_PREFIX = "s" + secrets.token_hex(4)
_COUNTER = itertools.count(1)


def request_id(context: aio.ServicerContext[Any, Any]) -> str:
    """The call's id: the client's when sane, else a fresh one."""
    for key, value in context.invocation_metadata():
        if key == KEY:
            if isinstance(value, str) and _SANE.fullmatch(value):
                return value
            break
    return f"{_PREFIX}-{next(_COUNTER):x}"


def _begin(context: aio.ServicerContext[Any, Any]) -> None:
    if REQUEST_ID.get() is not None:
        return  # wrapped twice (an interceptor and the registration): the outer one set it
    rid = request_id(context)
    REQUEST_ID.set(rid)
    context.set_trailing_metadata(((KEY, rid),))


def _coroutine(inner: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def call(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        _begin(context)
        return await inner(request, context)

    return call


def _async_generator(inner: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    async def call(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        _begin(context)
        events = inner(request, context)
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()  # type: ignore[attr-defined]  # an async generator (asyncify)

    return call


def with_request_id(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` (an async one: ``sync_handlers.asyncify``) giving each call its request id
    (module docstring)."""
    kw: dict[str, Any] = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    fn = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    # A stream is answered by an async generator, or by a coroutine writing to the context.
    wrapped = _async_generator(fn) if inspect.isasyncgenfunction(fn) else _coroutine(fn)
    return make(wrapped, **kw)


class RequestIdInterceptor(aio.ServerInterceptor):
    """Gives every call its request id (module docstring). The handlers it sees are async
    (``sync_handlers.asyncify``): the id is set in the call's task, whose context variables
    a sync handler's worker thread gets a copy of. The cache only grows, one entry per
    method; it is used on the loop's thread only."""

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = with_request_id(handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped


class RequestIdFilter(logging.Filter):
    """Adds ``request_id`` to the records logged while a call's handler runs."""

    def filter(self, record: logging.LogRecord) -> bool:
        rid = REQUEST_ID.get()
        if rid is not None:
            record.request_id = rid
        return True


def install_log_filter(logger: logging.Logger | None = None) -> None:
    """Put a :class:`RequestIdFilter` on every handler of ``logger`` (the root logger by default)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RequestIdFilter) for f in handler.filters):
            handler.addFilter(RequestIdFilter())

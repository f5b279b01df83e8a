"""Request ids: one per RPC, on the server's log lines for the call and sent back to the client.

:class:`RequestIdInterceptor` gives every call an id: the client's ``x-request-id``
metadata when present and sane (1-128 characters of letters, digits and ``._:/+=-``,
starting with a letter or digit), else a generated one. The id is sent back in the
call's trailing metadata (also when the call is aborted) and published in
:data:`REQUEST_ID` while the call's handler runs (a streaming handler runs on one worker
thread from its first to its last message), so :class:`RequestIdFilter` adds it as the
``request_id`` field to every log record of the call (``--log-format json`` writes it).

Cost per call: one metadata scan, one context-variable set and clear; wrapped handlers
are made once per method and cached.
"""

from __future__ import annotations

import itertools
import logging
import re
import secrets
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import grpc

KEY = "x-request-id"
#: The id of the call whose handler runs on this thread, if any.
REQUEST_ID: ContextVar[str | None] = ContextVar("nnhal_request_id", default=None)
_SANE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/+=-]{0,127}")
_PREFIX = "s" + secrets.token_hex(4)
_COUNTER = itertools.count(1)


def request_id(context: grpc.ServicerContext) -> str:
    """The call's id: the client's when sane, else a fresh one."""
    for key, value in context.invocation_metadata():
        if key == KEY:
            if isinstance(value, str) and _SANE.fullmatch(value):
                return value
            break
    return f"{_PREFIX}-{next(_COUNTER):x}"


def _begin(context: grpc.ServicerContext) -> None:
    rid = request_id(context)
    REQUEST_ID.set(rid)
    context.set_trailing_metadata(((KEY, rid),))


def _unary_response(inner: Callable[[Any, grpc.ServicerContext], Any]) -> Callable[[Any, grpc.ServicerContext], Any]:
    def call(request: Any, context: grpc.ServicerContext) -> Any:
        _begin(context)
        try:
            return inner(request, context)
        finally:
            REQUEST_ID.set(None)

    return call


def _stream_response(
    inner: Callable[[Any, grpc.ServicerContext], Iterator[Any]],
) -> Callable[[Any, grpc.ServicerContext], Iterator[Any]]:
    def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        _begin(context)
        try:
            yield from inner(request, context)
        finally:
            REQUEST_ID.set(None)

    return call


def _wrap(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    kw: dict[str, Any] = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary is not None:
        return grpc.unary_unary_rpc_method_handler(_unary_response(handler.unary_unary), **kw)
    if handler.unary_stream is not None:
        return grpc.unary_stream_rpc_method_handler(_stream_response(handler.unary_stream), **kw)
    if handler.stream_unary is not None:
        return grpc.stream_unary_rpc_method_handler(_unary_response(handler.stream_unary), **kw)
    return grpc.stream_stream_rpc_method_handler(_stream_response(handler.stream_stream), **kw)


class RequestIdInterceptor(grpc.ServerInterceptor):
    """Gives every call its request id (module docstring). Thread-safe: the cache only
    grows, one entry per method, and a racing duplicate wrap is harmless."""

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        cached = self._wrapped.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = _wrap(handler)
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

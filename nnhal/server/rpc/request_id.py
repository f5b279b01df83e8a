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

The same wrapper publishes the call's fault scope (``faults.note_scope``), which a seeded
fault schedule decides by; a direct handler (``direct``), made for one device, only when that
device's plan is seeded (``FaultPlan.seeded``).

Cost per call: one read of the metadata, two scans of it (one without a seeded plan) and one or
two context-variable sets (in the call's own task: nothing to clear). Not an aio interceptor:
grpc.aio runs interceptors as a chain of coroutines at every call, before the handler lookup;
wrapping the handlers once, when they are registered, costs nothing per call beyond the id
itself.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextvars import ContextVar
from typing import Any

import grpc
from grpc import aio

from nnhal.core import telemetry
from nnhal.core.protocol import REQUEST_ID_METADATA as KEY
from nnhal.server.executions import faults
from nnhal.server.rpc.handler_shape import behaviour, like

#: The id of the call whose handler runs in this context (its task, or a worker's copy), if any.
REQUEST_ID: ContextVar[str | None] = ContextVar("nnhal_request_id", default=None)
_SANE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/+=-]{0,127}")
_PREFIX = "s" + secrets.token_hex(4)
_COUNTER = itertools.count(1)


#: The metadata of the call being routed (``routed``), for its ``begin``: grpc.aio builds a
#: call's metadata anew, as Python tuples, at every read (≈ 0.8 µs for two entries), and it
#: built it once already for the router. With the token that set it, which ties it to the
#: context — the task — it was set in.
#: (A list: the metadata, then the token, set once the list is.)
_ROUTED: ContextVar[list[Any] | None] = ContextVar("nnhal_routed", default=None)


def routed(metadata: Sequence[tuple[str, Any]]) -> None:
    """By the router of a call, as it routes it: the call's metadata (its handler's
    ``HandlerCallDetails``'), for the call's ``begin``. grpc.aio finds a call's handler in the
    task that then runs it; a value seen in another context (another call's task, should the
    router be asked elsewhere) is not taken (``_metadata``)."""
    holder: list[Any] = [metadata]
    holder.append(_ROUTED.set(holder))


def _metadata(context: aio.ServicerContext[Any, Any]) -> Sequence[tuple[str, Any]]:
    """The call's metadata: its router's (``routed``) when it was routed in this very context,
    taken back; else read from ``context``."""
    held = _ROUTED.get()
    if held is not None:
        try:
            _ROUTED.reset(held[1])  # ValueError: set in another context, not this call's
        except ValueError:
            pass
        else:
            routed_metadata: Sequence[tuple[str, Any]] = held[0]
            return routed_metadata
    metadata: Sequence[tuple[str, Any]] = context.invocation_metadata() or ()
    return metadata


def request_id(context: aio.ServicerContext[Any, Any]) -> str:
    """The call's id: the client's when sane, else a fresh one."""
    return _id_of(context.invocation_metadata() or ())


def _id_of(metadata: Collection[tuple[str, object]]) -> str:
    for key, value in metadata:
        if key == KEY:
            if isinstance(value, str) and _SANE.fullmatch(value):
                return value
            break
    return f"{_PREFIX}-{next(_COUNTER):x}"


def begin(context: aio.ServicerContext[Any, Any], scoped: bool = True) -> None:
    """Give the call served in the running task its id (module docstring): published, sent
    back in its trailing metadata, and — ``scoped``: a seeded fault schedule may read it — its
    fault scope noted."""
    # Read once (the router's when it routed the call): grpc.aio converts the call's metadata to
    # Python anew at every read.
    metadata = _metadata(context)
    rid = _id_of(metadata)
    REQUEST_ID.set(rid)
    telemetry.set_attribute("nnhal.request_id", rid)  # on the RPC's span, when tracing is on
    if scoped:
        faults.note_scope(metadata)
    context.set_trailing_metadata(((KEY, rid),))


def _coroutine(inner: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    async def call(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        begin(context)
        return await inner(request, context)

    return call


def _async_generator(inner: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    async def call(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        begin(context)
        events = inner(request, context)
        del request  # the handler holds what it needs of it
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()  # type: ignore[attr-defined]  # an async generator (asyncify)

    return call


def with_request_id(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` (an async one: ``sync_handlers.asyncify``) giving each call its request id
    (module docstring)."""
    fn = behaviour(handler)
    # A stream is answered by an async generator, or by a coroutine writing to the context.
    return like(handler, _async_generator(fn) if inspect.isasyncgenfunction(fn) else _coroutine(fn))


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

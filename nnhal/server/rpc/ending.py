"""Ending a call early with a status its client sees (issue #24: making room for a client
below its fair share ends the newest long-lived call of the client furthest above its own).

Cancelling the asyncio task that serves a grpc.aio call ends the handler but sends the
client nothing: its stream stays open. So a call is ended cooperatively: :class:`CallEnder`
marks the call ended and cancels its task (from any thread); the handler, wrapped by
:func:`endable`, catches that cancellation — only when it was the ender's — and aborts the
call with RESOURCE_EXHAUSTED naming why. The ender of the call being served is
:func:`current_ender` (a context variable set for the call). A handler suspended where
grpc.aio, not the handler, awaits (an answer being written) is cancelled there: that call ends
without a status.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from grpc import aio

from nnhal.server.rpc.handler_shape import behaviour, like

_CURRENT: contextvars.ContextVar[CallEnder | None] = contextvars.ContextVar("nnhal_call_ender", default=None)


class CallEnder:
    """Ends one call early (module docstring). ``end`` is thread-safe and idempotent. Made in
    the task serving the call (on the loop), it is that call's ender from then on
    (:func:`current_ender`, :func:`ended`)."""

    __slots__ = ("reason", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        #: The task serving the call.
        self.task = task
        #: Why the call was ended; None while it was not.
        self.reason: str | None = None
        _CURRENT.set(self)

    def end(self, reason: str = "the server ended this call to make room for another client") -> None:
        if self.reason is not None:
            return
        self.reason = reason
        try:
            self.task.get_loop().call_soon_threadsafe(self.task.cancel)
        except RuntimeError:  # the loop is closed: the server is stopping
            pass


def current_ender() -> Callable[[], None] | None:
    """How to end the call being served (its ``CallEnder.end``); None outside an endable call."""
    ender = _CURRENT.get()
    return ender.end if ender is not None else None


def call_ender() -> CallEnder | None:
    """The ender of the call the running task serves, made on first use (None off a task).
    The handler must then catch the cancellation (:func:`ended`, :func:`abort_ended`)."""
    task = asyncio.current_task()
    if task is None:
        return None
    ender = _CURRENT.get()
    if ender is None or ender.task is not task:
        ender = CallEnder(task)
    return ender


def ended() -> bool:
    """Whether the running call's cancellation is its ender's (else it is the transport's: re-raise)."""
    ender = _CURRENT.get()
    return ender is not None and ender.reason is not None and ender.task is asyncio.current_task()


async def abort_ended(context: aio.ServicerContext[Any, Any]) -> None:
    """Abort the call its ender ended (after :func:`ended`), with the ender's reason."""
    ender = _CURRENT.get()
    assert ender is not None
    await _aborted(context, ender)


async def _aborted(context: aio.ServicerContext[Any, Any], ender: CallEnder) -> None:
    task = asyncio.current_task()
    uncancel = getattr(task, "uncancel", None)  # Python 3.11+; before, a caught cancel is simply over
    if uncancel is not None:
        uncancel()
    await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, ender.reason or "ended by the server")


def endable(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` (async) with a :class:`CallEnder` for each call (``current_ender``); a call
    it ends is aborted RESOURCE_EXHAUSTED with its reason."""
    fn = behaviour(handler)
    if inspect.isasyncgenfunction(fn):
        gen: Callable[..., AsyncIterator[Any]] = fn

        async def stream(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            task = asyncio.current_task()
            ender = CallEnder(task) if task is not None else None
            if ender is None:
                _CURRENT.set(None)
            events = gen(request, context)
            del request
            try:
                async for event in events:
                    yield event
            except asyncio.CancelledError:
                if ender is None or ender.reason is None:
                    raise
                await _aborted(context, ender)
            finally:
                await events.aclose()  # type: ignore[attr-defined]

        return like(handler, stream)
    coro: Callable[..., Awaitable[Any]] = fn

    async def call(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        task = asyncio.current_task()
        ender = CallEnder(task) if task is not None else None
        if ender is None:
            _CURRENT.set(None)
        try:
            return await coro(request, context)
        except asyncio.CancelledError:
            if ender is None or ender.reason is None:
                raise
            await _aborted(context, ender)

    return like(handler, call)

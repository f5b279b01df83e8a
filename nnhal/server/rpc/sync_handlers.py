"""Sync handlers on the asyncio server: each runs on a worker thread only while it works.

The server is a ``grpc.aio`` server whose event loop runs on a thread of its own
(``nnhal.server.rpc.serve``). Handlers that wait for a long time holding no work (the
session stream, an idle burst stream) are coroutines on that loop; every other handler
stays a plain function or generator and is turned into an async one here
(:func:`asyncify`), running on the loop's default executor — the server's worker pool,
``--max-threads`` threads — so a blocking kernel never stalls the loop:

- a unary handler runs on a worker thread from request to response;
- a server-streaming generator runs on a worker thread only while it makes its next
  message: parked at a ``yield`` it holds no thread (a preparation or ``execute_1_3``
  between its launch status and its notify holds none), and it is closed (its
  ``finally`` run, on a worker thread) when the stream ends early;
- each runs in a copy of the call's context variables (taken on the loop, inside the
  interceptors), so the request id reaches its log lines on whatever thread it runs.

grpc.aio runs sync handlers itself, but its context for them cannot serve ours:
``abort`` does not raise, ``add_callback`` never calls back on a stream and there is
no ``is_active``. :class:`SyncContext` is the ``grpc.ServicerContext`` a sync handler
gets instead: ``abort`` raises (the call is then aborted on the loop), ``add_callback``
returns whether the call is still alive and calls back (on the loop thread) when it
ends, ``is_active`` turns false when it ends; metadata, peer, auth context and time
remaining are the call's.

Sync handlers taking a request stream are refused when registered: their request
iterator would hold a worker thread while the client sends nothing (such RPCs, the burst
stream and the streamed execution, are coroutines).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future
from typing import Any, NoReturn, TypeVar

import grpc
from grpc import aio

from nnhal.server.executions.faults import Abort
from nnhal.server.rpc.ending import endable
from nnhal.server.rpc.gated_handlers import gated
from nnhal.server.rpc.handler_shape import behaviour, like
from nnhal.server.rpc.inbound import Inbound
from nnhal.server.rpc.request_id import with_request_id

log = logging.getLogger(__name__)

T = TypeVar("T")
_END = object()

#: A table of method handlers by full method name (``/package.Service/method``).
Table = dict[str, grpc.RpcMethodHandler]


def is_async(fn: object) -> bool:
    """True for a coroutine or async generator function (bound methods included)."""
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a worker thread of the server's pool (:func:`use_pool`), in a copy
    of the caller's context variables (the request id goes along)."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(pool_of(loop), contextvars.copy_context().run, fn, *args)


class SyncContext(grpc.ServicerContext):
    """The ``grpc.ServicerContext`` of a sync handler on a worker thread (module docstring).
    Thread-safe; its lock is a leaf. Made on the loop, where :meth:`watch` ties it to the call."""

    def __init__(self, context: aio.ServicerContext[Any, Any], loop: asyncio.AbstractEventLoop) -> None:
        self._context = context
        self._loop = loop
        self._lock = threading.Lock()
        #: Callbacks for the call's end; None once it ended.
        self._callbacks: list[Callable[[], None]] | None = []

    def watch(self) -> SyncContext:
        """Call back on the call's end (on the loop). Returns self."""
        self._context.add_done_callback(self._ended)
        return self

    def _ended(self, _context: object = None) -> None:
        with self._lock:
            callbacks, self._callbacks = self._callbacks or [], None
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("a callback at the end of a call failed")

    # -- the call's life -------------------------------------------------------------
    def is_active(self) -> bool:
        return self._callbacks is not None

    def add_callback(self, callback: Callable[[], None]) -> bool:
        """Call ``callback`` (on the loop thread) when the call ends; False, and it is not
        called, when the call has ended already."""
        with self._lock:
            if self._callbacks is None:
                return False
            self._callbacks.append(callback)
            return True

    def cancel(self) -> None:
        """End the call with CANCELLED (as the sync server's ``cancel`` does)."""
        self.abort(grpc.StatusCode.CANCELLED, "cancelled by the server")

    def time_remaining(self) -> float | None:
        remaining: float | None = self._context.time_remaining()
        return remaining

    # -- status ---------------------------------------------------------------------
    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        """Raises :class:`~nnhal.server.executions.faults.Abort`; the call is aborted on the loop."""
        raise Abort(code.value[0], details)

    def abort_with_status(self, status: grpc.Status) -> NoReturn:
        raise Abort(status.code.value[0], status.details)

    def set_code(self, code: grpc.StatusCode) -> None:
        self._context.set_code(code)

    def set_details(self, details: str) -> None:
        self._context.set_details(details)

    # -- metadata and peer ----------------------------------------------------------
    def invocation_metadata(self) -> Sequence[tuple[str, str | bytes]]:
        return tuple(self._context.invocation_metadata() or ())

    def send_initial_metadata(self, initial_metadata: Sequence[tuple[str, str | bytes]]) -> None:
        asyncio.run_coroutine_threadsafe(
            self._context.send_initial_metadata(tuple(initial_metadata)), self._loop
        ).result()

    def set_trailing_metadata(self, trailing_metadata: Sequence[tuple[str, str | bytes]]) -> None:
        self._context.set_trailing_metadata(tuple(trailing_metadata))

    def peer(self) -> str:
        peer: str = self._context.peer()
        return peer

    def peer_identities(self) -> Iterable[bytes] | None:
        identities: Iterable[bytes] | None = self._context.peer_identities()
        return identities

    def peer_identity_key(self) -> str | None:
        key: str | None = self._context.peer_identity_key()
        return key

    def auth_context(self) -> Mapping[str, Iterable[bytes]]:
        auth: Mapping[str, Iterable[bytes]] = self._context.auth_context()
        return auth


_CODES = {code.value[0]: code for code in grpc.StatusCode}


async def abort(context: aio.ServicerContext[Any, Any], aborted: Abort) -> NoReturn:
    """End the call as ``aborted`` (raised on a worker thread, or by the owner) says."""
    await context.abort(_CODES[aborted.code], aborted.details)
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


async def run_sync(context: aio.ServicerContext[Any, Any], fn: Callable[[SyncContext], T]) -> T:
    """``fn(sync_context)`` on a worker thread (:func:`in_thread`), given the call's
    :class:`SyncContext`; an abort there aborts the call."""
    sync = SyncContext(context, asyncio.get_running_loop()).watch()
    try:
        return await in_thread(fn, sync)
    except Abort as aborted:
        await abort(context, aborted)


def _unary(fn: Callable[[Any, grpc.ServicerContext], Any]) -> Callable[..., Any]:
    async def unary(request: Any, context: aio.ServicerContext[Any, Any]) -> Any:
        return await run_sync(context, functools.partial(fn, request))

    unary.__name__ = getattr(fn, "__name__", "unary")
    return unary


def _stream(fn: Callable[[Any, grpc.ServicerContext], Iterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    async def stream(request: Any, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        loop = asyncio.get_running_loop()
        pool = pool_of(loop)
        sync = SyncContext(context, loop).watch()
        # One context for every step: what the generator sets stays set between its steps
        # (a Context is entered by one thread at a time: the steps never overlap).
        ctx = contextvars.copy_context()
        step: Future[Any] | None = None
        events: Iterator[Any] | None = None
        try:
            events = await loop.run_in_executor(pool, ctx.run, fn, request, sync)
            del request  # the handler holds what it needs of it
            while True:
                step = pool.submit(ctx.run, _next, events)
                event = await asyncio.wrap_future(step)
                step = None
                if event is _END:
                    return
                yield event
        except Abort as aborted:
            await abort(context, aborted)
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                _close_after(pool, lambda: ctx.run(close), step)

    stream.__name__ = getattr(fn, "__name__", "stream")
    return stream


def _next(events: Iterator[Any]) -> Any:
    return next(events, _END)


def _close_after(pool: Executor, close: Callable[[], object], step: Future[Any] | None) -> None:
    """Run ``close`` (a generator's ``close``: its ``finally``) on a worker thread once
    ``step`` — the generator's step a cancelled call may have left running — is done."""

    def submit(_step: object = None) -> None:
        try:
            pool.submit(close)
        except RuntimeError:  # the pool is shut down: the process is ending
            pass

    if step is None or step.done():
        submit()
    else:
        step.add_done_callback(submit)


def asyncify(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` with its behaviour as a coroutine or async generator (module docstring);
    an async handler is returned as it is. TypeError for a sync handler taking a request
    stream."""
    fn = behaviour(handler)
    if is_async(fn):
        return handler
    if handler.request_streaming:
        raise TypeError(f"{fn!r}: a sync handler of a request stream would hold a worker thread while idle")
    return like(handler, _unary(fn) if handler.unary_unary is not None else _stream(fn))


class Collector(grpc.GenericRpcHandler):
    """Stands in for a server to the generated ``add_*Servicer_to_server`` functions: collects
    their method handlers by full method name, made async (:func:`asyncify`) and giving each
    call its request id (``request_id.with_request_id``), and serves them as one generic handler
    (a dict lookup; add it with ``server.add_generic_rpc_handlers``).

    Not the server's registered methods: grpc.aio waits for a call on each registered method
    with a task of its own and, at every call, ``asyncio.wait``s on all of them, so the cost of
    every call would grow with the number of methods served."""

    def __init__(
        self,
        inbound: Inbound | None = None,
        ungated: Collection[str] = (),
        direct: Mapping[str, grpc.RpcMethodHandler] | None = None,
    ) -> None:
        self.table: Table = {}
        #: With an ``Inbound``, unary requests are read once admitted (``gated_handlers.gated``), but for
        #: the methods named in ``ungated``.
        self._inbound = inbound
        self._ungated = frozenset(ungated)
        #: Handlers served as they are by full method name, in place of the servicer's
        #: (``nnhal.server.rpc.direct``: they take the layers' steps themselves).
        self._direct = dict(direct or {})

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same handlers arrive through add_registered_method_handlers

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]) -> None:
        for method, handler in handlers.items():
            name = f"/{service}/{method}"
            own = self._direct.get(name)
            if own is not None:
                self.table[name] = own
                continue
            served = with_request_id(asyncify(handler))
            if handler.request_streaming:
                # Long-lived calls (bursts, streamed executions): ended early with a status when
                # room is made for a client below its fair share (``ending``).
                served = endable(served)
            elif self._inbound is not None and name not in self._ungated:
                served = gated(served, self._inbound, method)
            self.table[name] = served

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        return self.table.get(handler_call_details.method)


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Executor] = weakref.WeakKeyDictionary()


def use_pool(loop: asyncio.AbstractEventLoop, pool: Executor) -> None:
    """Make ``pool`` the worker pool of the handlers served on ``loop`` (and its default executor)."""
    loop.set_default_executor(pool)
    _POOLS[loop] = pool


def pool_of(loop: asyncio.AbstractEventLoop) -> Executor:
    """The worker pool of ``loop`` (:func:`use_pool`)."""
    try:
        return _POOLS[loop]
    except KeyError:
        raise RuntimeError("no worker pool for this event loop (sync_handlers.use_pool)") from None

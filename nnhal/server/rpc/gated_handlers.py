"""Unary-request handlers served as request streams whose one message is read through an
:class:`~nnhal.server.rpc.inbound.Inbound` (:func:`gated`).

grpc.aio reads a unary request message whole before it runs the handler; a handler of a
request stream reads when it likes, and the wire is the same for both (one message, then
the half-close), so every unary-request method is served as a request stream that reads its
one message once admitted. Its answer messages are bounded in time
(:mod:`nnhal.server.rpc.answer_writes`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from grpc import aio

from nnhal.server.rpc.ending import abort_ended, ended
from nnhal.server.rpc.handler_shape import behaviour
from nnhal.server.rpc.inbound import WINDOW_BYTES, Inbound

#: What a small answer is written under: no lock (only large answers wait for each other).
_UNLOCKED = contextlib.nullcontext()


def gated(handler: grpc.RpcMethodHandler, inbound: Inbound, what: str) -> grpc.RpcMethodHandler:
    """``handler`` (async, unary request) served as a request stream whose one message is read
    through ``inbound``; answer messages of a response stream are bounded in time (module
    docstring). Handlers of request streams are returned as they are."""
    if handler.request_streaming:
        return handler
    fn = behaviour(handler)
    parse: Callable[[bytes], Any] = handler.request_deserializer or (lambda raw: raw)

    if handler.response_streaming:

        async def stream(_requests: object, context: aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            request, call = await inbound.receive(context, parse, what)
            let_go = call.let_go
            events = fn(request, context)
            del request
            task = asyncio.current_task()
            loop = asyncio.get_running_loop()
            peer = context.peer() or ""
            w = inbound.writes.writer(peer)
            try:
                if not hasattr(events, "__aiter__"):  # a coroutine writing to the context
                    await events
                    return
                async for event in events:
                    large = event.ByteSize() > WINDOW_BYTES if hasattr(event, "ByteSize") else False
                    # A large answer waits for the connection's previous one to be written: a
                    # client that does not read leaves one answer in the transport, not many.
                    async with w.lock if large else _UNLOCKED:
                        if large and w.stalled:
                            await context.abort(
                                grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"this connection took no answer for {inbound.writes.write_timeout:g} s: its large "
                                "answers are refused until it reads",
                            )
                        # Every answer is written within the time bound, large or small.
                        timer = loop.call_later(
                            inbound.writes.write_timeout, inbound.writes.stalled_write, task, w, what
                        )
                        try:
                            yield event
                        finally:
                            timer.cancel()
                        w.stalled = False
                let_go()  # before the call's end reaches the client: it may call again at once
            except asyncio.CancelledError:
                if not ended():  # the transport's cancellation
                    raise
                await abort_ended(context)
            finally:
                inbound.writes.done_writing(peer, w)
                aclose = getattr(events, "aclose", None)
                if aclose is not None:
                    await aclose()

        return grpc.stream_stream_rpc_method_handler(
            stream, request_deserializer=None, response_serializer=handler.response_serializer
        )

    unary_fn: Callable[[Any, aio.ServicerContext[Any, Any]], Awaitable[Any]] = fn

    async def unary(_requests: object, context: aio.ServicerContext[Any, Any]) -> Any:
        try:
            request, call = await inbound.receive(context, parse, what)
            answer = await unary_fn(request, context)
            del request
            handing = inbound.answer(
                context, call.let_go, answer.ByteSize() if hasattr(answer, "ByteSize") else 0, what
            )
            if handing is not None:
                await handing
            return answer
        except asyncio.CancelledError:
            if not ended():  # the transport's cancellation
                raise
            await abort_ended(context)

    return grpc.stream_unary_rpc_method_handler(
        unary, request_deserializer=None, response_serializer=handler.response_serializer
    )

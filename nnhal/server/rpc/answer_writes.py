"""The bound on writing answers: an answer the client does not take within a bound ends its
call (issue #24).

An answer message (``gated_handlers.gated`` streams) that the transport has not written
within ``write_timeout`` — its client grants no flow-control window, i.e. does not read —
ends the call, so the call's request, result and place are freed on the Python side.
grpc.aio cannot reset the HTTP/2 stream: the transport keeps the message it was given until
the client reads, cancels or its deadline or connection ends. So a connection's large
answers (over ``inbound.WINDOW_BYTES``) are written one at a time, and after a stalled one they are
refused (RESOURCE_EXHAUSTED) until a write on the connection completes: a client that does
not read leaves at most one large answer per connection in the transport. A unary answer is
written by gRPC with its call's status once the handler returned: a large one first waits
(``hand_over``, at most ``write_timeout``) until the connection's previous one was taken.

State lives on the server's event loop and is touched only there (no lock).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc import aio

log = logging.getLogger(__name__)


@dataclass
class Writer:
    """One connection's large answers: written one at a time; ``stalled`` once one was not
    taken within the bound, until a write on the connection completes."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    stalled: bool = False
    users: int = 0


class AnswerWrites:
    """The large-answer state of every connection and the write bound (module docstring).
    Loop-only."""

    def __init__(self, write_timeout: float) -> None:
        self.write_timeout = write_timeout
        self._writers: dict[str, Writer] = {}
        #: Calls ended because their client did not read (a counter).
        self.stalled = 0

    def writer(self, peer: str) -> Writer:
        """The large-answer state of connection ``peer`` (dropped when no call uses it)."""
        w = self._writers.get(peer)
        if w is None:
            w = self._writers[peer] = Writer()
        w.users += 1
        return w

    def done_writing(self, peer: str, w: Writer) -> None:
        w.users -= 1
        if w.users <= 0 and self._writers.get(peer) is w:
            del self._writers[peer]

    async def hand_over(self, context: aio.ServicerContext[Any, Any], what: str) -> None:
        """Before a large unary answer is returned (gRPC then writes it with the call's status):
        wait until the connection's previous large answer was taken, at most ``write_timeout``;
        the call's end lets the next one go. Past that, and on a connection whose answer was not
        taken in time, the call is aborted (RESOURCE_EXHAUSTED), its answer dropped: a client
        that does not read leaves at most one large unary answer per connection in the
        transport."""
        peer = context.peer() or ""
        w = self.writer(peer)
        if not w.stalled:
            try:
                await _within(w.lock.acquire(), self.write_timeout)
            except asyncio.TimeoutError:
                w.stalled = True
                self.stalled += 1
                log.warning("%s: the client took no answer for %.0f s; refusing the next", what, self.write_timeout)
            except BaseException:  # the call was cancelled while it waited
                self.done_writing(peer, w)
                raise
            else:

                def end(ctx: aio.ServicerContext[Any, Any]) -> None:
                    w.lock.release()
                    if not ctx.cancelled():  # written: the connection reads again
                        w.stalled = False
                    self.done_writing(peer, w)

                context.add_done_callback(end)
                return
        self.done_writing(peer, w)
        await context.abort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"this connection took no answer for {self.write_timeout:g} s: its large answers are refused "
            "until it reads",
        )

    def stalled_write(self, task: asyncio.Task[Any] | None, w: Writer, what: str) -> None:
        """A message of ``task``'s call was not written within the bound: end the call, and
        refuse its connection's large answers until one of its writes completes."""
        self.stalled += 1
        w.stalled = True
        log.warning("%s: the client took no answer for %.0f s; ending the call", what, self.write_timeout)
        if task is not None:
            task.cancel()


async def _within(step: Awaitable[Any], seconds: float) -> Any:
    """``step`` awaited; TimeoutError when it does not complete within ``seconds``.

    On 3.11+ a timeout scope on the handler's own task: ``asyncio.wait_for`` wraps the step in
    a task of its own, which costs every call a task and several more turns of the loop."""
    if sys.version_info >= (3, 11):
        async with asyncio.timeout(seconds):
            return await step
    return await asyncio.wait_for(step, seconds)  # pragma: no cover - Python 3.10

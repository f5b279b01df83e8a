"""The bytes of calls in flight: a request is read only once admitted, and held against limits
until its call ends; an answer the client does not take within a bound ends its call (issue #24).

grpc.aio reads a unary request message whole before it runs the handler, so a server
handling unary requests holds every arriving message, however many clients send at once.
A handler of a request stream reads when it likes: before it reads, the HTTP/2 transport
holds at most the stream's flow-control window of the message (64 KiB; BDP probing is off,
``SERVER_OPTIONS``). The wire is the same for both (one message, then the half-close), so
every unary-request method is served as a request stream (:func:`gated`) that reads its one
message through an :class:`Inbound`:

- **reading**: a message's size is known only once read, so a read holds a place of
  ``READ_COPIES`` times ``receive_cap`` bytes (the largest message the server accepts, read
  as the transport's slices, the buffer gathering them and the ``bytes`` made of it, then
  parsed from those ``bytes``) among ``read_bytes`` until its message is parsed and the
  ``bytes`` dropped; more reads wait, first come first served. One read may always start, so
  a small message never waits for memory held elsewhere (``DeviceConfig.message_cap`` keeps
  one place within the reads' share of the total), and a read that does not finish within
  ``read_timeout`` ends its call (RESOURCE_EXHAUSTED): a sender that stalls holds its place
  that long at most. The transport's freed slices are counted as released memory (the
  budget's releaser trims the heap they stay on).
- **holding**: the message read is charged to its client (the verified mTLS identity, else
  the connection) until its call ends, at most ``per_client`` bytes per client, and, when
  larger than the flow-control window (``WINDOW_BYTES``), to the server's total, twice
  (``REQUEST_COPIES``; ``budget.charge_working``, leaving the fair-share reserve to the
  sessions' own charges).
  Past the total, a client below its fair share (the total less the reserve, divided among
  the clients holding any plus itself) makes room: the newest call of the client furthest
  above its share is ended (RESOURCE_EXHAUSTED to that client, ``ending``). Otherwise the call is refused
  RESOURCE_EXHAUSTED. The handler's own charges (request data, results waiting to be
  written) come on top, in the same budget.
- **writing**: an answer message (``gated`` streams) that the transport has not written
  within ``write_timeout`` — its client grants no flow-control window, i.e. does not read —
  ends the call, so the call's request, result and place are freed on the Python side.
  grpc.aio cannot reset the HTTP/2 stream: the transport keeps the message it was given until
  the client reads, cancels or its deadline or connection ends. So a connection's large
  answers (over ``WINDOW_BYTES``) are written one at a time, and after a stalled one they are
  refused (RESOURCE_EXHAUSTED) until a write on the connection completes: a client that does
  not read leaves at most one large answer per connection in the transport. A unary answer is
  written by gRPC with its call's status once the handler returned: a large one first waits
  (``hand_over``, at most ``write_timeout``) until the connection's previous one was taken.

State lives on the server's event loop and is touched only there (no lock).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import grpc
from grpc import aio

from nnhal.core.errors import HalError
from nnhal.server.budget import MemoryBudget
from nnhal.server.device_config import READ_COPIES
from nnhal.server.log_limits import undecodable
from nnhal.server.rpc.ending import CallEnder, abort_ended, call_ender, ended
from nnhal.server.rpc.handler_shape import behaviour
from nnhal.server.rpc.identity import stream_client

log = logging.getLogger(__name__)

#: A message not read whole within this ends its call.
READ_TIMEOUT_S = 10.0
#: An answer message the client has not taken within this ends its call.
WRITE_TIMEOUT_S = 10.0
#: A stream's flow-control window before its handler reads: a message no larger was taken in
#: before it could be admitted, so it is held against its client's limit but never refused for
#: the server's total (a small call always gets through).
WINDOW_BYTES = 64 * 1024
#: A request is held as its message and as the canonical request its handler decodes from it:
#: the server's total is charged this many times its size (its client's limit once).
REQUEST_COPIES = 2
#: The budget's kind for request messages held by their calls.
REQUESTS_IN_FLIGHT = "requests in flight"


@dataclass
class _Held:
    """One call's message held: its bytes and the task serving the call (ended to make room)."""

    nbytes: int
    ender: CallEnder | None
    released: bool = False


@dataclass(eq=False, slots=True)
class _Read:
    """One read in progress: when it expires, and the task to end then (None once done)."""

    deadline: float
    task: asyncio.Task[Any] | None
    expired: bool = False


class _ReadClock:
    """The deadlines of the reads in progress on one event loop. Every read gets the same
    time, so reads expire in the order they started: one timer, armed for the oldest read
    still open, stands for all of them. (A timer per read, ``asyncio.timeout``, costs every
    call a timer handle pushed on the loop's heap and its cancellation.) Loop-only."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self.loop = loop
        self._seconds = seconds
        self._reads: collections.deque[_Read] = collections.deque()
        self._timer: asyncio.TimerHandle | None = None

    def start(self) -> _Read:
        """A read of the current task starting now: the task is cancelled (and the read marked
        ``expired``) if it has not ``finish``ed within the clock's time."""
        read = _Read(self.loop.time() + self._seconds, asyncio.current_task())
        self._reads.append(read)
        if self._timer is None:
            self._timer = self.loop.call_at(read.deadline, self._expire)
        return read

    def finish(self, read: _Read) -> None:
        read.task = None
        reads = self._reads
        while reads and reads[0].task is None:
            reads.popleft()

    def _expire(self) -> None:
        self._timer = None
        reads, now = self._reads, self.loop.time()
        while reads and (reads[0].task is None or reads[0].deadline <= now):
            read = reads.popleft()
            if read.task is not None:
                read.expired = True
                read.task.cancel()
                read.task = None
        if reads:
            self._timer = self.loop.call_at(reads[0].deadline, self._expire)


@dataclass
class _Writer:
    """One connection's large answers: written one at a time; ``stalled`` once one was not
    taken within the bound, until a write on the connection completes."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    stalled: bool = False
    users: int = 0


@dataclass
class _Client:
    held: int = 0
    calls: list[_Held] = field(default_factory=list)


class Inbound:
    """Admission of request bytes and the write bound (module docstring). Loop-only."""

    def __init__(
        self,
        receive_cap: int,
        per_client: int = 0,
        budget: MemoryBudget | None = None,
        read_bytes: int = 0,
        read_timeout: float = READ_TIMEOUT_S,
        write_timeout: float = WRITE_TIMEOUT_S,
        verified: bool = True,
    ) -> None:
        """``verified``: whether a connection may carry a verified client certificate (mTLS);
        without, a call's bytes are its connection's and its auth context is never read."""
        self.receive_cap = max(1, receive_cap)
        self.verified = verified
        self.per_client = per_client
        self.budget = budget
        #: What one read holds at most, until its message is parsed (module docstring).
        self.place = READ_COPIES * self.receive_cap
        #: Bytes of places for reads in progress (at least one read's).
        self.read_bytes = max(self.place, read_bytes)
        self.read_timeout = read_timeout
        self.write_timeout = write_timeout
        self._clock: _ReadClock | None = None
        self._reading = 0
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._clients: dict[str, _Client] = {}
        self._writers: dict[str, _Writer] = {}
        self._held = 0
        #: Calls ended to make room, and calls ended because their client did not read (counters).
        self.evicted = 0
        self.stalled = 0

    @property
    def held(self) -> int:
        """Bytes of request messages held by calls in progress."""
        return self._held

    # -- reading -----------------------------------------------------------------------
    def _fits(self) -> bool:
        """Whether one more read's place fits (a lone read always does)."""
        return self._reading == 0 or self._reading + self.place <= self.read_bytes

    def _take_place(self) -> bool:
        """Take a read's place now when none is waiting and one fits; False otherwise."""
        if self._waiting or not self._fits():
            return False
        self._reading += self.place
        return True

    async def _wait_place(self) -> None:
        """Wait for a read's place, first come first served (``_end_read`` hands it over)."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._end_read()  # the place was handed over as the call ended: pass it on
            else:
                self._waiting.remove(waiter)
            raise

    def _end_read(self) -> None:
        """Give back a read's place and hand freed places to the reads waiting, first come
        first served."""
        self._reading -= self.place
        while self._waiting and self._fits():
            waiter = self._waiting.popleft()
            if not waiter.done():
                self._reading += self.place
                waiter.set_result(None)

    async def receive(
        self,
        context: aio.ServicerContext[Any, Any],
        parse: Callable[[bytes], Any] | None = None,
        what: str = "a request",
    ) -> Any:
        """The call's one request message, read once admitted, parsed by ``parse`` within its
        read's place (None: the bytes themselves) and held until the call ends; the call is aborted instead
        (RESOURCE_EXHAUSTED; INVALID_ARGUMENT without a message; INTERNAL when it cannot be
        parsed)."""
        if not self._take_place():
            await self._wait_place()
        try:
            read = await self._read(context)
            if read is None:
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"the request message did not arrive within {self.read_timeout:g} s",
                )
            if not isinstance(read, bytes):  # aio.EOF: the client half-closed with no message
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call carried no request message")
                raise AssertionError("unreachable: abort raises")  # pragma: no cover
            raw: bytes = read
            del read
            nbytes = len(raw)
            client = stream_client(context) if self.verified else context.peer() or ""
            refusal = self._hold(client, nbytes, context)
            failure: str | None = None
            message: Any = None
            if refusal is None:
                try:
                    message = parse(raw) if parse is not None else raw
                except Exception as err:  # as grpc answers (and logs) a request it cannot deserialize
                    undecodable(what, err)
                    failure = f"the request message could not be decoded: {err}"
            # Not held by this frame while an abort's exception (and its traceback) lives, nor
            # past the place that charged for it.
            del raw
        finally:
            self._end_read()
        if self.budget is not None and nbytes > WINDOW_BYTES:
            # The transport's slices and the buffer that gathered them were freed.
            self.budget.releaser.released((READ_COPIES - 1) * nbytes)
        if refusal is not None:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        if failure is not None:
            await context.abort(grpc.StatusCode.INTERNAL, failure)
        return message

    async def _read(self, context: aio.ServicerContext[Any, Any]) -> object:
        """The call's next message (``context.read()``), None when it did not arrive within
        ``read_timeout`` (the call's own cancellation is raised)."""
        loop = asyncio.get_running_loop()
        clock = self._clock
        if clock is None or clock.loop is not loop:
            clock = self._clock = _ReadClock(loop, self.read_timeout)
        pending = clock.start()
        try:
            return await context.read()
        except asyncio.CancelledError:
            if not pending.expired:
                raise
            # The clock's cancellation, taken back (as ``asyncio.timeout`` does); another one
            # arriving meanwhile (the transport's) is kept.
            uncancel = getattr(asyncio.current_task(), "uncancel", None)
            if uncancel is not None and uncancel() > 0:
                raise
            return None
        finally:
            clock.finish(pending)

    # -- holding -----------------------------------------------------------------------
    def _hold(self, key: str, nbytes: int, context: aio.ServicerContext[Any, Any]) -> str | None:
        """Charge ``nbytes`` to ``key`` until the call ends; the refusal's message, or None."""
        client = self._clients.get(key)
        mine = client.held if client is not None else 0
        if self.per_client and mine + nbytes > self.per_client:
            return (
                f"this client already holds {mine} bytes of requests in progress; with this one's {nbytes} that "
                f"is past its limit of {self.per_client}: wait for answers, or retry later"
            )
        refusal = self._charge(key, mine, nbytes)
        if refusal is not None:
            return refusal
        if client is None:
            client = self._clients[key] = _Client()
        entry = _Held(nbytes, call_ender())
        client.held += nbytes
        client.calls.append(entry)
        self._held += nbytes
        context.add_done_callback(partial(self._release, key, entry))  # called with the context
        return None

    def _charge(self, key: str, mine: int, nbytes: int) -> str | None:
        """Charge ``nbytes`` to the server's total (the budget's, leaving its reserve to the
        sessions), making room from clients above their fair share when ``key`` (holding
        ``mine``) is within its own; the refusal's message, or None."""
        budget = self.budget
        if budget is None or not budget.limit_total or nbytes <= WINDOW_BYTES:
            return None
        holders = len(self._clients) + (0 if key in self._clients else 1)
        # In bytes of messages (each charged REQUEST_COPIES times).
        share = (budget.limit_total - budget.reserve) // REQUEST_COPIES // max(1, holders)
        while True:
            try:
                budget.charge_working(nbytes * REQUEST_COPIES, REQUESTS_IN_FLIGHT, keep_reserve=True)
                return None
            except HalError as err:
                refusal = err.message
            if mine + nbytes > share:
                return refusal
            over = [(c.held - share, k) for k, c in self._clients.items() if k != key and c.held > share and c.calls]
            if not over:
                return refusal
            _, victim = max(over)
            entry = self._clients[victim].calls[-1]
            self._release(victim, entry)
            self.evicted += 1
            if entry.ender is not None:
                entry.ender.end("the server ended this call to make room for another client's request")
            log.warning("ended a call of client %s (above its fair share) to make room for another client", victim)

    def _release(self, key: str, entry: _Held, _context: object = None) -> None:
        if entry.released:
            return
        entry.released = True
        self._held -= entry.nbytes
        if self.budget is not None and self.budget.limit_total and entry.nbytes > WINDOW_BYTES:
            self.budget.uncharge_working(entry.nbytes * REQUEST_COPIES, REQUESTS_IN_FLIGHT)
        client = self._clients.get(key)
        if client is None:
            return
        client.held -= entry.nbytes
        try:
            client.calls.remove(entry)
        except ValueError:
            pass
        if not client.calls:
            del self._clients[key]

    # -- writing -----------------------------------------------------------------------
    def writer(self, peer: str) -> _Writer:
        """The large-answer state of connection ``peer`` (dropped when no call uses it)."""
        w = self._writers.get(peer)
        if w is None:
            w = self._writers[peer] = _Writer()
        w.users += 1
        return w

    def done_writing(self, peer: str, w: _Writer) -> None:
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

    def stalled_write(self, task: asyncio.Task[Any] | None, w: _Writer, what: str) -> None:
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
            request = await inbound.receive(context, parse, what)
            events = fn(request, context)
            del request
            task = asyncio.current_task()
            loop = asyncio.get_running_loop()
            peer = context.peer() or ""
            w = inbound.writer(peer)
            try:
                if not hasattr(events, "__aiter__"):  # a coroutine writing to the context
                    await events
                    return
                async for event in events:
                    large = event.ByteSize() > WINDOW_BYTES if hasattr(event, "ByteSize") else False
                    if not large:
                        timer = loop.call_later(inbound.write_timeout, inbound.stalled_write, task, w, what)
                        try:
                            yield event
                        finally:
                            timer.cancel()
                        w.stalled = False
                        continue
                    # A large answer waits for the connection's previous one to be written: a
                    # client that does not read leaves one answer in the transport, not many.
                    async with w.lock:
                        if w.stalled:
                            await context.abort(
                                grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"this connection took no answer for {inbound.write_timeout:g} s: its large "
                                "answers are refused until it reads",
                            )
                        timer = loop.call_later(inbound.write_timeout, inbound.stalled_write, task, w, what)
                        try:
                            yield event
                        finally:
                            timer.cancel()
                        w.stalled = False
            except asyncio.CancelledError:
                if not ended():  # the transport's cancellation
                    raise
                await abort_ended(context)
            finally:
                inbound.done_writing(peer, w)
                aclose = getattr(events, "aclose", None)
                if aclose is not None:
                    await aclose()

        return grpc.stream_stream_rpc_method_handler(
            stream, request_deserializer=None, response_serializer=handler.response_serializer
        )

    unary_fn: Callable[[Any, aio.ServicerContext[Any, Any]], Awaitable[Any]] = fn

    async def unary(_requests: object, context: aio.ServicerContext[Any, Any]) -> Any:
        try:
            request = await inbound.receive(context, parse, what)
            answer = await unary_fn(request, context)
            del request
            if hasattr(answer, "ByteSize") and answer.ByteSize() > WINDOW_BYTES:
                await inbound.hand_over(context, what)
            return answer
        except asyncio.CancelledError:
            if not ended():  # the transport's cancellation
                raise
            await abort_ended(context)

    return grpc.stream_unary_rpc_method_handler(
        unary, request_deserializer=None, response_serializer=handler.response_serializer
    )

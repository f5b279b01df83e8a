"""The bytes of calls in flight: a request is read only once admitted, and held against limits
until its call ends (issue #24).

grpc.aio reads a unary request message whole before it runs the handler, so a server
handling unary requests holds every arriving message, however many clients send at once.
A handler of a request stream reads when it likes: before it reads, the HTTP/2 transport
holds at most the stream's flow-control window of the message (64 KiB; BDP probing is off,
``channel_args.SERVER_OPTIONS``). The wire is the same for both (one message, then the half-close), so
every unary-request method is served as a request stream
(:func:`nnhal.server.rpc.gated_handlers.gated`) that reads its one message through an
:class:`Inbound`:

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
  the connection) until its handler has its answer (before the client can see it, so a
  client calling again at once never finds its last request still charged) or its call
  ends, at most ``per_client`` bytes per client, and, when
  larger than the flow-control window (``WINDOW_BYTES``), to the server's total, twice
  (``REQUEST_COPIES``; ``budget.charge_working``, leaving the fair-share reserve to the
  sessions' own charges).
  Past the total, a client below its fair share (the total less the reserve, divided among
  the clients holding any plus itself) makes room: the newest call of the client furthest
  above its share is ended (RESOURCE_EXHAUSTED to that client, ``ending``). Otherwise the call is refused
  RESOURCE_EXHAUSTED. The handler's own charges (request data, results waiting to be
  written) come on top, in the same budget.
- **writing**: the bound on answers the client does not take is
  :mod:`nnhal.server.rpc.answer_writes` (``Inbound.writes``).

State lives on the server's event loop and is touched only there (no lock).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import grpc
from grpc import aio

from nnhal.core.errors import HalError
from nnhal.server.budget import MemoryBudget
from nnhal.server.device_config import READ_COPIES
from nnhal.server.log_limits import undecodable
from nnhal.server.rpc.answer_writes import AnswerWrites
from nnhal.server.rpc.ending import CallEnder, call_ender
from nnhal.server.rpc.identity import stream_client
from nnhal.server.rpc.read_clock import ReadClock

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


class _Client:
    """What one client holds: its bytes and its calls holding them, oldest first."""

    __slots__ = ("calls", "held", "key")

    def __init__(self, key: str) -> None:
        self.key = key
        self.held = 0
        self.calls: list[_Held] = []


@dataclass(slots=True, eq=False)
class _Held:
    """One call's message held: its bytes, its client (in ``Inbound._clients`` while it holds
    any call not released) and the task serving the call (ended to make room)."""

    nbytes: int
    client: _Client
    ender: CallEnder | None
    released: bool = False


class Inbound:
    """Admission of request bytes (module docstring); ``writes`` bounds the answers. Loop-only."""

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
        #: One more read fits while the reads in progress hold no more than this (a lone read
        #: always does: ``read_bytes`` is at least a place).
        self._fits_below = self.read_bytes - self.place
        self.read_timeout = read_timeout
        #: The bound on writing answers (``nnhal.server.rpc.answer_writes``).
        self.writes = AnswerWrites(write_timeout)
        self._clock: ReadClock | None = None
        self._reading = 0
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._clients: dict[str, _Client] = {}
        self._held = 0
        #: Calls ended to make room (a counter).
        self.evicted = 0

    @property
    def held(self) -> int:
        """Bytes of request messages held by calls in progress."""
        return self._held

    # -- reading -----------------------------------------------------------------------
    def _fits(self) -> bool:
        """Whether one more read's place fits (a lone read always does)."""
        return self._reading <= self._fits_below

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
    ) -> tuple[Any, Callable[[], None]]:
        """The call's one request message, read once admitted, parsed by ``parse`` within its
        read's place (None: the bytes themselves), and what lets it go. Its bytes are charged
        to the client until the handler lets them go (once it has its answer: a client that
        calls again as soon as it is answered must not find its last request still charged)
        or the call ends. The call is aborted instead (RESOURCE_EXHAUSTED; INVALID_ARGUMENT
        without a message; INTERNAL when it cannot be parsed)."""
        # The call's ender, made as its read starts (its task, found once, times the read too).
        ender = call_ender()
        if not self._take_place():
            await self._wait_place()
        try:
            # The call's next message, None when it did not arrive within ``read_timeout`` (the
            # call's own cancellation is raised); read in this frame (no coroutine of its own: every
            # resumption of the call passes through each frame it awaits in).
            loop = asyncio.get_running_loop()
            clock = self._clock
            if clock is None or clock.loop is not loop:
                clock = self._clock = ReadClock(loop, self.read_timeout)
            timed = clock.start(ender.task if ender is not None else None)
            read: object
            try:
                read = await context.read()
            except asyncio.CancelledError:
                if not clock.expired(timed):
                    raise
                # The clock's cancellation, taken back (as ``asyncio.timeout`` does); another one
                # arriving meanwhile (the transport's) is kept.
                uncancel = getattr(asyncio.current_task(), "uncancel", None)
                if uncancel is not None and uncancel() > 0:
                    raise
                read = None
            finally:
                clock.finish(timed)
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
            held = self._hold(client, nbytes, context, ender)
            refusal = held if isinstance(held, str) else None
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
        if nbytes > WINDOW_BYTES and self.budget is not None:
            # The transport's slices and the buffer that gathered them were freed.
            self.budget.releaser.released((READ_COPIES - 1) * nbytes)
        if refusal is not None:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
        if failure is not None:
            await context.abort(grpc.StatusCode.INTERNAL, failure)
        assert not isinstance(held, str)
        return message, held

    def answer(
        self, context: aio.ServicerContext[Any, Any], let_go: Callable[[], None], nbytes: int, what: str
    ) -> Awaitable[None] | None:
        """Before a unary call's answer of ``nbytes`` is returned: its request let go
        (``receive``'s ``let_go``: before the answer reaches the client, which may call again at
        once), then an answer larger than the flow-control window handed over one at a time per
        connection: what to await before returning it (``AnswerWrites.hand_over``: it may abort
        the call), None for an answer within the window (no coroutine made for it)."""
        let_go()
        if nbytes > WINDOW_BYTES:
            return self.writes.hand_over(context, what)
        return None

    # -- holding -----------------------------------------------------------------------
    def _hold(
        self, key: str, nbytes: int, context: aio.ServicerContext[Any, Any], ender: CallEnder | None
    ) -> str | Callable[[], None]:
        """Charge ``nbytes`` to ``key`` until the call ends or what is returned is called (ended
        by ``ender``, the call's, to make room); the refusal's message instead."""
        client = self._clients.get(key)
        mine = client.held if client is not None else 0
        if self.per_client and mine + nbytes > self.per_client:
            return (
                f"this client already holds {mine} bytes of requests in progress; with this one's {nbytes} that "
                f"is past its limit of {self.per_client}: wait for answers, or retry later"
            )
        if nbytes > WINDOW_BYTES:  # a message within the flow-control window is never refused for the total
            refusal = self._charge(key, mine, nbytes)
            if refusal is not None:
                return refusal
        if client is None:
            client = self._clients[key] = _Client(key)
        entry = _Held(nbytes, client, ender)
        client.held += nbytes
        client.calls.append(entry)
        self._held += nbytes
        release = partial(self._release, entry)
        context.add_done_callback(release)  # called with the context
        return release

    def _charge(self, key: str, mine: int, nbytes: int) -> str | None:
        """Charge ``nbytes`` to the server's total (the budget's, leaving its reserve to the
        sessions), making room from clients above their fair share when ``key`` (holding
        ``mine``) is within its own; the refusal's message, or None. For a message larger than
        the flow-control window (``_hold``: a smaller one skips the total's charge)."""
        budget = self.budget
        if budget is None or not budget.limit_total:
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
            self._release(entry)
            self.evicted += 1
            if entry.ender is not None:
                entry.ender.end("the server ended this call to make room for another client's request")
            log.warning("ended a call of client %s (above its fair share) to make room for another client", victim)

    def _release(self, entry: _Held, _context: object = None) -> None:
        """Let ``entry`` go (once: its handler's ``let_go``, then its call's end)."""
        if entry.released:
            return
        entry.released = True
        nbytes = entry.nbytes
        self._held -= nbytes
        if nbytes > WINDOW_BYTES and self.budget is not None and self.budget.limit_total:
            self.budget.uncharge_working(nbytes * REQUEST_COPIES, REQUESTS_IN_FLIGHT)
        # The entry's client is the one in ``_clients`` under its key: a client leaves it only
        # once its last call not released is.
        client = entry.client
        client.held -= nbytes
        calls = client.calls
        calls.remove(entry)
        if not calls:
            del self._clients[client.key]

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
  ``read_timeout`` of taking its place ends its call (RESOURCE_EXHAUSTED, through its ender): a
  sender that stalls holds its place that long at most. The transport's freed slices are counted as released memory (the
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

A call's read, its ender and its hold are one record (``Call``), made as its read starts; the
reads' places and times are one owner (``read_clock.ReadClock``); a client's record stays while
it holds nothing, for its next call (``IDLE_CLIENTS``). State lives on the server's event loop and
is touched only there (no lock).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc import aio

from nnhal.core.errors import HalError
from nnhal.server.budget import MemoryBudget
from nnhal.server.device_config import READ_COPIES
from nnhal.server.log_limits import undecodable
from nnhal.server.rpc.answer_writes import AnswerWrites
from nnhal.server.rpc.ending import CallEnder, abort_ended, ended
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


#: Records of clients holding nothing kept for their next call, up to this many (more are swept
#: when a new client's record is made: a client calling one at a time makes none per call).
IDLE_CLIENTS = 64


class _Client:
    """What one client holds: its bytes and its calls holding them, oldest first. Kept while
    it holds nothing (``IDLE_CLIENTS``): only a client with calls counts among the holders."""

    __slots__ = ("calls", "held", "inbound")

    def __init__(self, inbound: Inbound) -> None:
        self.inbound = inbound
        self.held = 0
        self.calls: list[Call] = []


class Call(CallEnder):
    """One gated call, as one record: its ender (``ending.CallEnder``: made in the task serving
    it, ended to make room or by the read clock), its read on the clock (``ReadClock``) and,
    once read, its message held (``nbytes``, its serialized size; ``client``: None once let
    go). ``Inbound.receive`` returns it with the message."""

    __slots__ = ("client", "nbytes")
    #: Set as the message is held (``Inbound._hold``).
    client: _Client | None
    nbytes: int

    def let_go(self, _context: object = None) -> None:
        """Let the call's message go (once: its handler's ``let_go``, then its call's end, the
        context's done callback)."""
        client = self.client
        if client is None:
            return
        self.client = None
        nbytes = self.nbytes
        client.held -= nbytes
        client.calls.remove(self)  # an entry not let go is in its client's calls (once)
        if nbytes > WINDOW_BYTES:
            client.inbound._uncharge(nbytes)


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
        self.read_timeout = read_timeout
        #: The bound on writing answers (``nnhal.server.rpc.answer_writes``).
        self.writes = AnswerWrites(write_timeout)
        #: The reads in progress, their places and time (``ReadClock``, of the loop served).
        self._reads: ReadClock | None = None
        #: Every client holding any call, and up to ``IDLE_CLIENTS`` more holding none.
        self._clients: dict[str, _Client] = {}
        self._sweep_at = IDLE_CLIENTS
        #: Calls ended to make room (a counter).
        self.evicted = 0

    @property
    def held(self) -> int:
        """Bytes of request messages held by calls in progress."""
        return sum(c.held for c in self._clients.values())

    def holders(self) -> dict[str, int]:
        """The bytes held by each client holding any call."""
        return {key: c.held for key, c in self._clients.items() if c.calls}

    # -- reading -----------------------------------------------------------------------
    def _reads_of(self, loop: asyncio.AbstractEventLoop) -> ReadClock:
        """The reads in progress on ``loop``, their places and time (one clock per loop: the
        inbound serves one loop at a time)."""
        reads = self._reads = ReadClock(
            loop,
            self.read_timeout,
            f"the request message did not arrive within {self.read_timeout:g} s",
            self.place,
            self.read_bytes,
        )
        return reads

    async def receive(
        self,
        context: aio.ServicerContext[Any, Any],
        parse: Callable[[bytes], Any] | None = None,
        what: str = "a request",
    ) -> tuple[Any, Call]:
        """The call's one request message, read once admitted, parsed by ``parse`` within its
        read's place (None: the bytes themselves), and the call's record: ``let_go`` lets it go,
        ``nbytes`` is its serialized size (at least what its fields carry). Its bytes are charged
        to the client until the handler lets them go (once it has its answer: a client that
        calls again as soon as it is answered must not find its last request still charged)
        or the call ends. The call is aborted instead (RESOURCE_EXHAUSTED; INVALID_ARGUMENT
        without a message; INTERNAL when it cannot be parsed). The call's record (``Call``)
        is made here, in the task serving it: its ender, its read on the clock, its hold."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a request is read on a task")
        call = Call(task)
        reads = self._reads
        loop = task.get_loop()
        if reads is None or reads.loop is not loop:
            reads = self._reads_of(loop)
        if not reads.enter(call):  # its place taken and its time running, or wait for them
            await reads.wait(call)
        problem: tuple[grpc.StatusCode, str] | None = None
        try:
            try:
                # Read in this frame (no coroutine of its own: every resumption of the call
                # passes through each frame it awaits in). A read past its time is the call
                # ended (``ReadClock``): its cancellation, caught below.
                read = await context.read()
                if isinstance(read, bytes):
                    nbytes = len(read)
                    refusal = self._hold(
                        stream_client(context) if self.verified else context.peer() or "", nbytes, context, call
                    )
                    if refusal is None:
                        try:
                            message = parse(read) if parse is not None else read
                        except Exception as err:  # as grpc answers (and logs) a request it cannot deserialize
                            undecodable(what, err)
                            problem = (grpc.StatusCode.INTERNAL, f"the request message could not be decoded: {err}")
                    else:
                        problem = (grpc.StatusCode.RESOURCE_EXHAUSTED, refusal)
                else:  # aio.EOF: the client half-closed with no message
                    nbytes = 0
                    problem = (grpc.StatusCode.INVALID_ARGUMENT, "the call carried no request message")
                # Not held by this frame while an abort's exception (and its traceback) lives, nor
                # past the place that charged for it.
                del read
            finally:
                reads.leave(call)  # its time stopped, its place given back
        except asyncio.CancelledError:
            if not ended():  # the transport's cancellation
                raise
            await abort_ended(context)  # the clock's (or room made): RESOURCE_EXHAUSTED, its reason
            raise AssertionError("unreachable: abort raises") from None  # pragma: no cover
        if nbytes > WINDOW_BYTES and self.budget is not None:
            # The transport's slices and the buffer that gathered them were freed.
            self.budget.releaser.released((READ_COPIES - 1) * nbytes)
        if problem is not None:
            await context.abort(*problem)
        return message, call

    def answer(
        self, context: aio.ServicerContext[Any, Any], let_go: Callable[[], None], nbytes: int, what: str
    ) -> Awaitable[None] | None:
        """Before a unary call's answer of ``nbytes`` is returned: its request let go
        (``receive``'s ``Call.let_go``: before the answer reaches the client, which may call again at
        once), then an answer larger than the flow-control window handed over one at a time per
        connection: what to await before returning it (``AnswerWrites.hand_over``: it may abort
        the call), None for an answer within the window (no coroutine made for it)."""
        let_go()
        if nbytes > WINDOW_BYTES:
            return self.writes.hand_over(context, what)
        return None

    # -- holding -----------------------------------------------------------------------
    def _hold(self, key: str, nbytes: int, context: aio.ServicerContext[Any, Any], call: Call) -> str | None:
        """Charge ``nbytes`` to ``key`` as ``call``'s until the call ends or ``call.let_go`` is
        called (``call`` ended to make room); None, or the refusal's message."""
        client = self._clients.get(key)
        if client is None:
            client = self._client(key)
        mine = client.held
        if self.per_client and mine + nbytes > self.per_client:
            return (
                f"this client already holds {mine} bytes of requests in progress; with this one's {nbytes} that "
                f"is past its limit of {self.per_client}: wait for answers, or retry later"
            )
        if nbytes > WINDOW_BYTES:  # a message within the flow-control window is never refused for the total
            refusal = self._charge(client, mine, nbytes)
            if refusal is not None:
                return refusal
        call.nbytes = nbytes
        call.client = client
        client.held = mine + nbytes
        client.calls.append(call)
        context.add_done_callback(call.let_go)  # called with the context
        return None

    def _client(self, key: str) -> _Client:
        """A new record for client ``key``; past the records kept, those of clients holding
        nothing are swept first (at most ``IDLE_CLIENTS``, or as many as hold any, are kept
        idle: amortized, a step per record made)."""
        clients = self._clients
        if len(clients) >= self._sweep_at:
            for idle in [k for k, c in clients.items() if not c.calls]:
                del clients[idle]
            self._sweep_at = max(IDLE_CLIENTS, 2 * len(clients))
        client = clients[key] = _Client(self)
        return client

    def _charge(self, client: _Client, mine: int, nbytes: int) -> str | None:
        """Charge ``nbytes`` to the server's total (the budget's, leaving its reserve to the
        sessions), making room from clients above their fair share when ``client`` (holding
        ``mine``) is within its own; the refusal's message, or None. For a message larger than
        the flow-control window (``_hold``: a smaller one skips the total's charge)."""
        budget = self.budget
        if budget is None or not budget.limit_total:
            return None
        holders = sum(1 for c in self._clients.values() if c.calls) + (0 if client.calls else 1)
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
            over = [
                (c.held - share, k) for k, c in self._clients.items() if c is not client and c.held > share and c.calls
            ]
            if not over:
                return refusal
            _, victim = max(over)
            entry = self._clients[victim].calls[-1]
            entry.let_go()
            self.evicted += 1
            entry.end("the server ended this call to make room for another client's request")
            log.warning("ended a call of client %s (above its fair share) to make room for another client", victim)

    def _uncharge(self, nbytes: int) -> None:
        """Give back a message's charge to the server's total (``_charge``'s; for a message
        larger than the flow-control window)."""
        budget = self.budget
        if budget is not None and budget.limit_total:
            budget.uncharge_working(nbytes * REQUEST_COPIES, REQUESTS_IN_FLIGHT)

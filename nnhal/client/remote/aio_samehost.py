"""The session's same-host execution queue for the asyncio client: its doorbell on the event loop.

The asyncio twin of :mod:`nnhal.client.remote.samehost`, with the same rules: when the
server is on this host and offers the fast path, every call of a carried execution form
(:data:`nnhal.core.samehost.METHODS`) that :class:`~nnhal.client.remote.aio_session.AioSession`
makes goes through the session's queue, opened at the first such call (``openFastBurst``
with ``executions``), and ``executeSynchronously_1_3`` travels as a fast burst's packets
(full, learning and compact). What a call sends and how its answer reads is shared with
the sync client (:class:`~nnhal.client.remote.samehost.CarriedForms`,
:class:`~nnhal.client.remote.queue_ends.QueueEnds`); only the waiting differs: the doorbell's
inbox is a reader of the event loop, which wakes the awaiting call — no thread, no polling.

Concurrent calls (tasks) each take a link of their own, as the sync client's threads do
(:class:`~nnhal.client.remote.link_pool.LinkPool`): a call that finds every link busy opens
another, up to the number the server says the session may hold; an extra link left unused
for ``link_pool.IDLE_S`` is closed (a timer of the event loop). A call takes gRPC instead (the user
sees no difference) when the first link was refused (then every later call too), every
link is busy and no other may be opened now, the request or its answer does not fit a
ring, or the server steps aside.

Failures keep the gRPC path's statuses, through the session's one call path
(:meth:`~nnhal.client.remote.aio_session.AioSession.call`, which races each call against
the session's end; an execution is awaited without that race's task, its failure mapped
alike by ``AioSession.failure``, the session's end error first): a killed server is
DEAD_OBJECT as soon as the session sees it; the
queue's liveness stream, read by a task of its own, ending (the server ended the queue:
its last event's status) or breaking wakes the awaiting call at once; no answer within
the call's time is the gRPC deadline's mapping. A call that is cancelled, or times out,
leaves the queue out of step: it is closed, and a later call opens a new one. Every
coroutine here runs on the session's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import math
import mmap
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import Message

from nnhal.client.outcome import failed_result
from nnhal.client.remote import link_pool
from nnhal.client.remote.fastpath import ended_result
from nnhal.client.remote.link_pool import LinkPool
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.client.remote.queue_ends import QueueEnded, QueueEnds, QueueTimeout
from nnhal.client.remote.samehost import (
    RING_BYTES,
    CarriedForms,
    ended_error,
    late_error,
    scope_of,
)
from nnhal.client.remote.transport import (
    BURST_STREAM_TIMEOUT,
    DEFAULT_CALL_TIMEOUT,
    grpc_timeout,
    map_rpc_error,
    remaining_time,
)
from nnhal.core import fastpacket, fastring, samehost, wire_status
from nnhal.core.doorbell import Doorbell
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, GeneralFailure, HalError
from nnhal.core.types import ExecutionResult, Request
from nnhal.proto import fastpath_pb2 as fpb

if TYPE_CHECKING:
    from nnhal.client.remote.aio_session import AioSession

log = logging.getLogger(__name__)

#: Seconds a call whose queue ended waits for the liveness stream to say why.
_SETTLE_S = 1.0

T = TypeVar("T")
Metadata = tuple[tuple[str, str], ...]


class AioQueueLink(QueueEnds):
    """A session's collected queue, awaited through the event loop. ``close`` it (idempotent)."""

    def __init__(
        self,
        session: AioSession,
        call: Any,
        first: fpb.FastBurstEvent,
        ends: tuple[mmap.mmap, Doorbell],
        executions: bool = True,
    ) -> None:
        super().__init__(first, executions, ends)
        self._session = session
        self._call = call
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        #: The timer that wakes a call whose time is up (``_await_packet``): one per link, kept
        #: armed across calls — a call re-arms it only when it would fire after the call's end.
        self._timer: asyncio.TimerHandle | None = None
        self._alarm = math.inf  # when it fires (the loop's time; inf: not armed)
        self._busy = False
        self._closed = False
        self._liveness = _Liveness()
        self._loop.add_reader(self.doorbell.inbox, self._on_doorbell)
        # Fires only when the server closed its end of the queue (ended it, or died).
        self._loop.add_reader(self.doorbell.outbox, self._on_peer_gone)
        self._watching = True
        # The task holds neither this link nor the session: a closed session's channel then goes
        # with its last reference (``AioSession._shutdown`` says why that matters).
        self._follower = self._loop.create_task(
            _follow(call, self.doorbell, self._liveness), name="nnhal-same-host-queue"
        )

    @classmethod
    async def open(cls, session: AioSession, ring_bytes: int = RING_BYTES, prepared_model: str = "") -> AioQueueLink:
        """Open a same-host execution queue of the session — or, given ``prepared_model``, a fast
        burst of that model (:class:`~nnhal.client.remote.aio_fastburst.AioFastBurst`); raises
        the refusal's HalError."""
        executions = not prepared_model
        request = fpb.FastBurstRequest(
            session=session.session_id, prepared_model=prepared_model, ring_bytes=ring_bytes, executions=executions
        )
        md = session.metadata()
        call = session.stubs.fast_path.openFastBurst(request, timeout=BURST_STREAM_TIMEOUT, metadata=md)
        try:
            first = await session.call("openFastBurst", False, lambda _md: call.read(), md)
            if first is grpc.aio.EOF:
                raise GeneralFailure("openFastBurst: the stream ended without an answer")
            status, message = wire_status.status_from(first)
            if status != ErrorStatus.NONE:
                raise HalError.of(status, f"openFastBurst: {message}")
            # A blocking socket handover, off the loop; what it took is given back if nobody waits.
            taking = asyncio.get_running_loop().run_in_executor(None, QueueEnds.collect, first)
            try:
                ends = await asyncio.shield(taking)
            except asyncio.CancelledError:
                taking.add_done_callback(_discard_taken)
                raise
            try:
                return cls(session, call, first, ends, executions)
            except BaseException:
                QueueEnds.discard(ends)
                raise
        except BaseException:
            call.cancel()
            raise

    def _on_doorbell(self) -> None:
        if self._closed:
            return
        self.doorbell.take()
        if self.doorbell.stopped:
            self._unwatch()
        self._wake()

    def _on_peer_gone(self) -> None:
        self.doorbell.gone()
        self._unwatch()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _unwatch(self) -> None:
        if self._watching:
            self._watching = False
            self._loop.remove_reader(self.doorbell.inbox)
            self._loop.remove_reader(self.doorbell.outbox)

    async def _settle(self) -> None:
        """Let the liveness stream deliver why the queue ended (its last event, its error):
        the server closes its end just before it ends the stream."""
        await asyncio.wait((self._follower,), timeout=_SETTLE_S)

    @property
    def busy(self) -> bool:
        """Whether a call is using the queue now."""
        return self._busy

    async def exchange(self, kind: int, payload: fastring.Payload, timeout: float) -> tuple[int, bytes] | None:
        """Send one packet and await the answer packet for up to ``timeout`` seconds; None
        (nothing sent) when another task is using the queue or the packet does not fit the
        ring. Raises :class:`QueueEnded` when the queue ended first, :class:`QueueTimeout`
        when no answer came in time, GENERAL_FAILURE for an answer that breaks the ring's rules
        (the sync link's ``exchange``). A timeout or a cancellation leaves the queue out of
        step: close it."""
        if self._busy or not self.requests.fits(len(payload)):
            return None
        self._busy = True
        try:
            if self._closed:
                raise QueueEnded(self._ended())
            if self.doorbell.stopped:
                await self._settle()
                raise QueueEnded(self._ended())
            try:
                self.requests.write(kind, payload)
            except fastring.RingError as err:
                raise GeneralFailure(f"same-host queue: {err}") from None
            try:
                self.doorbell.ring()
            except OSError:  # the server closed its end: its stream is ending too
                await self._settle()
                raise QueueEnded(self._ended()) from None
            return await self._await_packet(timeout)
        finally:
            self._busy = False

    async def _await_packet(self, timeout: float) -> tuple[int, bytes]:
        """Await the next answer packet for up to ``timeout`` seconds (:meth:`exchange`'s failures)."""
        loop = self._loop
        end = loop.time() + timeout
        while True:
            if self._closed:  # closed while this call awaited: its rings are gone
                raise QueueEnded(self._ended())
            packet = self.read_answer()
            if packet is not None:
                return packet
            if self.doorbell.stopped:
                await self._settle()
                raise QueueEnded(self._ended())
            left = end - loop.time()
            if left <= 0:
                raise QueueTimeout(f"no answer within {timeout:.3g} s")
            # The link's timer fires by the end of this call's time: armed already (an earlier
            # call's, earlier still: it wakes this one early, which waits on) or now. A timer per
            # wait would cost more than the rest of a small call's wait.
            if self._alarm > end:
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = loop.call_at(end, self._on_timer)
                self._alarm = end
            waiter = self._waiter = loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    def _on_timer(self) -> None:
        """The link's timer fired: wake the awaiting call, which checks its own time."""
        self._timer = None
        self._alarm = math.inf
        self._wake()

    def _ended(self) -> ExecutionResult:
        """The result of a call the queue's end cut short."""
        if self._closed:
            return ExecutionResult(ErrorStatus.GENERAL_FAILURE, "same-host queue: the queue is closed")
        broken = self._liveness.broken
        if broken is not None:
            if isinstance(broken, DeadObject):
                self._session.declare_dead(broken.message)
            return failed_result(broken)
        return ended_result(self._liveness.last)

    def close(self) -> None:
        """End the queue: the server stops serving it and every descriptor is closed; a call
        awaiting its answer wakes and fails with GENERAL_FAILURE."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._call.cancel()
        self._follower.cancel()
        self._unwatch()
        self._wake()
        self._close_ends()


def _discard_taken(taking: asyncio.Future[Any]) -> None:
    if not taking.cancelled() and taking.exception() is None:
        QueueEnds.discard(taking.result())


class _Liveness:
    """What the liveness stream said last: its last event, or how it broke."""

    def __init__(self) -> None:
        self.last: fpb.FastBurstEvent | None = None
        self.broken: HalError | None = None


async def _follow(call: Any, doorbell: Doorbell, liveness: _Liveness) -> None:
    """Read a queue's liveness stream to its end, then wake whoever waits (DEAD_OBJECT for a
    broken stream, the last event's status for one the server ended)."""
    try:
        while (event := await call.read()) is not grpc.aio.EOF:
            liveness.last = event
    except grpc.RpcError as err:
        liveness.broken = map_rpc_error(err, what="same-host queue")
    except asyncio.CancelledError:
        pass
    doorbell.stop()


class AioSameHostQueue:
    """The same-host execution queue of one asyncio session: a pool of links (module
    docstring). ``close`` it (idempotent)."""

    def __init__(self, session: AioSession) -> None:
        self._session = session
        self._forms = CarriedForms(session.stubs)
        self._pool: LinkPool[AioQueueLink] = LinkPool()
        self._timer: asyncio.TimerHandle | None = None  # closes the extra links left unused

    def carries(self, rpc: Any) -> bool:
        """Whether calls of ``rpc`` (a stub's callable) may take the queue."""
        return not self._pool.refused and self._forms.carries(rpc)

    @property
    def open(self) -> bool:
        """Whether the queue has a link open now (tests, benchmarks)."""
        return bool(self._pool.links)

    @property
    def open_links(self) -> tuple[AioQueueLink, ...]:
        """The links open now, the first opened first (tests, benchmarks)."""
        return tuple(self._pool.links)

    async def _take(self) -> AioQueueLink | None:
        """A free link, opened now if need be and allowed; None: the call takes gRPC."""
        pool = self._pool
        link, open_one = pool.take(time.monotonic())
        if not open_one:
            return link
        try:
            link = await AioQueueLink.open(self._session)
        except HalError as err:
            if self._session.dead or self._session.closed:
                pool.opening -= 1  # not a refusal: the session's calls fail on their own
            else:
                pool.failed(err, time.monotonic())
                log.debug("no further same-host queue link for this session (%s); the call takes gRPC", err.message)
            return None
        except BaseException:
            pool.opening -= 1
            raise
        if not pool.opened(link, link.max_queues):
            link.close()
            return None
        return link

    def _give_back(self, link: AioQueueLink) -> None:
        pool = self._pool
        pool.give_back(link, time.monotonic())
        if pool.extras and self._timer is None and not pool.closed:
            self._timer = asyncio.get_running_loop().call_later(link_pool.IDLE_S, self._reap)

    def _reap(self) -> None:
        self._timer = None
        pool = self._pool
        for link in pool.stale(time.monotonic()):
            link.close()  # the server gives its rings' charge back
        if pool.extras and not pool.closed:
            self._timer = asyncio.get_running_loop().call_later(link_pool.IDLE_S, self._reap)

    async def _exchange(self, link: AioQueueLink, kind: int, payload: fastring.Payload, limit: float, what: str) -> Any:
        """:meth:`AioQueueLink.exchange`, its queue's end and lateness raised as the gRPC path's
        failures (the link closed when out of step)."""
        try:
            return await link.exchange(kind, payload, limit)
        except QueueEnded as ended:
            self._drop(link)
            raise ended_error(ended, what) from None
        except QueueTimeout:
            self._drop(link)  # its answer may still come: the link is out of step
            raise late_error(limit) from None
        except asyncio.CancelledError:
            self._drop(link)  # likewise
            raise

    def _carry(
        self, what: str, had_deadline: bool, fn: Callable[[Metadata], Awaitable[T | None]]
    ) -> Awaitable[T | None]:
        return self._session.call(what, had_deadline, fn)

    async def call(self, rpc: Any, request: Message, what: str, timeout: float | None) -> list[Any] | None:
        """Carry one call of ``rpc`` through the session's call path: its answer message(s) — one
        for a unary form, the launch and the notify events for a stream — or None when it
        takes gRPC instead (module docstring). Raises its mapped transport failure."""
        if self._pool.refused:
            return None
        link = await self._take()
        if link is None:
            return None
        limit = timeout or DEFAULT_CALL_TIMEOUT
        started = False

        async def run(md: Metadata) -> list[Any] | None:
            nonlocal started
            started = True
            try:  # given back when this task ends (the session's end may leave it running on)
                packet = self._forms.packet(rpc, request, md[0][1], scope_of(md), link.results.max_payload)
                if packet is None:
                    return None
                form, payload = packet
                answer = await self._exchange(link, samehost.METHOD, payload, limit, what)
                return None if answer is None else self._forms.answer(form, answer, what)
            finally:
                self._give_back(link)

        try:
            return await self._carry(what, timeout is not None, run)
        finally:
            if not started:
                self._give_back(link)

    async def execute(self, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult | None:
        """executeSynchronously_1_3 as a fast burst's execution on the queue (a layout the link
        granted an id travels as a compact call); None when it takes gRPC instead. Awaited as
        :meth:`_carried` says."""
        if self._pool.refused:
            return None
        link = await self._take()
        if link is None:
            return None
        try:
            session = self._session
            what = "executeSynchronously_1_3"
            session.check(what)
            md = session.metadata()
            rid = md[0][1]
            bound = grpc_timeout(remaining_time(options.timeout, options.deadline_at))
            try:
                tag = samehost.encode_tag(rid, scope_of(md))
                packet = link.execution_packet(request, options, handle, session.session_id, tag)
            except HalError as err:
                raise session.failure(err, what, bound is not None, rid) from None
            if packet is None:
                return None
            kind, payload, key = packet
            return await self._carried(link, kind, payload, key, bound, what, rid)
        finally:
            self._give_back(link)

    async def execute_planned(
        self,
        handle: str,
        planned: fastpacket.Planned,
        parts: list[Any],
        measure: bool,
        timeout: float | None,
        deadline_at: float | None,
        loop_timeout_ns: int,
    ) -> ExecutionResult | None:
        """:meth:`execute` of a numpy call plan's layout, from its pools' bytes (``parts``, in
        order) and the options of an unprofiled execution: a compact call on a free link that
        granted the layout an id, else None (nothing sent: the call takes :meth:`execute`, whose
        first call of a layout on a link asks it for an id). The same failures as :meth:`execute`."""
        link = self._pool.take_idle(AioQueueLink.granted, planned, handle)
        if link is None:
            return None
        layout = planned.grant[1]  # the id ``granted`` found for the link taken, remembered there
        try:
            session = self._session
            what = "executeSynchronously_1_3"
            session.check(what)
            md = session.metadata()
            rid = md[0][1]
            remaining = remaining_time(timeout, deadline_at)
            bound = grpc_timeout(remaining)
            try:
                tag = samehost.encode_tag(rid, scope_of(md))
                payload = link.planned_packet(layout, tag, measure, loop_timeout_ns, remaining, parts, planned.body)
            except HalError as err:
                raise session.failure(err, what, bound is not None, rid) from None
            if payload is None:
                return None
            return await self._carried(link, fastpacket.CALL, payload, (handle, planned.shape), bound, what, rid)
        finally:
            self._give_back(link)

    async def _carried(
        self,
        link: AioQueueLink,
        kind: int,
        payload: fastring.Payload,
        key: Any,
        bound: float | None,
        what: str,
        rid: str,
    ) -> ExecutionResult | None:
        """One execution's packet through the link and its result (None: nothing sent, or the
        queue stepped aside), awaited here rather than raced in a task of its own against the
        session's end (``AioSession.call``; an execution is the hottest call, and a task and a
        wait cost more than the rest of it): the link's own end (its liveness stream, on the
        session's channel; the server's end of the doorbell) wakes it, and a session that ended
        meanwhile gives the session's end error, as the race would have
        (``AioSession.failure``)."""
        try:
            answer = await self._exchange(link, kind, payload, bound or DEFAULT_CALL_TIMEOUT, what)
            return None if answer is None else link.result_of(answer, key)
        except (grpc.RpcError, HalError) as err:
            raise self._session.failure(err, what, bound is not None, rid) from None

    def _drop(self, link: AioQueueLink) -> None:
        """Close a link that can no longer be used (a later call opens a new one)."""
        self._pool.drop(link)
        link.close()

    def close(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        for link in self._pool.close():
            link.close()

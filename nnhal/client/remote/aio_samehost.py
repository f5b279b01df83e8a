"""The session's same-host execution queue for the asyncio client: its doorbell on the event loop.

The asyncio twin of :mod:`nnhal.client.remote.samehost`, with the same rules: when the
server is on this host and offers the fast path, every call of a carried execution form
(:data:`nnhal.core.samehost.METHODS`) that :class:`~nnhal.client.remote.aio_session.AioSession`
makes goes through the session's queue, opened at the first such call (``openFastBurst``
with ``executions``), and ``executeSynchronously_1_3`` travels as a fast burst's packets
(full, learning and compact). What a call sends and how its answer reads is shared with
the sync client (:class:`~nnhal.client.remote.samehost.CarriedForms`,
:class:`~nnhal.client.remote.queue_ends.QueueEnds`); only the waiting differs: the doorbell's
inbox is a reader of the event loop, which wakes the awaiting call — no thread, no polling
(each link: :class:`~nnhal.client.remote.aio_queue_link.AioQueueLink`).

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
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from google.protobuf.message import Message

from nnhal.client.remote import link_pool
from nnhal.client.remote.aio_queue_link import AioQueueLink
from nnhal.client.remote.link_pool import LinkPool
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.client.remote.queue_ends import QueueEnded, QueueTimeout
from nnhal.client.remote.samehost import CarriedForms, ended_error, late_error, scope_of
from nnhal.client.remote.transport import DEFAULT_CALL_TIMEOUT, Metadata, grpc_timeout, remaining_time
from nnhal.core import fastanswer, fastpacket, fastring, samehost
from nnhal.core.errors import HalError
from nnhal.core.types import ExecutionResult, Request

if TYPE_CHECKING:
    from nnhal.client.remote.aio_session import AioSession

log = logging.getLogger(__name__)

T = TypeVar("T")


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
            rid, scope = session.call_ids()
            bound = grpc_timeout(remaining_time(options.timeout, options.deadline_at))
            try:
                tag = samehost.encode_tag(rid, scope)
                packet = link.execution_packet(request, options, handle, session.session_id, tag)
            except HalError as err:
                raise session.failure(err, what, bound is not None, rid) from None
            if packet is None:
                return None
            kind, payload, key = packet
            answer = await self._carried(link, kind, payload, key, bound, what, rid)
            return None if answer is None else fastanswer.whole(answer)
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
    ) -> fastanswer.Apart | None:
        """:meth:`execute` of a numpy call plan's layout, from its pools' bytes (``parts``, in
        order) and the options of an unprofiled execution, its answer read apart
        (``fastanswer.Apart``): a compact call on a free link that granted the layout an id,
        else None (nothing sent: the call takes :meth:`execute`, whose first call of a layout on
        a link asks it for an id). The same failures as :meth:`execute`."""
        link = self._pool.take_idle(AioQueueLink.granted, planned, handle)
        if link is None:
            return None
        layout = planned.grant[1]  # the id ``granted`` found for the link taken, remembered there
        try:
            session = self._session
            what = "executeSynchronously_1_3"
            session.check(what)
            rid, scope = session.call_ids()
            remaining = remaining_time(timeout, deadline_at)
            bound = grpc_timeout(remaining)
            try:
                tag = samehost.encode_tag(rid, scope)
                payload = link.planned_packet(layout, tag, measure, loop_timeout_ns, remaining, parts, planned.body)
            except HalError as err:
                raise session.failure(err, what, bound is not None, rid) from None
            if payload is None:
                return None
            key = (handle, planned.shape)
            return await self._carried(link, fastpacket.CALL, payload, key, bound, what, rid)
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
    ) -> fastanswer.Apart | None:
        """One execution's packet through the link and its result read apart (as
        ``QueueEnds.result_of``'s; None: nothing sent, or the queue stepped aside), awaited
        here rather than raced in a task of its own against the session's end
        (``AioSession.call``; an execution is the hottest call, and a task and a wait cost more
        than the rest of it): the link's own end (its liveness stream, on the session's
        channel; the server's end of the doorbell) wakes it, and a session that ended meanwhile
        gives the session's end error, as the race would have (``AioSession.failure``)."""
        try:
            answer = await self._exchange(link, kind, payload, bound or DEFAULT_CALL_TIMEOUT, what)
            return None if answer is None else link.result_of(answer, key, True)
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

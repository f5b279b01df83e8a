"""The asyncio client's same-host fast burst: a burst's own queue, its doorbell awaited through
the event loop (the sync client's is :class:`~nnhal.client.remote.fastpath.FastBurstLink`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Literal, overload

from nnhal.client.outcome import failed_result
from nnhal.client.remote.aio_queue_link import AioQueueLink
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.client.remote.queue_ends import CarriedAbort, QueueEnded, QueueTimeout
from nnhal.client.remote.samehost import late_error
from nnhal.client.remote.transport import BURST_STREAM_TIMEOUT, grpc_timeout, remaining_time
from nnhal.core import fastanswer, fastpacket, fastring
from nnhal.core.errors import GeneralFailure
from nnhal.core.types import ExecutionResult, Request

if TYPE_CHECKING:
    from nnhal.client.remote.aio_session import AioSession


class AioFastBurst:
    """A same-host fast burst of one prepared model for the asyncio client: the twin of the sync
    client's :class:`~nnhal.client.remote.fastpath.FastBurstLink`, its doorbell awaited through
    the event loop (:class:`AioQueueLink`). Its queue is the burst's own (``openFastBurst`` naming
    the model), served as a burst execution by the server — the same checks, statuses and
    compact calls of a repeated layout as the sync client's fast burst; closing it ends the
    burst on the server. Every failure comes back as a result carrying its status: the queue's
    end (a killed server: DEAD_OBJECT, the session declared dead; a queue the server ended: its
    status) for this and every later execution. Not thread-safe: its owner awaits one
    execution at a time, on the session's event loop."""

    def __init__(self, session: AioSession, link: AioQueueLink) -> None:
        self._session = session
        self._link = link

    @classmethod
    async def open(cls, session: AioSession, handle: str, ring_bytes: int = 0) -> AioFastBurst:
        """Open the fast burst of prepared model ``handle`` (``ring_bytes``: each ring's size
        asked for, 0: the server's default); raises the refusal's HalError."""
        session.check("openFastBurst")
        return cls(session, await AioQueueLink.open(session, ring_bytes, handle))

    async def execute(self, request: Request, options: ExecutionOptions) -> ExecutionResult | None:
        """One execution: its result, or None (nothing sent) when it or its largest possible
        answer does not fit the rings (it takes the gRPC stream then). A cancelled call leaves
        the queue out of step: it is closed (later calls answer GENERAL_FAILURE)."""
        self._session.check("burst")
        packet = self._link.execution_packet(request, options, "", "", b"")
        if packet is None:
            return None
        kind, payload, key = packet
        return await self._exchange(
            kind, payload, key, grpc_timeout(remaining_time(options.timeout, options.deadline_at))
        )

    async def execute_planned(
        self, planned: fastpacket.Planned, parts: list[Any], measure: bool, timeout: float | None
    ) -> fastanswer.Apart | None:
        """:meth:`execute` of a numpy call plan's layout from its pools' bytes (``parts``, in
        order), its answer read apart (``fastanswer.Apart``): a compact call when the burst
        granted the layout an id, else None (nothing sent: the call takes :meth:`execute`,
        whose first call of a layout asks for the id)."""
        link = self._link
        layout = link.granted(planned, "")
        if not layout:
            return None
        self._session.check("burst")
        payload = link.planned_packet(layout, b"", measure, 0, timeout, parts, planned.body)
        if payload is None:
            return None
        return await self._exchange(fastpacket.CALL, payload, ("", planned.shape), grpc_timeout(timeout), True)

    @overload
    async def _exchange(
        self, kind: int, payload: fastring.Payload, key: Any, bound: float | None, apart: Literal[False] = False
    ) -> ExecutionResult | None: ...
    @overload
    async def _exchange(
        self, kind: int, payload: fastring.Payload, key: Any, bound: float | None, apart: Literal[True]
    ) -> fastanswer.Apart | None: ...

    async def _exchange(
        self, kind: int, payload: fastring.Payload, key: Any, bound: float | None, apart: bool = False
    ) -> ExecutionResult | fastanswer.Apart | None:
        """One packet through the burst's queue and its result (``apart``: read apart, as
        ``QueueEnds.result_of``'s; None: not sent)."""
        link = self._link
        what = "burst"
        limit = bound or BURST_STREAM_TIMEOUT
        try:
            answer = await link.exchange(kind, payload, limit)
        except QueueEnded as ended:
            failure = ended.result
        except QueueTimeout:
            link.close()  # its answer may still come: the queue is out of step
            failure = failed_result(self._session.failure(late_error(limit), what, bound is not None, ""))
        except GeneralFailure as err:  # an answer that broke the ring's rules
            failure = failed_result(err)
        except asyncio.CancelledError:
            link.close()  # likewise
            raise
        else:
            if answer is None:  # not sent: the link is in use (its owner awaits one call at a time)
                return None
            try:
                return link.result_of(answer, key, apart)
            except CarriedAbort as err:  # not a burst queue's kind: refused by the ring already
                failure = failed_result(self._session.failure(err, what, False, ""))
        return fastanswer.apart_of(failure) if apart else failure

    def close(self) -> None:
        """End the burst: the server stops serving it; an awaiting execution wakes (idempotent)."""
        self._link.close()

"""One link of the asyncio client's same-host queue (:class:`AioQueueLink`): a queue (or a
model's fast burst) whose doorbell is awaited through the event loop.

The doorbell's inbox is a reader of the event loop, which wakes the awaiting call — no
thread, no polling; the server closing its end of the doorbell wakes it too. The queue's
liveness stream is read by a task of its own; its ending (the server ended the queue: its
last event's status) or breaking (DEAD_OBJECT) wakes the awaiting call at once. A call
carries one packet at a time and waits at most its own time (one timer per link, kept
armed across calls). A call that is cancelled, or times out, leaves the link out of step:
its owner closes it. Every coroutine here runs on the session's event loop.
"""

from __future__ import annotations

import asyncio
import math
import mmap
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from nnhal.client.outcome import failed_result
from nnhal.client.remote.fastpath import ended_result
from nnhal.client.remote.queue_ends import QueueEnded, QueueEnds, QueueTimeout
from nnhal.client.remote.samehost import RING_BYTES
from nnhal.client.remote.transport import BURST_STREAM_TIMEOUT, map_rpc_error
from nnhal.core import fastring, wire_status
from nnhal.core.doorbell import Doorbell
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, GeneralFailure, HalError
from nnhal.core.types import ExecutionResult
from nnhal.proto import fastpath_pb2 as fpb

if TYPE_CHECKING:
    from nnhal.client.remote.aio_session import AioSession

#: Seconds a call whose queue ended waits for the liveness stream to say why.
_SETTLE_S = 1.0


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
            if not self.post(kind, payload):
                await self._settle()
                raise QueueEnded(self._ended())
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

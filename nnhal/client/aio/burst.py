"""The asyncio execution burst: ``configureExecutionBurst`` on one bidirectional gRPC stream.

``async with pm.burst() as burst: outcome = await burst.execute(request)`` — the
asyncio twin of :class:`nnhal.client.burst.Burst` on its gRPC transport, with the same
statuses: every failure is in the outcome (DEAD_OBJECT when the server dies meanwhile,
released at once with every other awaiting call; DEVICE_UNAVAILABLE from a draining
server; GENERAL_FAILURE once the server ended the stream), and DEAD_OBJECT comes back at
once for a server known dead. Executions run one at a time, in call order (an
``asyncio.Lock``): responses come back in request order.

Cancelling a task awaiting ``execute`` cancels the whole stream (``grpc.aio`` cancels a
call whose read is cancelled), and so the server's execution; later executions on this
burst answer GENERAL_FAILURE saying so — open a new burst.

The same-host fast path (shared-memory rings, :mod:`nnhal.client.remote.fastpath`) is the
sync client's: its waits are blocking doorbell reads on a thread, which an event loop would
have to turn into ``loop.add_reader`` waits.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio

from nnhal.client.aio.session import AioSession, Metadata
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote.messages import ExecutionOptions, execute_request
from nnhal.client.remote.transport import BURST_STREAM_TIMEOUT
from nnhal.core import wire
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import Request
from nnhal.proto import service_pb2 as spb

#: What an execution on a burst the server ended (or a cancelled one) answers.
ENDED = "the burst stream ended (refused or closed by the server); open a new burst"
CANCELLED = "an execution of this burst was cancelled, which ends its stream; open a new burst"


class Burst:
    """An execution burst of one prepared model. ``await close()``, or use ``async with``."""

    def __init__(self, session: AioSession, handle: str, call: Any, md: Metadata) -> None:
        self._session = session
        self._handle = handle
        self._call = call
        #: Every execution on the stream shares its request id.
        self._md = md
        self._lock = asyncio.Lock()
        self._ended = ""
        self._closed = False

    @classmethod
    def open(cls, session: AioSession, handle: str) -> Burst:
        """Open the stream; DEAD_OBJECT at once for a server known dead."""
        session.check("configureExecutionBurst")
        md = session.metadata()
        call = session.stubs.prepared_model.configureExecutionBurst(timeout=BURST_STREAM_TIMEOUT, metadata=md)
        return cls(session, handle, call, md)

    @property
    def fast(self) -> bool:
        """Always False: this burst runs on the gRPC stream (module docstring)."""
        return False

    async def execute(
        self, request: Request, *, measure: bool = False, timeout: float | None = None
    ) -> ExecutionOutcome:
        """One execution; every status (transport failures included) is in the outcome."""
        options = ExecutionOptions(measure=measure, timeout=timeout)
        msg, _ = execute_request(self._session.session_id, self._handle, request, options)
        async with self._lock:
            if self._closed:
                return ExecutionOutcome(ErrorStatus.GENERAL_FAILURE, "burst: the burst is closed")
            if self._ended:
                return ExecutionOutcome(ErrorStatus.GENERAL_FAILURE, self._ended)
            try:
                response = await self._session.call("burst", False, lambda _md: self._exchange(msg), self._md)
            except HalError as err:
                return ExecutionOutcome(err.error_status, err.message)
            except asyncio.CancelledError:
                self._ended = CANCELLED
                raise
        if response is None:  # the server ended the stream: a refusal past its cap, or a drain
            self._ended = ENDED
            return ExecutionOutcome(ErrorStatus.GENERAL_FAILURE, ENDED)
        return ExecutionOutcome.of(wire.execution_result_from(response.result))

    async def _exchange(self, msg: spb.ExecuteRequest) -> Any:
        """Send one request and read its response (None: the server ended the stream)."""
        try:
            await self._call.write(spb.BurstRequest(execute=msg))
        except asyncio.InvalidStateError:  # the call finished with OK: the server ended it
            return None
        response = await self._call.read()
        return None if response is grpc.aio.EOF else response

    async def close(self) -> None:
        """End the stream (idempotent): the server forgets the burst."""
        if self._closed:
            return
        self._closed = True
        async with self._lock:
            if self._ended or self._session.dead or self._session.closed:
                self._call.cancel()
                return
            try:
                await self._session.call("burst", False, lambda _md: self._finish(), self._md)
            except HalError:
                self._call.cancel()  # a stream that broke holds nothing to release

    async def _finish(self) -> None:
        try:
            await self._call.done_writing()
            while await self._call.read() is not grpc.aio.EOF:
                pass
        except asyncio.InvalidStateError:
            pass  # already finished

    async def __aenter__(self) -> Burst:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

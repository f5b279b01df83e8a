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

from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote.aio_session import AioBurstStream
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import Request

#: What an execution on a burst the server ended (or a cancelled one) answers.
ENDED = "the burst stream ended (refused or closed by the server); open a new burst"
CANCELLED = "an execution of this burst was cancelled, which ends its stream; open a new burst"


class Burst:
    """An execution burst of one prepared model. ``await close()``, or use ``async with``."""

    def __init__(self, stream: AioBurstStream, handle: str) -> None:
        self._stream = stream
        self._handle = handle
        self._lock = asyncio.Lock()
        self._ended = ""
        self._closed = False

    @property
    def fast(self) -> bool:
        """Always False: this burst runs on the gRPC stream (module docstring)."""
        return False

    async def execute(
        self, request: Request, *, measure: bool = False, timeout: float | None = None
    ) -> ExecutionOutcome:
        """One execution; every status (transport failures included) is in the outcome."""
        options = ExecutionOptions(measure=measure, timeout=timeout)
        async with self._lock:
            if self._closed:
                return ExecutionOutcome(ErrorStatus.GENERAL_FAILURE, "burst: the burst is closed")
            if self._ended:
                return ExecutionOutcome(ErrorStatus.GENERAL_FAILURE, self._ended)
            try:
                result = await self._stream.execute(self._handle, request, options)
            except HalError as err:
                return ExecutionOutcome.failed(err)
            except asyncio.CancelledError:
                self._ended = CANCELLED
                raise
        if result is None:  # the server ended the stream: a refusal past its cap, or a drain
            self._ended = ENDED
            return ExecutionOutcome(ErrorStatus.GENERAL_FAILURE, ENDED)
        return ExecutionOutcome.of(result)

    async def close(self) -> None:
        """End the stream (idempotent): the server forgets the burst."""
        if self._closed:
            return
        self._closed = True
        async with self._lock:
            if self._ended or self._stream.session_over:
                self._stream.cancel()
                return
            try:
                await self._stream.finish()
            except HalError:
                self._stream.cancel()  # a stream that broke holds nothing to release

    async def __aenter__(self) -> Burst:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

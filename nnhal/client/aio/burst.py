"""The asyncio execution burst: ``configureExecutionBurst`` over the same-host fast path or one
bidirectional gRPC stream.

``async with pm.burst() as burst: outcome = await burst.execute(request)`` — the
asyncio twin of :class:`nnhal.client.burst.Burst`, with the same transports and statuses:

- the same-host fast path (DESIGN §2): the burst's own shared-memory queue
  (:class:`~nnhal.client.remote.aio_fastburst.AioFastBurst`, its doorbell awaited through
  the event loop), opened at the first execution when the server offers it to this client;
- a bidirectional gRPC stream, in order, opened at the first execution that needs it: one
  too large for the rings, or every one when the fast path is refused (opened then), or at once
  when it is not asked for or not offered.

``fast``: None (default) takes the fast path when offered, silently falling back to gRPC;
True requires it (the refusal's status is the outcome of every execution); False uses gRPC
only. Every failure is in the outcome (DEAD_OBJECT when the server dies meanwhile, released
at once with every other awaiting call; DEVICE_UNAVAILABLE from a draining server;
GENERAL_FAILURE once the server ended the burst), and DEAD_OBJECT comes back at once for a
server known dead. Executions run one at a time, in call order (an ``asyncio.Lock``):
responses come back in request order.

Cancelling a task awaiting ``execute`` ends the burst: the gRPC stream is cancelled (and so
the server's execution) — ``grpc.aio`` cancels a call whose read is cancelled — or the fast
burst's queue, which the call left out of step, is closed; later executions on this burst
answer GENERAL_FAILURE saying so — open a new burst.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

import numpy as np

from nnhal.client import steps
from nnhal.client.numpy_io import NumpyIO, no_model, numpy_execution, settle
from nnhal.client.outcome import ExecutionOutcome, failed_result
from nnhal.client.remote.aio_burst_stream import AioBurstStream
from nnhal.client.remote.aio_fastburst import AioFastBurst
from nnhal.client.remote.aio_session import AioSession
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import ExecutionResult, Request

log = logging.getLogger(__name__)

#: What an execution on a burst the server ended (or a cancelled one) answers.
ENDED = "the burst stream ended (refused or closed by the server); open a new burst"
CANCELLED = "an execution of this burst was cancelled, which ends its stream; open a new burst"


class Burst:
    """An execution burst of one prepared model. ``await close()``, or use ``async with``."""

    def __init__(
        self,
        session: AioSession,
        handle: str,
        *,
        fast: bool | None = None,
        ring_bytes: int = 0,
        numpy_io: Callable[[], NumpyIO] = no_model,
    ) -> None:
        """``ring_bytes``: the size asked for each fast-path ring (0: the server's default);
        ``numpy_io``: the model's numpy side (``execute_numpy``; raises when there is none).
        DEAD_OBJECT at once for a server known dead."""
        session.check("configureExecutionBurst")
        self._session = session
        self._handle = handle
        self._numpy_io = numpy_io
        self._want_fast = bool(fast) or (fast is None and session.fast_path)
        self._require_fast = bool(fast)
        self._ring_bytes = ring_bytes
        self._fast: AioFastBurst | None = None
        self._refusal: HalError | None = None  # the fast path's, when it is required
        # Without the fast path, the stream at once (as the sync Burst's); with it, at the first
        # execution that needs it.
        self._stream: AioBurstStream | None = None if self._want_fast else session.open_burst()
        self._lock = asyncio.Lock()
        self._ended = ""
        self._closed = False

    @property
    def fast(self) -> bool:
        """Whether executions that fit the rings take the same-host fast path (known once the
        first execution, or ``async with``, opened it)."""
        return self._fast is not None

    async def _open_fast(self) -> None:
        """Open the fast path once, if asked for (under the lock)."""
        if not self._want_fast:
            return
        self._want_fast = False
        try:
            self._fast = await AioFastBurst.open(self._session, self._handle, self._ring_bytes)
        except HalError as err:
            if self._require_fast:
                self._refusal = err
            else:
                log.debug("no fast path for this burst (%s); using the gRPC stream", err.message)

    async def execute(
        self, request: Request, *, measure: bool = False, timeout: float | None = None
    ) -> ExecutionOutcome:
        """One execution; every status (transport failures included) is in the outcome."""
        options = ExecutionOptions.of(measure, timeout)
        return ExecutionOutcome.of(await self._result(request, options))

    async def _result(self, request: Request, options: ExecutionOptions) -> ExecutionResult:
        """One execution's result, every failure's status in it."""
        async with self._lock:
            if self._closed:
                return ExecutionResult(ErrorStatus.GENERAL_FAILURE, "burst: the burst is closed")
            if self._ended:
                return ExecutionResult(ErrorStatus.GENERAL_FAILURE, self._ended)
            try:
                result = await self._run(request, options)
            except HalError as err:
                return failed_result(err)
            except asyncio.CancelledError:
                self._ended = CANCELLED
                raise
        if result is None:  # the server ended the stream: a refusal past its cap, or a drain
            self._ended = ENDED
            return ExecutionResult(ErrorStatus.GENERAL_FAILURE, ENDED)
        return result

    async def _run(self, request: Request, options: ExecutionOptions) -> ExecutionResult | None:
        """One execution on the fast path when it fits, else on the gRPC stream (under the lock)."""
        if self._want_fast:
            await self._open_fast()
        if self._refusal is not None:
            raise self._refusal
        if self._fast is not None:
            result = await self._fast.execute(request, options)
            if result is not None:
                return result
        if self._stream is None:
            self._stream = self._session.open_burst()
        return await self._stream.execute(self._handle, request, options)

    async def execute_numpy(
        self, inputs: Sequence[np.ndarray | None], *, measure: bool = False, timeout: float | None = None
    ) -> ExecutionOutcome:
        """One execution on numpy arrays, as ``PreparedModel.execute``: the outputs in
        ``outcome.outputs`` (outputs of unknown shape retried once with the sizes the driver
        reported); raises the HalError it ends with. On the fast path a layout the burst ran
        before goes from the arrays straight to a compact call (the sync ``Burst``'s)."""
        numpy_io = self._numpy_io()
        options = ExecutionOptions.of(measure, timeout)
        async with self._lock:
            sizes = None
            fast = self._fast
            if fast is not None and not self._ended and not self._closed:
                planned = numpy_io.planned(inputs)
                if planned is not None:
                    plan, parts = planned
                    try:
                        answer = await fast.execute_planned(plan.compact, parts, measure, timeout)
                    except asyncio.CancelledError:
                        self._ended = CANCELLED
                        raise
                    if answer is not None:
                        settled = settle(plan, *answer)
                        if isinstance(settled, ExecutionOutcome):
                            return settled
                        sizes = settled  # OUTPUT_INSUFFICIENT_SIZE: the retry takes the general path
        return await steps.drive_async(
            numpy_execution(numpy_io, inputs, sizes), lambda request: self._result(request, options)
        )

    async def close(self) -> None:
        """End the burst (idempotent): the server forgets it."""
        if self._closed:
            return
        self._closed = True
        if self._fast is not None:
            self._fast.close()  # an awaiting execution wakes first
        async with self._lock:
            stream = self._stream
            if stream is None:
                return
            if self._ended or stream.session_over:
                stream.cancel()
                return
            try:
                await stream.finish()
            except HalError:
                stream.cancel()  # a stream that broke holds nothing to release

    async def __aenter__(self) -> Burst:
        async with self._lock:
            if self._want_fast and not self._closed:
                await self._open_fast()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

"""The asyncio ReusableExecution: an AIDL IExecution — one request validated once, run many times.

The asyncio twin of :class:`nnhal.client.reusable_execution.ReusableExecution`: the same
calls (:mod:`nnhal.client.remote.aidl`) and decoding, awaited. ``await compute()`` puts
every status in the outcome; ``await execute_fenced()`` raises the launch error. Release
with ``await release()`` or ``async with``; the session's end releases it anyway.
"""

from __future__ import annotations

from collections.abc import Sequence

from nnhal.client.aio.fenced import FencedExecution
from nnhal.client.outcome import ExecutionOutcome, outcome_of
from nnhal.client.release import AsyncReleasable
from nnhal.client.remote import aidl
from nnhal.client.remote.aio_session import AioSession
from nnhal.client.reusable_execution import Decoder, decoded
from nnhal.core.aidl_types import ExecutionConfig
from nnhal.core.types import Request


class ReusableExecution(AsyncReleasable):
    """A remote IExecution for asyncio code."""

    def __init__(self, session: AioSession, handle: str, decode: Decoder | None) -> None:
        self._session = session
        self.handle = handle
        self._convert = decoded(decode)
        self._released = False

    @classmethod
    async def create(
        cls, session: AioSession, prepared: str, request: Request, config: ExecutionConfig, decode: Decoder | None
    ) -> ReusableExecution:
        """createReusableExecution; raises the HalError the device refused it with."""
        handle = await session.run(aidl.create_reusable_execution(session.session_id, prepared, request, config))
        return cls(session, handle, decode)

    async def compute(self, *, timeout: float | None = None, deadline_at: float | None = None) -> ExecutionOutcome:
        """IExecution::executeSynchronously; every status in the outcome (``timing_ns``, decoded ``outputs``)."""
        call = aidl.execution_run(self._session.session_id, self.handle, timeout, deadline_at)
        return await self._session.run(outcome_of(call, self._convert))

    async def execute_fenced(
        self,
        *,
        wait_for: Sequence[FencedExecution] = (),
        timeout: float | None = None,
        deadline_at: float | None = None,
        duration_ns: int | None = None,
    ) -> FencedExecution:
        """IExecution::executeFenced; raises the launch error."""
        fences = [f.sync_fence for f in wait_for]
        call = aidl.execution_fenced(self._session.session_id, self.handle, fences, timeout, deadline_at, duration_ns)
        sync_fence, callback = await self._session.run(call)
        return FencedExecution(self._session, sync_fence, callback, aidl=True)

    async def release(self) -> None:
        """Release the server's object now (idempotent). Later runs: INVALID_ARGUMENT."""
        if self._released:
            return
        self._released = True
        await self._session.run(aidl.release(self._session.session_id, "execution", self.handle))

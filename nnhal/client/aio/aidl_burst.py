"""The asyncio AidlBurst: an AIDL IBurst caching memories by identifier token.

The asyncio twin of :class:`nnhal.client.aidl_burst.AidlBurst`, with its record of what
the device holds (:class:`~nnhal.client.aidl_burst.MemoryTokens`): one execution at a
time (an ``asyncio.Lock``), every status in the outcome. Release with ``await release()``
or ``async with``; the session's end releases it anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from nnhal.client.aidl_burst import MemoryTokens
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.release import AsyncReleasable
from nnhal.client.remote import aidl
from nnhal.client.remote.aio_session import AioSession
from nnhal.core.aidl_types import DEFAULT_EXECUTION_CONFIG, ExecutionConfig
from nnhal.core.types import Request


class AidlBurst(AsyncReleasable):
    """A remote IBurst for asyncio code."""

    def __init__(self, session: AioSession, handle: str) -> None:
        self._session = session
        self.handle = handle
        self._lock = asyncio.Lock()
        self._tokens = MemoryTokens()
        self._released = False

    @classmethod
    async def configure(cls, session: AioSession, prepared: str) -> AidlBurst:
        """AIDL IPreparedModel::configureExecutionBurst; raises its HalError."""
        return cls(session, await session.run(aidl.configure_burst(session.session_id, prepared)))

    async def execute(
        self,
        request: Request,
        tokens: Sequence[int] | None = None,
        *,
        config: ExecutionConfig = DEFAULT_EXECUTION_CONFIG,
        timeout: float | None = None,
        send: Sequence[bool] | None = None,
    ) -> ExecutionOutcome:
        """IBurst::executeSynchronously (``executeSynchronouslyWithConfig`` when ``config`` has hints)."""
        async with self._lock:
            sid = self._session.session_id
            return await self._session.run(
                self._tokens.execution(sid, self.handle, request, tokens, config, timeout, send)
            )

    async def release_memory(self, token: int) -> None:
        """IBurst::releaseMemoryResource. Raises its HalError."""
        async with self._lock:
            self._tokens.forget(token)
        await self._session.run(aidl.release_memory(self._session.session_id, self.handle, token))

    async def release(self) -> None:
        """Release the server's burst and its cached memories now (idempotent)."""
        if self._released:
            return
        self._released = True
        await self._session.run(aidl.release(self._session.session_id, "burst", self.handle))

"""The asyncio FencedExecution: a sync fence and its IFencedExecutionCallback.

From ``PreparedModel.execute_fenced`` (and the AIDL forms, ``ReusableExecution.execute_fenced``)
of :mod:`nnhal.client.aio`: the asyncio twin of :class:`nnhal.client.fenced.FencedExecution`,
whose call (:func:`~nnhal.client.fenced.info_call`) it drives. Immutable.
"""

from __future__ import annotations

from nnhal.client.fenced import info_call
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote.aio_session import AioSession
from nnhal.client.remote.transport import DEFAULT_CALL_TIMEOUT


class FencedExecution:
    """A sync fence plus its IFencedExecutionCallback (``aidl``: launched by an AIDL form)."""

    def __init__(self, session: AioSession, sync_fence: str, callback: str, *, aidl: bool = False) -> None:
        self._session = session
        self.sync_fence = sync_fence
        self.callback = callback
        self.aidl = aidl

    async def get_execution_info(self, wait: bool = True, timeout: float = DEFAULT_CALL_TIMEOUT) -> ExecutionOutcome:
        """getExecutionInfo: status, timings and returned inline pools; with ``wait``, once the
        fence signalled (bounded by ``timeout``: MISSED_DEADLINE_TRANSIENT after it). Raises DEAD_OBJECT."""
        return await self._session.run(info_call(self._session.session_id, self.callback, self.aidl, wait, timeout))

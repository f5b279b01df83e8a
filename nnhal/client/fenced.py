"""FencedExecution: a sync fence and its IFencedExecutionCallback, from ``PreparedModel.execute_fenced``
(and its AIDL forms, ``ReusableExecution.execute_fenced``).

The fence names the execution for later ``execute_fenced(wait_for=...)`` calls of any
form; ``get_execution_info`` asks the server for the status, the two timings and the
returned inline pools — through the AIDL IFencedExecutionCallback for an execution
launched by an AIDL form (``aidl``), which adds the timings in nanoseconds
(``timing_ns``, ``timing_launched_ns``; -1 when not available). Thread-safe (immutable).
"""

from __future__ import annotations

from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote import DEFAULT_CALL_TIMEOUT, RemoteSession
from nnhal.client.remote.aidl import AidlCalls


class FencedExecution:
    """A sync fence plus its IFencedExecutionCallback."""

    def __init__(self, remote: RemoteSession, sync_fence: str, callback: str, *, aidl: bool = False) -> None:
        self._remote = remote
        self.sync_fence = sync_fence
        self.callback = callback
        self.aidl = aidl

    def get_execution_info(self, wait: bool = True, timeout: float = DEFAULT_CALL_TIMEOUT) -> ExecutionOutcome:
        """getExecutionInfo: status, timings (``timing_launched``, ``timing`` up to the fence)
        and returned inline pools. With ``wait`` the call blocks until the fence signals
        (bounded by ``timeout``: MISSED_DEADLINE_TRANSIENT after it). Raises DEAD_OBJECT."""
        if self.aidl:
            info, launched, fenced = AidlCalls(self._remote).fenced_info(self.callback, wait, timeout)
            return ExecutionOutcome.of_fenced(info, launched, fenced)
        return ExecutionOutcome.of_fenced(self._remote.fenced_info(self.callback, wait, timeout))

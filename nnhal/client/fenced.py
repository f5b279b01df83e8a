"""FencedExecution: a sync fence and its IFencedExecutionCallback, from ``PreparedModel.execute_fenced``
(and its AIDL forms, ``ReusableExecution.execute_fenced``).

The fence names the execution for later ``execute_fenced(wait_for=...)`` calls of any
form; ``get_execution_info`` asks the server for the status, the two timings and the
returned inline pools — through the AIDL IFencedExecutionCallback for an execution
launched by an AIDL form (``aidl``), which adds the timings in nanoseconds
(``timing_ns``, ``timing_launched_ns``; -1 when not available). Thread-safe (immutable).
:func:`info_call` is the call, shared with the asyncio fenced execution.
"""

from __future__ import annotations

from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote import DEFAULT_CALL_TIMEOUT, RemoteSession, aidl, calls
from nnhal.client.remote.calls import Call


def info_call(session: str, callback: str, aidl_form: bool, wait: bool, timeout: float) -> Call[ExecutionOutcome]:
    """getExecutionInfo of ``callback`` in its form (AIDL or 1.3), as an outcome."""
    if aidl_form:
        info, launched, fenced = yield from aidl.fenced_info(session, callback, wait, timeout)
        return ExecutionOutcome.of_fenced(info, launched, fenced)
    return ExecutionOutcome.of_fenced((yield from calls.fenced_info(session, callback, wait, timeout)))


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
        return self._remote.run(info_call(self._remote.session_id, self.callback, self.aidl, wait, timeout))

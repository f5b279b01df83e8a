"""Fenced execution: sync fences and IFencedExecutionCallback, emulated by handles.

A sync fence is a server object that becomes signalled when its execution
ends. ``start`` runs a launched execution in a worker thread once the fences it
waits for are signalled; ``info`` answers getExecutionInfo with the canonical
FencedExecutionInfo.

The duration after the fences (HAL 1.3 ``timeoutDurationAfterFence``, AIDL
``durationNs``): once every awaited fence signalled, the execution has that long;
its deadline becomes the earlier of the request's deadline and that instant, so it
ends as any execution past its deadline does — MISSED_DEADLINE_TRANSIENT when it
waited behind other work or was delayed, MISSED_DEADLINE_PERSISTENT when it ran
alone — and its fence signals that error at once. ``on_signal`` (an IExecution's
"run in flight" lock) is called once the fence has signalled, whatever happened.

A fence's handle names both the sync fence and its callback. Fences belong to the
session that created them and are released with it. Thread-safe; the fence table's
lock is a leaf, a fence's state is published by setting its event after the state is
written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError, allocation_failed
from nnhal.core.types import FencedExecutionInfo, Timing
from nnhal.server.handles import HandleTable, new_handle
from nnhal.server.jobs import ExecutionJob
from nnhal.server.session import Session

UNKNOWN = "unknown sync fence or callback handle for this session"
_RUNNING = FencedExecutionInfo(False, ErrorStatus.GENERAL_FAILURE, "the execution has not finished yet")


@dataclass(eq=False)
class Fence:
    done: threading.Event = field(default_factory=threading.Event)
    #: The execution's outcome; written once, before ``done`` is set.
    outcome: FencedExecutionInfo = _RUNNING

    def signal(self, outcome: FencedExecutionInfo) -> None:
        self.outcome = outcome
        self.done.set()


class FenceTable:
    """The fences of every session."""

    def __init__(self) -> None:
        self._table: HandleTable[str, Fence] = HandleTable(UNKNOWN, new_handle)

    def count(self, sessions: Collection[str] | None = None) -> int:
        return self._table.count(sessions)

    def release_session(self, session: str) -> None:
        self._table.release_session(session)

    def lookup(self, session: str, handles: list[str]) -> list[Fence]:
        """The fences ``handles`` name; INVALID_ARGUMENT for any that is not ``session``'s."""
        return [self._table.get(session, h) for h in handles]

    def start(
        self,
        session: Session,
        job: ExecutionJob,
        waits: list[Fence],
        duration_ns: int | None = None,
        on_signal: Callable[[], None] | None = None,
    ) -> str:
        """Run ``job`` in a worker once every fence in ``waits`` signalled success, within
        ``duration_ns`` of that (None: no limit); returns the new fence's handle. The job
        is closed by the worker whatever happens; the fence always signals, then
        ``on_signal`` is called. Raises INVALID_ARGUMENT, the job closed and ``on_signal`` not
        called, if the session closed."""
        fence = Fence()
        try:
            with session.adding():
                handle = self._table.add(session.id, fence)
        except HalError:
            job.close()
            raise
        args = (fence, job, waits, duration_ns, on_signal)
        threading.Thread(target=_work, args=args, name="nnhal-fenced", daemon=True).start()
        return handle

    def info(self, session: str, handle: str, wait: bool, timeout: float | None) -> FencedExecutionInfo:
        """getExecutionInfo; with ``wait``, first waits up to ``timeout`` s for the fence."""
        fence = self._table.get(session, handle)
        if wait:
            fence.done.wait(timeout)
        return fence.outcome if fence.done.is_set() else _RUNNING


def _work(
    fence: Fence,
    job: ExecutionJob,
    waits: list[Fence],
    duration_ns: int | None,
    on_signal: Callable[[], None] | None,
) -> None:
    deadline_ns = job.deadline_ns
    t0 = time.perf_counter_ns()
    outcome = FencedExecutionInfo(True, ErrorStatus.GENERAL_FAILURE, "internal error: no outcome")
    try:
        for w in waits:
            remaining = None if deadline_ns is None else max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9)
            if not w.done.wait(remaining):
                raise HalError.of(
                    ErrorStatus.MISSED_DEADLINE_TRANSIENT, "a fence to wait for was not signalled in time"
                )
            if w.outcome.status != ErrorStatus.NONE:
                raise HalError.of(w.outcome.status, "a fence to wait for signalled an error")
        if duration_ns is not None:
            after_fences = time.monotonic_ns() + duration_ns
            job.deadline_ns = after_fences if deadline_ns is None else min(deadline_ns, after_fences)
        t1 = time.perf_counter_ns()
        result = job.run()
        launched = fenced = Timing()
        if job.measure:
            t2 = time.perf_counter_ns()
            launched = Timing(result.timing.time_on_device, (t2 - t0) // 1000)
            fenced = Timing(result.timing.time_on_device, (t2 - t1) // 1000)
        outcome = FencedExecutionInfo(True, result.status, result.message, launched, fenced, result.output_pools)
    except HalError as err:
        outcome = FencedExecutionInfo(True, err.error_status, err.message)
    except Exception as err:  # never leave a fence unsignalled
        if allocation_failed(err):
            outcome = FencedExecutionInfo(
                True, ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, f"the server ran out of memory: {err}"
            )
        else:
            outcome = FencedExecutionInfo(True, ErrorStatus.GENERAL_FAILURE, f"internal error: {err!r}")
    finally:
        job.close()
        try:
            fence.signal(outcome)
        finally:
            if on_signal is not None:
                on_signal()

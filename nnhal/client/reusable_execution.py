"""ReusableExecution: an AIDL IExecution — one prepared model, one request, many runs.

Made by ``PreparedModel.create_reusable_execution``: the device validates the request
once; ``compute`` runs it (``executeSynchronously``) and ``execute_fenced`` launches it
behind sync fences. One run at a time on the device (callers wait their turn; a fenced
run holds the object until its fence signals). Runs
of a request built from numpy inputs decode their outputs (``outcome.outputs``).
Released explicitly (``release``, ``with``), on garbage collection, or with the session.
The calls are :mod:`nnhal.client.remote.aidl`'s; :func:`decoded` is shared with the
asyncio IExecution.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

from nnhal.client.aidl_burst import discard
from nnhal.client.fenced import FencedExecution
from nnhal.client.outcome import ExecutionOutcome, outcome_of
from nnhal.client.release import Releasable
from nnhal.client.remote import RemoteSession, aidl
from nnhal.client.remote.aidl import Result
from nnhal.core.aidl_types import ExecutionConfig
from nnhal.core.types import ExecutionResult, Request

Decoder = Callable[[ExecutionResult], ExecutionOutcome]


def decoded(decode: Decoder | None) -> Callable[[Result], ExecutionOutcome]:
    """A run's (result, AIDL Timing) as its outcome, outputs decoded by ``decode`` if any."""

    def convert(answer: Result) -> ExecutionOutcome:
        result, timing = answer
        outcome = decode(result) if decode is not None else ExecutionOutcome.of(result)
        outcome.timing_ns = timing
        return outcome

    return convert


class ReusableExecution(Releasable):
    """A remote IExecution. Thread-safe."""

    def __init__(self, remote: RemoteSession, handle: str, decode: Decoder | None) -> None:
        self._remote = remote
        self.handle = handle
        self._convert = decoded(decode)
        self._finalizer = weakref.finalize(self, discard, weakref.ref(remote), "execution", handle)

    @classmethod
    def create(
        cls,
        remote: RemoteSession,
        prepared: str,
        request: Request,
        config: ExecutionConfig,
        decode: Decoder | None,
    ) -> ReusableExecution:
        """createReusableExecution; raises the HalError the device refused it with."""
        return cls(
            remote, remote.run(aidl.create_reusable_execution(remote.session_id, prepared, request, config)), decode
        )

    def compute(self, *, timeout: float | None = None, deadline_at: float | None = None) -> ExecutionOutcome:
        """IExecution::executeSynchronously; the status (transport failures included) is in
        the outcome, with ``timing_ns`` (AIDL Timing) and decoded ``outputs`` for numpy requests."""
        call = aidl.execution_run(self._remote.session_id, self.handle, timeout, deadline_at)
        return self._remote.run(outcome_of(call, self._convert))

    def execute_fenced(
        self,
        *,
        wait_for: Sequence[FencedExecution] = (),
        timeout: float | None = None,
        deadline_at: float | None = None,
        duration_ns: int | None = None,
    ) -> FencedExecution:
        """IExecution::executeFenced: runs once the ``wait_for`` fences signalled, within
        ``duration_ns`` of that (MISSED_DEADLINE_* past it); raises the launch error. The
        object is busy until the fence signals (another run waits for it)."""
        fences = [f.sync_fence for f in wait_for]
        call = aidl.execution_fenced(self._remote.session_id, self.handle, fences, timeout, deadline_at, duration_ns)
        sync_fence, callback = self._remote.run(call)
        return FencedExecution(self._remote, sync_fence, callback, aidl=True)

    def release(self) -> None:
        """Release the server's object now (idempotent). Later runs: INVALID_ARGUMENT."""
        if self._finalizer.detach() is None:
            return
        self._remote.run(aidl.release(self._remote.session_id, "execution", self.handle))

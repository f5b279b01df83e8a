"""ReusableExecution: an AIDL IExecution — one prepared model, one request, many runs.

Made by ``PreparedModel.create_reusable_execution``: the device validates the request
once; ``compute`` runs it (``executeSynchronously``) and ``execute_fenced`` launches it
behind sync fences. One run at a time on the device (callers wait their turn; a fenced
run holds the object until its fence signals). Runs
of a request built from numpy inputs decode their outputs (``outcome.outputs``).
Released explicitly (``release``, ``with``), on garbage collection, or with the session.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

from nnhal.client.fenced import FencedExecution
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote import RemoteSession
from nnhal.client.remote.aidl import AidlCalls
from nnhal.core.aidl_types import ExecutionConfig
from nnhal.core.errors import DeadObject, HalError
from nnhal.core.types import ExecutionResult, Request

Decoder = Callable[[ExecutionResult], ExecutionOutcome]


class ReusableExecution:
    """A remote IExecution. Thread-safe."""

    def __init__(self, remote: RemoteSession, handle: str, decode: Decoder | None) -> None:
        self._remote = remote
        self._calls = AidlCalls(remote)
        self.handle = handle
        self._decode = decode
        self._finalizer = weakref.finalize(self, AidlCalls.discard, self._calls, "execution", handle)

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
        return cls(remote, AidlCalls(remote).create_reusable_execution(prepared, request, config), decode)

    def compute(self, *, timeout: float | None = None, deadline_at: float | None = None) -> ExecutionOutcome:
        """IExecution::executeSynchronously; the status (transport failures included) is in
        the outcome, with ``timing_ns`` (AIDL Timing) and decoded ``outputs`` for numpy requests."""
        try:
            result, timing = self._calls.execution_run(self.handle, timeout, deadline_at)
        except HalError as err:
            return ExecutionOutcome(err.error_status, err.message)
        outcome = self._decode(result) if self._decode is not None else ExecutionOutcome.of(result)
        outcome.timing_ns = timing
        return outcome

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
        sync_fence, callback = self._calls.execution_fenced(self.handle, fences, timeout, deadline_at, duration_ns)
        return FencedExecution(self._remote, sync_fence, callback, aidl=True)

    def release(self) -> None:
        """Release the server's object now (idempotent). Later runs: INVALID_ARGUMENT."""
        if self._finalizer.detach() is None:
            return
        self._calls.release("execution", self.handle)

    def __enter__(self) -> ReusableExecution:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.release()
        except DeadObject:
            pass

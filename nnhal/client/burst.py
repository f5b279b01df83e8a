"""Burst: the execution burst of a prepared model (``configureExecutionBurst``).

Requests and results travel on one bidirectional stream, in order; the stream
lives until ``close``. Thread-safe (one execution at a time).
"""

from __future__ import annotations

from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote import ExecutionOptions, RemoteSession
from nnhal.core.types import Request


class Burst:
    """An execution burst of one prepared model. Close it, or use ``with``."""

    def __init__(self, remote: RemoteSession, handle: str) -> None:
        self._remote = remote
        self._handle = handle
        self._stream = remote.open_burst()

    def execute(self, request: Request, *, measure: bool = False, timeout: float | None = None) -> ExecutionOutcome:
        """One execution; the status (transport failures included) is in the outcome.
        Raises DEAD_OBJECT at once when the server is known dead."""
        options = ExecutionOptions(measure=measure, timeout=timeout)
        return ExecutionOutcome.of(self._remote.burst_execute(self._stream, self._handle, request, options))

    def close(self) -> None:
        self._remote.close_burst(self._stream)

    def __enter__(self) -> Burst:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

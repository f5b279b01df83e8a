"""Burst: the execution burst of a prepared model (``configureExecutionBurst``).

Two transports, one behaviour (same statuses, same death handling):

- the same-host fast path (DESIGN §2): requests and results in shared-memory
  rings with a doorbell (:mod:`nnhal.client.remote.fastpath`), used when the
  server offers it to this client (same host, a shared-memory directory);
- a bidirectional gRPC stream, in order, which the burst also opens (at the
  first execution that needs it) for a request or answer too large for the
  rings, and uses for everything when the fast path is refused or not asked for.

``fast``: None (default) takes the fast path when offered, silently falling back
to gRPC; True requires it (the refusal's HalError is raised); False uses gRPC
only. The burst lives until ``close``. Thread-safe (one execution at a time).
"""

from __future__ import annotations

import logging
import threading

from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote import BurstStream, ExecutionOptions, FastBurstLink, RemoteSession
from nnhal.core.errors import HalError
from nnhal.core.types import Request

log = logging.getLogger(__name__)

#: The options of an execution that asks for nothing (one shared value: options are frozen).
_PLAIN = ExecutionOptions()


class Burst:
    """An execution burst of one prepared model. Close it, or use ``with``."""

    def __init__(self, remote: RemoteSession, handle: str, *, fast: bool | None = None, ring_bytes: int = 0) -> None:
        """``ring_bytes``: the size asked for each fast-path ring (0: the server's default)."""
        self._remote = remote
        self._handle = handle
        self._lock = threading.Lock()
        self._fast: FastBurstLink | None = None
        self._stream: BurstStream | None = None
        if fast or (fast is None and remote.shm_dir):
            try:
                self._fast = FastBurstLink.open(remote, handle, ring_bytes)
            except HalError as err:
                if fast:
                    raise
                log.debug("no fast path for this burst (%s); using the gRPC stream", err.message)
        if self._fast is None:
            self._stream = remote.open_burst()

    @property
    def fast(self) -> bool:
        """Whether executions that fit the rings take the same-host fast path."""
        return self._fast is not None

    def _grpc_stream(self) -> BurstStream:
        with self._lock:
            if self._stream is None:
                self._stream = self._remote.open_burst()
            return self._stream

    def execute(self, request: Request, *, measure: bool = False, timeout: float | None = None) -> ExecutionOutcome:
        """One execution; the status (transport failures included) is in the outcome.
        Raises DEAD_OBJECT at once when the server is known dead."""
        options = _PLAIN if not measure and timeout is None else ExecutionOptions(measure=measure, timeout=timeout)
        if self._fast is not None:
            result = self._fast.execute(request, options)
            if result is not None:
                return ExecutionOutcome.of(result)
        return ExecutionOutcome.of(self._remote.burst_execute(self._grpc_stream(), self._handle, request, options))

    def close(self) -> None:
        if self._fast is not None:
            self._fast.close()
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            self._remote.close_burst(stream)

    def __enter__(self) -> Burst:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""AidlBurst: an AIDL IBurst — executions of one prepared model that cache memories by token.

Each execution names a memory identifier token per request pool (>= 0; -1 for none).
The first time a token travels its pool is sent and the device caches it; later
executions naming the token with the same pool send nothing for it (an equal pool
object: the same shared region, or inline bytes that did not change), so a region or
a constant input crosses the wire once. A different pool under a token is sent again
and replaces the cached one. ``release_memory`` (IBurst::releaseMemoryResource) makes
the device forget a token; this client then sends the pool again if it is used again.
After a failed execution the tokens it named are sent again next time (the device
may not have cached them). One execution at a time (the device serialises them).
Released explicitly (``release``, ``with``), on garbage collection, or with the session.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote import RemoteSession
from nnhal.client.remote.aidl import AidlCalls
from nnhal.core.aidl_types import DEFAULT_EXECUTION_CONFIG, UNAVAILABLE, ExecutionConfig
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, HalError
from nnhal.core.types import MemoryPool, Request


class AidlBurst:
    """A remote IBurst with a client-side record of the memories the device holds. Thread-safe."""

    def __init__(self, remote: RemoteSession, handle: str) -> None:
        self._calls = AidlCalls(remote)
        self.handle = handle
        self._lock = threading.Lock()
        #: Token -> the pool the device holds for it.
        self._sent: dict[int, MemoryPool] = {}
        self._finalizer = weakref.finalize(self, AidlCalls.discard, self._calls, "burst", handle)

    @classmethod
    def configure(cls, remote: RemoteSession, prepared: str) -> AidlBurst:
        """AIDL IPreparedModel::configureExecutionBurst; raises its HalError."""
        return cls(remote, AidlCalls(remote).configure_burst(prepared))

    def execute(
        self,
        request: Request,
        tokens: Sequence[int] | None = None,
        *,
        config: ExecutionConfig = DEFAULT_EXECUTION_CONFIG,
        timeout: float | None = None,
        send: Sequence[bool] | None = None,
    ) -> ExecutionOutcome:
        """IBurst::executeSynchronously (``executeSynchronouslyWithConfig`` when ``config`` has
        hints). ``tokens``: one per pool (default: none, -1). ``send`` overrides which pools
        travel (tests of the protocol); by default those the device does not hold yet."""
        ids = [UNAVAILABLE] * len(request.pools) if tokens is None else list(tokens)
        with self._lock:
            if send is None:
                flags = tuple(t < 0 or self._sent.get(t) != p for p, t in zip(request.pools, ids))
                flags += (True,) * (len(request.pools) - len(flags))
            else:
                flags = tuple(send)
            try:
                result, timing = self._calls.burst_execute(self.handle, request, flags, ids, config, timeout, None)
            except HalError as err:
                result, timing = None, None
                outcome = ExecutionOutcome(err.error_status, err.message)
            if result is not None and result.status in (ErrorStatus.NONE, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE):
                self._sent.update({t: p for p, t in zip(request.pools, ids) if t >= 0})
            else:
                for t in ids:
                    self._sent.pop(t, None)
        if result is None:
            return outcome
        return ExecutionOutcome.of(result, timing)

    def release_memory(self, token: int) -> None:
        """IBurst::releaseMemoryResource: the device forgets ``token``'s memory. Raises its HalError."""
        with self._lock:
            self._sent.pop(token, None)
        self._calls.release_memory(self.handle, token)

    def release(self) -> None:
        """Release the server's burst and its cached memories now (idempotent)."""
        if self._finalizer.detach() is None:
            return
        self._calls.release("burst", self.handle)

    def __enter__(self) -> AidlBurst:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.release()
        except DeadObject:
            pass

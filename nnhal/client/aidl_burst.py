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
The record (:class:`MemoryTokens`) is shared with the asyncio IBurst.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence

from nnhal.client.outcome import ExecutionOutcome, outcome_of
from nnhal.client.release import Releasable
from nnhal.client.remote import RemoteSession, aidl
from nnhal.client.remote.aidl import Result
from nnhal.client.remote.calls import Call
from nnhal.client.remote.transport import GC_RELEASE_TIMEOUT
from nnhal.core.aidl_types import DEFAULT_EXECUTION_CONFIG, UNAVAILABLE, ExecutionConfig
from nnhal.core.enums import ErrorStatus
from nnhal.core.types import MemoryPool, Request


class MemoryTokens:
    """The client's record of the memories a device's IBurst holds, by token. Not thread-safe
    (its burst serialises executions)."""

    def __init__(self) -> None:
        #: Token -> the pool the device holds for it.
        self.sent: dict[int, MemoryPool] = {}

    def execution(
        self,
        session: str,
        burst: str,
        request: Request,
        tokens: Sequence[int] | None,
        config: ExecutionConfig,
        timeout: float | None,
        send: Sequence[bool] | None,
    ) -> Call[ExecutionOutcome]:
        """One IBurst execution sending only the pools the device does not hold (``send``
        overrides), the record updated by its answer; every status in the outcome."""
        ids = [UNAVAILABLE] * len(request.pools) if tokens is None else list(tokens)
        if send is None:
            flags = tuple(t < 0 or self.sent.get(t) != p for p, t in zip(request.pools, ids))
            flags += (True,) * (len(request.pools) - len(flags))
        else:
            flags = tuple(send)
        call = aidl.burst_execute(session, burst, request, flags, ids, config, timeout, None)
        return (yield from outcome_of(self._settled(call, request, ids), ExecutionOutcome.of_timed))

    def _settled(self, call: Call[Result], request: Request, ids: list[int]) -> Call[Result]:
        try:
            result, timing = yield from call
        except BaseException:
            self._forget(ids)
            raise
        if result.status in (ErrorStatus.NONE, ErrorStatus.OUTPUT_INSUFFICIENT_SIZE):
            self.sent.update({t: p for p, t in zip(request.pools, ids) if t >= 0})
        else:
            self._forget(ids)
        return result, timing

    def _forget(self, ids: Sequence[int]) -> None:
        for t in ids:
            self.sent.pop(t, None)

    def forget(self, token: int) -> None:
        self.sent.pop(token, None)


def discard(remote_ref: weakref.ref[RemoteSession], kind: str, handle: str) -> None:
    """Best-effort release of an AIDL object on garbage collection (``kind``: its service)."""
    remote = remote_ref()
    if remote is not None:
        remote.discard(aidl.release(remote.session_id, kind, handle, GC_RELEASE_TIMEOUT))


class AidlBurst(Releasable):
    """A remote IBurst with a client-side record of the memories the device holds. Thread-safe."""

    def __init__(self, remote: RemoteSession, handle: str) -> None:
        self._remote = remote
        self.handle = handle
        self._lock = threading.Lock()
        self._tokens = MemoryTokens()
        self._finalizer = weakref.finalize(self, discard, weakref.ref(remote), "burst", handle)

    @classmethod
    def configure(cls, remote: RemoteSession, prepared: str) -> AidlBurst:
        """AIDL IPreparedModel::configureExecutionBurst; raises its HalError."""
        return cls(remote, remote.run(aidl.configure_burst(remote.session_id, prepared)))

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
        with self._lock:
            call = self._tokens.execution(self._remote.session_id, self.handle, request, tokens, config, timeout, send)
            return self._remote.run(call)

    def release_memory(self, token: int) -> None:
        """IBurst::releaseMemoryResource: the device forgets ``token``'s memory. Raises its HalError."""
        with self._lock:
            self._tokens.forget(token)
        self._remote.run(aidl.release_memory(self._remote.session_id, self.handle, token))

    def release(self) -> None:
        """Release the server's burst and its cached memories now (idempotent)."""
        if self._finalizer.detach() is None:
            return
        self._remote.run(aidl.release(self._remote.session_id, "burst", self.handle))

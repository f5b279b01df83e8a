"""AIDL server objects: reusable executions (IExecution) and bursts (IBurst).

Both are session-owned like every object (``handles.HandleTable``): named by
unguessable handles, INVALID_ARGUMENT from any other session, released with the
session (``release_session``) or explicitly. Each runs at most one execution at a
time (the AIDL rule), serialising callers on its lock.

- ``ReusableExecution``: a prepared model's handle with one fixed Request and
  ExecutionConfig, validated when created; every run re-binds the request's pools
  (so shared regions are read afresh) and launches through the driver as any
  execution does (scheduler, budget, deadlines, drain).
- ``BurstObject``: a prepared model's handle and the memories cached by memory
  identifier token. A pool sent with a token replaces what the token held; a pool
  sent empty uses the cached one, INVALID_ARGUMENT when there is none (never sent,
  or released by ``release_memory``). Cached inline bytes count against the client's
  memory quota until released (``charge``: the session's budget account).

Lock order: an object's lock, then the handle tables' leaf locks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from nnhal.core.aidl_types import UNAVAILABLE
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import InlinePool, MemoryPool, Request
from nnhal.server.handles import HandleTable, new_handle
from nnhal.server.session import Session

UNKNOWN_EXECUTION = "unknown reusable execution handle for this session"
UNKNOWN_BURST = "unknown burst handle for this session"
#: The kind cached burst memories are charged as.
BURST_CACHE = "burst memory cache"


def _cost(pool: MemoryPool) -> int:
    return len(pool.data) if isinstance(pool, InlinePool) else 0


@dataclass
class ReusableExecution:
    """One prepared model, one request, one configuration: run many times."""

    prepared: str
    request: Request
    measure: bool
    #: In the driver's form (0: the default).
    loop_timeout_ns: int
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class BurstObject:
    """A burst of one prepared model and its memory cache by identifier token."""

    prepared: str
    #: Gives back (negative) or charges (positive) bytes of the owner's quota.
    charge: Callable[[int], None]
    lock: threading.Lock = field(default_factory=threading.Lock)
    memories: dict[int, MemoryPool] = field(default_factory=dict)

    def resolve(self, pools: Sequence[MemoryPool | None], tokens: Sequence[int]) -> tuple[MemoryPool, ...]:
        """The request's pools with the cached ones filled in; caches pools sent with a token.
        Call holding ``lock``. INVALID_ARGUMENT for a bad token list or a missing memory."""
        if len(tokens) != len(pools):
            raise InvalidArgument(
                f"memoryIdentifierTokens has {len(tokens)} entries; the request has {len(pools)} pools"
            )
        resolved: list[MemoryPool] = []
        for k, (pool, token) in enumerate(zip(pools, tokens)):
            if token < UNAVAILABLE:
                raise InvalidArgument(f"memoryIdentifierTokens[{k}] is {token}: tokens are >= 0, or -1 for none")
            if pool is None:
                if token == UNAVAILABLE:
                    raise InvalidArgument(f"request pool {k}: memory pool has no content and no identifier token")
                cached = self.memories.get(token)
                if cached is None:
                    raise InvalidArgument(
                        f"request pool {k}: memory identifier token {token} holds no memory in this burst "
                        "(never sent, or released); send the pool with its token"
                    )
                resolved.append(cached)
                continue
            if token != UNAVAILABLE:
                self._cache(token, pool)
            resolved.append(pool)
        return tuple(resolved)

    def _cache(self, token: int, pool: MemoryPool) -> None:
        old = self.memories.get(token)
        if old == pool:
            return
        self.charge(_cost(pool) - (0 if old is None else _cost(old)))
        self.memories[token] = pool

    def release_memory(self, token: int) -> None:
        """IBurst::releaseMemoryResource: forget ``token``'s memory (nothing cached: a no-op)."""
        if token < UNAVAILABLE:
            raise InvalidArgument(f"memoryIdentifierToken is {token}: tokens are >= 0, or -1 for none")
        with self.lock:
            pool = self.memories.pop(token, None)
        if pool is not None:
            self.charge(-_cost(pool))

    def release(self) -> None:
        with self.lock:
            freed = sum(_cost(p) for p in self.memories.values())
            self.memories.clear()
        if freed:
            self.charge(-freed)


class AidlObjects:
    """The reusable executions and bursts of every session."""

    def __init__(self) -> None:
        self.executions: HandleTable[str, ReusableExecution] = HandleTable(UNKNOWN_EXECUTION, new_handle)
        self.bursts: HandleTable[str, BurstObject] = HandleTable(UNKNOWN_BURST, new_handle)

    def add_execution(self, session: Session, execution: ReusableExecution) -> str:
        with session.adding():
            return self.executions.add(session.id, execution)

    def add_burst(self, session: Session, burst: BurstObject) -> str:
        with session.adding():
            return self.bursts.add(session.id, burst)

    def release_execution(self, session: Session, handle: str) -> None:
        self.executions.pop(session.id, handle)

    def release_burst(self, session: Session, handle: str) -> None:
        self.bursts.pop(session.id, handle).release()

    def release_session(self, sid: str) -> None:
        self.executions.release_session(sid)
        for burst in self.bursts.release_session(sid):
            burst.release()

    def count(self) -> int:
        return self.executions.count() + self.bursts.count()

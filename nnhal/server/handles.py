"""Session-owned server objects named by unguessable handles (DESIGN.md §3).

One ``HandleTable`` per kind of object (prepared models, driver-managed buffers
by handle and by token, fences). Every entry belongs to the session that added
it. A lookup of another session's entry fails exactly like a lookup of one that
never existed or was released: INVALID_ARGUMENT with the table's one message, so
a handle never reveals whether an object exists.

Thread-safe (a lookup is a single dict read and takes no lock; changes take the
table's lock). The table's lock is a leaf: nothing else is acquired while holding
it, so callers may hold a session's lock while adding (the session checks that
it is still open, then adds, so ``release_session`` after closing misses nothing).
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Collection, Hashable
from typing import Generic, TypeVar

from nnhal.core.errors import InvalidArgument

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def new_handle() -> str:
    """128 random bits as hex: the name of a prepared model, buffer or fence."""
    return secrets.token_hex(16)


def new_token() -> int:
    """A random positive int32: a driver-managed buffer's token (a Request pool names it)."""
    return secrets.randbelow(2**31 - 1) + 1


class HandleTable(Generic[K, V]):
    """Objects by handle, each owned by one session (a session id)."""

    def __init__(self, unknown: str, new_key: Callable[[], K]) -> None:
        """``unknown``: the INVALID_ARGUMENT message of every failed lookup; ``new_key``
        draws a fresh unguessable key (redrawn on the rare collision)."""
        self._unknown = unknown
        self._new_key = new_key
        self._lock = threading.Lock()
        self._entries: dict[K, tuple[str, V]] = {}
        self._by_owner: dict[str, set[K]] = {}

    def add(self, owner: str, value: V) -> K:
        """Store ``value`` for session ``owner`` under a new key; returns the key."""
        with self._lock:
            key = self._new_key()
            while key in self._entries:
                key = self._new_key()
            self._entries[key] = (owner, value)
            self._by_owner.setdefault(owner, set()).add(key)
        return key

    def get(self, owner: str, key: K) -> V:
        """The value of ``owner``'s ``key``; INVALID_ARGUMENT when there is none."""
        # One dict read, atomic by itself (every execution looks its model up): no lock.
        entry = self._entries.get(key)
        if entry is None or entry[0] != owner:
            raise InvalidArgument(self._unknown)
        return entry[1]

    def pop(self, owner: str, key: K) -> V:
        """Remove ``owner``'s ``key`` and return its value; INVALID_ARGUMENT when there is none."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != owner:
                raise InvalidArgument(self._unknown)
            del self._entries[key]
            self._forget_owner_key(owner, key)
        return entry[1]

    def release_session(self, owner: str) -> list[V]:
        """Remove every entry of ``owner``; returns their values (for the caller to close)."""
        with self._lock:
            keys = self._by_owner.pop(owner, set())
            return [self._entries.pop(key)[1] for key in keys]

    def values(self, owners: Collection[str] | None = None) -> list[V]:
        """A snapshot of the values (only those of ``owners`` when given)."""
        with self._lock:
            if owners is None:
                return [value for _owner, value in self._entries.values()]
            return [self._entries[k][1] for owner in owners for k in self._by_owner.get(owner, ())]

    def count(self, owners: Collection[str] | None = None) -> int:
        """How many entries there are (only those of ``owners`` when given)."""
        with self._lock:
            if owners is None:
                return len(self._entries)
            return sum(len(self._by_owner.get(owner, ())) for owner in owners)

    def _forget_owner_key(self, owner: str, key: K) -> None:
        keys = self._by_owner[owner]
        keys.discard(key)
        if not keys:
            del self._by_owner[owner]

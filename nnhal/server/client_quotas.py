"""ClientQuotas: the memory budget with a per-client limit across a client's sessions.

A session opened with a verified mTLS identity (``Session.client_key``) belongs to that
client; the per-client limit then covers all of its sessions together (DESIGN.md §12).
Sessions without a client keep the base budget's per-session check.
"""

from __future__ import annotations

import threading

from nnhal.core.errors import ResourceExhaustedTransient
from nnhal.server.budget import MemoryBudget


class ClientQuotas(MemoryBudget):
    """A MemoryBudget whose per-client limit covers every session of one verified identity
    together (sessions opened with ``client`` None keep the per-session check). Only
    kept with a per-client limit; sessions without a client pay no extra lock. A driver
    without a per-client limit keeps a plain ``MemoryBudget`` (``Driver``): its charges then
    pass through no layer of this class.
    Lock order: this class's lock, then the base budget's (a leaf)."""

    def __init__(self, per_client: int = 0, total: int = 0) -> None:
        super().__init__(per_client, total)
        self._clients_lock = threading.Lock()
        self._client_of: dict[str, str] = {}  # session -> client, sessions with a client only
        self._client_used: dict[str, int] = {}
        self._client_sessions: dict[str, int] = {}

    def open_client_session(self, session: str, client: str | None) -> None:
        """Open ``session``'s account, counted with its ``client``'s other sessions (if any)."""
        self.open_session(session)
        if client is None or not self.per_client:
            return
        with self._clients_lock:
            self._client_of[session] = client
            self._client_used.setdefault(client, 0)
            self._client_sessions[client] = self._client_sessions.get(client, 0) + 1

    def close_session(self, session: str) -> int:
        if session not in self._client_of:
            return super().close_session(session)
        with self._clients_lock:
            client = self._client_of.pop(session, None)
            freed = super().close_session(session)
            if client is not None:
                left = self._client_sessions.pop(client) - 1
                used = self._client_used.pop(client) - freed
                if left:
                    self._client_sessions[client], self._client_used[client] = left, used
        return freed

    def charge(self, session: str, nbytes: int, what: str = "model constants") -> None:
        if session not in self._client_of:
            return super().charge(session, nbytes, what)
        with self._clients_lock:
            client = self._client_of.get(session)
            if client is None:  # closed meanwhile: the base says so
                return super().charge(session, nbytes, what)
            used = self._client_used[client]
            if nbytes <= self.per_client and used + nbytes > self.per_client:
                raise ResourceExhaustedTransient(
                    f"{what} need {nbytes} bytes; client {client.removeprefix('x509:')!r} already uses {used} "
                    f"of its {self.per_client} across its sessions; release prepared models or buffers and retry"
                )
            super().charge(session, nbytes, what)
            self._client_used[client] = used + nbytes

    def uncharge(self, session: str, nbytes: int, what: str = "model constants", freed: int | None = None) -> None:
        if session not in self._client_of:
            return super().uncharge(session, nbytes, what, freed)
        with self._clients_lock:
            client = self._client_of.get(session)
            super().uncharge(session, nbytes, what, freed)
            if client is not None:
                self._client_used[client] -= nbytes

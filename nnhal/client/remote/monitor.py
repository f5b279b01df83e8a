"""The session's death monitor, which tells a drain from a crash (DESIGN §4, §12)."""

from __future__ import annotations

import grpc

from nnhal.client.death import DeathMonitor

#: How the end of a server that announced its drain is reported.
DRAINING = "the server is draining (shutting down)"


class SessionMonitor(DeathMonitor):
    """The session's death monitor: once the server announced a drain, its end is
    reported as :data:`DRAINING` (with the signal that showed it) rather than a death."""

    def __init__(self, channel: grpc.Channel, what: str) -> None:
        self._draining = False  # before the base subscribes: a state change may arrive at once
        super().__init__(channel, what)

    @property
    def draining(self) -> bool:
        return self._draining

    def mark_draining(self) -> None:
        self._draining = True

    def declare_dead(self, reason: str) -> None:
        super().declare_dead(f"{DRAINING} ({reason})" if self._draining else reason)

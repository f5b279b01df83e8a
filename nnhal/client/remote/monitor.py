"""The session's death monitor, which tells a drain from a crash (DESIGN §4, §12).

A draining server ends every launched job with a notify on the job's own stream before it
goes away, but the client reads those streams and the session stream on different threads:
the session stream's end may be seen before a notify that already arrived is read. So once
the server announced its drain, its end releases the waiters only after
:data:`DRAIN_NOTIFY_GRACE_S` (at once for those whose own stream ends first, with its
status or, if it broke, DEAD_OBJECT): a waiter gets the drain status the server sent
(DEVICE_UNAVAILABLE, or its result), not DEAD_OBJECT. Later calls fail at once either way."""

from __future__ import annotations

import grpc

from nnhal.client.death import DeathMonitor

#: How long, after a draining server's end, its launched jobs' streams have to deliver the
#: notify the server sent (reading one already received takes milliseconds; this allows for
#: a heavily loaded client).
DRAIN_NOTIFY_GRACE_S = 10.0

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

    def declare_dead(self, reason: str, grace: float = 0.0) -> None:
        if self._draining:
            super().declare_dead(f"{DRAINING} ({reason})", max(grace, DRAIN_NOTIFY_GRACE_S))
        else:
            super().declare_dead(reason, grace)

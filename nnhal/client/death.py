"""Death handling: release every waiter with DEAD_OBJECT when the server dies.

Signals watched (any one declares death, once):
- the channel's connectivity leaving READY after having been READY (a killed
  server shows up as READY -> IDLE within milliseconds; keepalive failure of a
  frozen server as READY -> TRANSIENT_FAILURE/IDLE);
- the session stream ending without the client having closed it.

A frozen (SIGSTOP) server is noticed through keepalive pings within
``nnhal.client.remote.DEATH_DETECTION_BOUND_S``. After death every registered waiter is
notified with DEAD_OBJECT at once and later calls fail with DEAD_OBJECT
without touching the network.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable

import grpc

from nnhal.client.callbacks import Callback
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject

log = logging.getLogger(__name__)


class DeathMonitor:
    """Watches one channel; ``declare_dead`` (or the channel leaving READY) fails every
    registered waiter with DEAD_OBJECT once. Thread-safe: one lock guards the waiters,
    the hooks and the state, and no callback runs under it."""

    def __init__(self, channel: grpc.Channel, what: str) -> None:
        self._what = what
        self._lock = threading.Lock()
        self._waiters: set[Callback] = set()  # type: ignore[type-arg]
        self._hooks: list[Callable[[str], None]] = []
        self._dead = threading.Event()
        #: ``_dead`` as a plain flag, set with it: ``check`` runs before every call.
        self._known_dead = False
        self._reason = ""
        self._was_ready = False
        self._closing = False
        self._channel = channel
        channel.subscribe(self._on_state, try_to_connect=True)

    # -- state --------------------------------------------------------------
    @property
    def dead(self) -> bool:
        return self._dead.is_set()

    @property
    def reason(self) -> str:
        return self._reason

    def wait_dead(self, timeout: float | None) -> bool:
        return self._dead.wait(timeout)

    def check(self) -> None:
        """Raise DEAD_OBJECT if the server is known dead."""
        if self._known_dead:
            raise DeadObject(f"{self._what}: {self._reason}")

    def mark_ready(self) -> None:
        # Only the connectivity callback may call this: its notifications arrive
        # in order on one thread, and an initial IDLE may be delivered late.
        with self._lock:
            self._was_ready = True

    def closing(self) -> None:
        """The client is closing on purpose: what follows is not a death."""
        with self._lock:
            self._closing = True

    # -- waiters ------------------------------------------------------------
    def register(self, cb: Callback) -> bool:  # type: ignore[type-arg]
        """Track ``cb``; if the server is already dead it is notified now (returns False)."""
        with self._lock:
            if not self._dead.is_set():
                self._waiters.add(cb)
                cb.add_done_callback(self._forget)
                return True
        cb.notify(ErrorStatus.DEAD_OBJECT, None, f"{self._what}: {self._reason}")
        return False

    def _forget(self, cb: Callback) -> None:  # type: ignore[type-arg]
        with self._lock:
            self._waiters.discard(cb)

    def on_death(self, hook: Callable[[str], None]) -> None:
        with self._lock:
            if not self._dead.is_set():
                self._hooks.append(hook)
                return
        hook(self._reason)

    # -- signals -------------------------------------------------------------
    def _on_state(self, state: grpc.ChannelConnectivity) -> None:
        if state == grpc.ChannelConnectivity.READY:
            self.mark_ready()
            return
        with self._lock:
            was_ready, closing = self._was_ready, self._closing
        if state == grpc.ChannelConnectivity.SHUTDOWN and closing:
            return
        if was_ready:
            self.declare_dead(f"the connection left READY ({state.name})")

    def declare_dead(self, reason: str, grace: float = 0.0) -> None:
        """Mark the server dead (later calls fail at once) and release every waiter with
        DEAD_OBJECT — after up to ``grace`` seconds, on a daemon thread, when ``grace`` > 0:
        waiters whose own stream delivers their end meanwhile keep that end (a drain)."""
        with self._lock:
            if self._dead.is_set() or self._closing:
                return
            self._reason = reason
            self._known_dead = True
            self._dead.set()
            waiters = list(self._waiters)
            self._waiters.clear()
            hooks = list(self._hooks)
        # "gone", not "died": a draining server (a planned shutdown) ends up here too.
        if waiters:
            log.warning("%s is gone: %s; releasing %d waiters", self._what, reason, len(waiters))
        else:
            # Nothing was waiting (e.g. a connect that failed): the caller's own exception says
            # it all, so no warning line of ours on stderr.
            log.debug("%s is gone: %s", self._what, reason)
        message = f"{self._what}: {reason}"
        if grace > 0 and waiters and not sys.is_finalizing():
            threading.Thread(
                target=_release_after, args=(waiters, message, grace), name="nnhal-drain-release", daemon=True
            ).start()
        else:
            _release_after(waiters, message, 0.0)
        for hook in hooks:
            hook(reason)

    def stop(self) -> None:
        self.closing()
        try:
            self._channel.unsubscribe(self._on_state)
        except Exception:  # unsubscribe races with channel close; nothing to undo
            pass

    def stop_and_close(self) -> None:
        """Stop watching, then close the channel (see :func:`close_channel`)."""
        self.stop()
        close_channel(self._channel)


def _release_after(waiters: list[Callback], message: str, grace: float) -> None:  # type: ignore[type-arg]
    """Notify ``waiters`` with DEAD_OBJECT once each is done or ``grace`` seconds passed
    (a waiter already notified keeps its result: a Callback delivers once)."""
    end = time.monotonic() + grace
    for cb in waiters:
        cb.wait(max(0.0, end - time.monotonic()))
        cb.notify(ErrorStatus.DEAD_OBJECT, None, message)


#: grpcio's poller wakes every 0.2 s; ten rounds is plenty even on a loaded machine.
_POLLER_GRACE_S = 2.0


def _poller_running(channel: grpc.Channel) -> bool:
    # grpcio keeps the poller's state on the channel (``_connectivity_state.polling``,
    # grpcio 1.85, pinned); a channel without it (a test double) has no poller.
    state = getattr(channel, "_connectivity_state", None)
    return bool(getattr(state, "polling", False))


def close_channel(channel: grpc.Channel) -> None:
    """Close ``channel`` once gRPC's connectivity poller has let go of it.

    grpcio's poller thread makes one more ``watch_connectivity_state`` round (up to
    0.2 s) after the last unsubscribe (ours, or ``channel_ready_future``'s); a channel
    closed under it makes that thread raise ``ValueError: Cannot monitor channel state:
    Channel closed!``. So the close waits for the poller (bounded), in a daemon thread
    when it must wait, and closing stays immediate for the caller.

    At interpreter shutdown (a session collected then) nothing is done: the process's
    end closes its sockets, and both ways of closing would hang — a new thread never runs
    once the interpreter finalizes (``Thread.start`` waits for it forever), and
    ``channel.close`` waits for gRPC's own threads, frozen by then."""
    if sys.is_finalizing():
        return
    if not _poller_running(channel):
        channel.close()
        return

    def close_after_poller() -> None:
        end = time.monotonic() + _POLLER_GRACE_S
        while _poller_running(channel) and time.monotonic() < end:
            time.sleep(0.01)
        channel.close()

    try:
        threading.Thread(target=close_after_poller, name="nnhal-channel-close", daemon=True).start()
    except RuntimeError:  # "can't create new thread at interpreter shutdown": as above
        pass

"""The fast path's doorbell: pipes that wake the other side of a ring (DESIGN §2).

Waiting blocks at once (no spinning: a pipe's wake-up is synchronous, and a spinning
waiter would delay the peer it shares a core with). Pipes, not an eventfd: they carry
distinct bytes, :data:`RING` (a packet is waiting), :data:`STOP` (wake up and end) and
:data:`EARLY` (a packet will be soon: an answer, :func:`announce`, or a large call), which an
eventfd's counter would merge. (The doorbells compared, with figures:
``docs/same-host.md``.)

Each side holds the read end of its inbox, the write end of the peer's inbox,
and a write end of its own inbox, with which ``stop`` wakes a waiter of its own
side (the burst is closing, or its liveness channel saw the peer die). Write
ends are non-blocking: a pipe full of unread doorbells already wakes its reader,
so a ring that finds it full drops its byte. Waiting is a blocking ``read`` (or an
event loop's reader on the inbox, which then ``take``s what it holds); this module never
polls (a waiter that first watches its ring for a while, the sync client, does that itself
and then takes its doorbell byte here: :meth:`Doorbell.wait` with a timeout of 0 does not
block). :func:`fine_timers` makes a thread's short sleeps end on time, for such a waiter.
Thread-safe: ``stop`` may run on any thread, also after ``close``.
"""

from __future__ import annotations

import math
import os
import select
import sys
import threading
from collections.abc import Callable

RING = b"\x01"
STOP = b"\x00"
#: Rung before a packet is written — by a server before its answer (:func:`announce`), by a
#: client before a large call's packet (``QueueEnds.planned_packet``): wakes the waiter, which
#: then reads the packet only after a :data:`RING` (:attr:`Doorbell.early`), so that its
#: wake-up overlaps the packet's last work.
EARLY = b"\x02"
#: The most one wait reads: a small buffer (the interpreter's own allocator takes it, where a
#: 4 KiB one was allocated and shrunk on every wake-up); bytes beyond it wake the reader again.
_READ_BYTES = 256

#: prctl's PR_SET_TIMERSLACK (linux/prctl.h) and the slack a waiter's timers get (ns).
_PR_SET_TIMERSLACK = 29
_FINE_SLACK_NS = 1000
_thread_state = threading.local()


def fine_timers() -> None:
    """Let this thread's timed sleeps end within about a microsecond of their time (Linux timer
    slack: 50 µs by default, which would round up a sleep of a few tens of µs); idempotent per
    thread, nothing elsewhere. Later timed waits of the thread get the same slack (a few more
    timer interrupts, no other effect)."""
    if getattr(_thread_state, "fine", False):
        return
    _thread_state.fine = True
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_TIMERSLACK, _FINE_SLACK_NS, 0, 0, 0)
        except (OSError, AttributeError):  # no prctl here: sleeps are only later than asked
            pass


class Herald(threading.local):
    """Whom the thread that is answering a same-host call wakes as soon as the answer is near
    (:func:`announce`). One per thread; only the thread's own code uses it."""

    #: The doorbell of the caller whose call the thread answers now (its ``ring``), when its
    #: answer is rung at once (set by the queue server around each packet it answers; None
    #: otherwise).
    caller: Callable[[bytes], None] | None = None
    #: That doorbell, once the call asked to be rung early (``fastpacket.WAKE_EARLY``, :meth:`arm`).
    ring: Callable[[bytes], None] | None = None

    def arm(self) -> None:
        """The call being answered asked to be rung as soon as its answer is near."""
        self.ring = self.caller


#: Each thread's herald.
HERALD = Herald()


def announce() -> None:
    """The answer this thread is computing is near (a compiled graph's library call
    returned; its outputs are still to be copied and the answer written): ring its caller
    now, once, when the call asked for it (:meth:`Herald.arm`), so that the caller's wake-up
    overlaps the answer's last work. The caller, woken with no answer yet, looks for the
    answer's own ring a while before it sleeps again (``nnhal.client.remote.fastpath``).
    Nothing otherwise."""
    herald = HERALD
    ring = herald.ring
    if ring is not None:
        herald.ring = None
        ring(EARLY)


def nonblocking_pipe() -> tuple[int, int]:
    """A close-on-exec pipe whose write end does not block."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    return r, w


class Doorbell:
    """One side's doorbells: ``inbox_r``/``inbox_w`` its own inbox, ``outbox_w`` the peer's.
    Owns the three descriptors (``close``).

    With ``watch_peer``, a wait also ends when the peer closes its inbox (its end of the
    queue: it ended the queue, or its process died), seen as an error on ``outbox_w`` —
    no thread, no message: the kernel reports it. The doorbell is then stopped
    (:attr:`peer_gone`)."""

    def __init__(self, inbox_r: int, inbox_w: int, outbox_w: int, watch_peer: bool = False) -> None:
        self._inbox_r = inbox_r
        self._inbox_w = inbox_w
        self._outbox_w = outbox_w
        self._lock = threading.Lock()  # a leaf: guards the descriptors against close
        self._closed = False
        self._stop_asked = False
        self._stopped = False
        #: True once the peer closed its inbox (``watch_peer``).
        self.peer_gone = False
        #: Whether the last wait read only :data:`EARLY` rings (no :data:`RING`): woken before
        #: the answer was published, which must not be read until a ring follows.
        self.early = False
        self._poll: select.poll | None = None
        self._inbox_poll: select.poll | None = None  # a timed wait's, made at the first
        if watch_peer:
            self._poll = select.poll()
            self._poll.register(inbox_r, select.POLLIN)
            self._poll.register(outbox_w, 0)  # POLLERR is always reported: the read end closed

    @property
    def stopped(self) -> bool:
        """True once a STOP was read (every later ``wait`` returns 0 at once)."""
        return self._stopped

    @property
    def stopping(self) -> bool:
        """True once ``stop`` was called or a STOP read (a waiter watching its ring ends
        there and reads its doorbell, which then returns at once)."""
        return self._stop_asked or self._stopped

    def ring(self, byte: bytes = RING) -> None:
        """Wake the peer: a packet is waiting (:data:`EARLY`: one will be soon). OSError
        (EPIPE) when the peer end is gone."""
        try:
            os.write(self._outbox_w, byte)
        except BlockingIOError:
            pass  # its inbox is full of doorbells already: the reader will wake

    def wait(self, timeout: float | None = None) -> int:
        """Sleep until the peer rings: how many rings arrived (at least 1; an :data:`EARLY` ring
        alone counts as one and sets :attr:`early`), or 0 once ``stop`` was called (or
        ``timeout`` seconds passed; 0 does not block). Rings read with the STOP still count."""
        if self._stopped:
            return 0
        if self._poll is not None:
            # ``max(0.0, timeout)`` as a conditional expression: no builtin's call on every wait.
            ready = self._poll.poll(None if timeout is None else math.ceil(timeout * 1000) if timeout > 0.0 else 0)
            if not ready:
                return 0
            for fd, _ in ready:  # a loop, not a generator: every wait of a small call passes here
                if fd == self._inbox_r:
                    break
            else:  # only the peer's end reported
                self.gone()
                return 0
        elif timeout is not None:
            # poll, not select: a server holding many queues has descriptors past FD_SETSIZE.
            if self._inbox_poll is None:
                self._inbox_poll = select.poll()
                self._inbox_poll.register(self._inbox_r, select.POLLIN)
            if not self._inbox_poll.poll(math.ceil(timeout * 1000) if timeout > 0.0 else 0):
                return 0
        return self._read()  # the inbox is readable now (and not stopped: tested above)

    @property
    def inbox(self) -> int:
        """The descriptor a ring or a STOP makes readable (an event loop's reader watches it)."""
        return self._inbox_r

    @property
    def outbox(self) -> int:
        """The peer's inbox's write end: an event loop's reader on it fires when the peer closed
        its inbox (the error a pipe reports then), never otherwise."""
        return self._outbox_w

    def gone(self) -> None:
        """The peer closed its inbox: stop for good (a waiter on an event loop that saw it)."""
        self.peer_gone = True
        self._stopped = True

    def take(self) -> int:
        """What :meth:`wait` reads, without blocking: for a waiter that an event loop wakes when
        :attr:`inbox` is readable (the asyncio client). Only after it was reported readable:
        the inbox reads block. 0 once stopped (a STOP read now or before)."""
        if self._stopped:
            return 0
        return self._read()

    def _read(self) -> int:
        """``take``'s read, once it is known not stopped: how many rings the inbox held."""
        data = os.read(self._inbox_r, _READ_BYTES)
        # One ring is the usual wake-up: compared whole, not searched.
        if data == RING:
            self.early = False
            if self._stop_asked:
                self._stopped = True
            return 1
        if not data or STOP in data or self._stop_asked:
            self._stopped = True
        rings = data.count(RING)
        self.early = not rings and EARLY in data
        return rings or int(self.early)

    def stop(self) -> None:
        """Wake this side's waiter for good (idempotent, any thread, also after ``close``)."""
        self._stop_asked = True  # seen by a waiter woken by other bytes, should this write not fit
        with self._lock:
            if self._closed:
                return
            try:
                os.write(self._inbox_w, STOP)
            except BlockingIOError:
                pass  # the waiter has bytes to read; it reads the STOP after them

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._inbox_r, self._inbox_w, self._outbox_w):
                os.close(fd)

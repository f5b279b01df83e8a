"""The client's end of a same-host fast burst (DESIGN §2; the server's side is
:mod:`nnhal.server.rpc.fastpath_servicer`).

``FastBurstLink.open`` calls ``openFastBurst``; a refusal raises its HalError (the
caller falls back to the gRPC burst). It then connects to the handover socket
the first event names, presents the token, and receives the queue's
descriptors: the region (whose size, seals and header are checked before it is
mapped — the server cannot shrink it under this mapping either) and the
doorbell pipes.

``execute`` serializes the ExecuteRequest into the request ring, rings, and
sleeps on its doorbell until the result packet arrives; the packet is checked
as untrusted input (:mod:`nnhal.core.fastring`). The answer is read only after a
doorbell byte was: the server rings after each answer it publishes, and the pipe
orders the answer's bytes before the client's reads on any architecture. A numpy call's
compact call asks to be rung early too (``fastpacket.WAKE_EARLY``, while the link waits the
hybrid way and its lookout would look: a core to spare, time to spend): a server whose
library call returned rings ``doorbell.EARLY`` before it copies the
outputs and writes the answer (``doorbell.announce``), so that the client's wake-up — tens
of µs on a virtual machine — overlaps that work; woken so, the client does not read the
ring but looks for the answer's own ring without sleeping (``_await_ring``, at most
:data:`EARLY_LOOK_S`, while its lookout allows; else it sleeps again until that ring).

The hybrid wait (on by default, :attr:`FastBurstLink.HYBRID_WAIT`; the Linux block layer's
hybrid polling is the model) is for a machine with a core to spare — its watch runs only
while the link's :class:`~nnhal.core.lookout.Lookout` allows (two CPUs allowed, the
machine not busy, a share of the elapsed time), else the link sleeps on its doorbell at
once: the link keeps,
per kind of call (prepared model and request layout, or method form), a running
estimate of how long the server takes to answer; below :data:`POLL_MAX_S` it sleeps
on a fine timer until a little before that time, then watches the result ring's head,
yielding its core between looks, for a bounded time (:data:`POLL_WINDOW_S` past the
expected time, :data:`POLL_LOOPS` looks), and only then sleeps on the doorbell. Once
it sees the answer published it takes the doorbell byte (a read that finds it there,
or waits the instant until the server writes it) and then the answer, as above: the
server always rings, so no wake-up can be lost, but it wakes nobody — the waiter is
not asleep on the pipe — so its ring does not put the client on its core. Every
:data:`PROBE_EVERY` calls of a kind one waits the other way, and the watch is kept
only while its calls wait clearly less (:data:`WATCH_GAIN`) than the doorbell's.
A request whose layout the
server granted an id (asked for at its first execution) travels as a compact
call and comes back as a compact answer (:mod:`nnhal.core.fastpacket`). It returns None, before
sending anything, when the request or its largest possible answer would not
fit a ring: that execution takes the gRPC burst instead.

Liveness: the ``openFastBurst`` stream stays open for the burst's life. Its end
— the server died (UNAVAILABLE within milliseconds), the connection failed
keepalive (a frozen server, ``DEATH_DETECTION_BOUND_S``), the server ended the
burst — stops the doorbell, so a waiting execution wakes and returns the
status the stream ended with, through the session's one call path: a
vanished server is DEAD_OBJECT and declares the session dead, as on the gRPC
path. The doorbell also watches the server's end of the queue (``Doorbell``'s
``watch_peer``): a queue the server ends on its own, or a server process that is gone,
wakes the waiter at once, before gRPC has delivered the stream's end; the waiter then
reads the stream's last event for the status. Thread-safe: one execution at a time
(results come back in order).

:class:`~nnhal.client.remote.queue_ends.QueueEnds` is what both clients' links share (the rings, the doorbell, the
granted layouts, an execution's packets); :class:`FastBurstLink` waits on it with
blocking reads, the asyncio client's link (:mod:`.aio_queue_link`) through its event loop.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nnhal.client.outcome import failed_result
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.client.remote.pace import (
    EARLY_LOOK_S,
    POLL_LEAD_MAX_S,
    POLL_LEAD_SHARE,
    POLL_LOOPS,
    POLL_MIN_NAP_S,
    POLL_WINDOW_S,
    WATCH_MAX_S,
    hybrid_from_env,
)
from nnhal.client.remote.transport import BURST_STREAM_TIMEOUT
from nnhal.core import fastanswer, fastpacket, fastring, wire_status
from nnhal.core.doorbell import fine_timers
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure, HalError
from nnhal.core.lookout import Lookout
from nnhal.core.types import ExecutionResult, Request
from nnhal.proto import fastpath_pb2 as fpb

if TYPE_CHECKING:
    from nnhal.client.remote.channel import SessionChannel


from nnhal.client.remote.queue_ends import LayoutRef, QueueEnded, QueueEnds, QueueTimeout

log = logging.getLogger(__name__)


class FastBurstLink(QueueEnds):
    """One fast burst of one prepared model (or a session's queue), waited on by blocking
    doorbell reads, or the hybrid wait (module docstring). ``close`` it (idempotent)."""

    #: Whether links wait the hybrid way (module docstring), and whether whatever the machine's
    #: load (:func:`hybrid_from_env`: ``NNHAL_HYBRID_WAIT``). Read per link (``hybrid_wait``,
    #: ``lookout``).
    HYBRID_WAIT, HYBRID_FORCED = hybrid_from_env(os.environ.get("NNHAL_HYBRID_WAIT"))

    def __init__(self, remote: SessionChannel, call: Any, first: fpb.FastBurstEvent, executions: bool = False) -> None:
        super().__init__(first, executions)
        self._remote = remote
        self._call = call
        self._lock = threading.Lock()
        self._closed = False
        #: Whether this link waits the hybrid way (:attr:`HYBRID_WAIT` when it was made).
        self.hybrid_wait = FastBurstLink.HYBRID_WAIT
        #: When its watch may spend CPU (the machine's load, a share of the elapsed time).
        self.lookout = Lookout(WATCH_MAX_S, FastBurstLink.HYBRID_FORCED)
        #: The lookout's window ``wake_early`` asked for the packet about to be sent, which its
        #: wait takes (None: none asked; the wait asks).
        self._window: float | None = None
        # The stream's end is the peer's death or the burst's end: wake whoever waits.
        call.add_done_callback(lambda _call: self.doorbell.stop())

    @property
    def ended(self) -> bool:
        """Whether the liveness stream has ended (the server ended the queue, or died)."""
        return bool(self._call.done())

    @staticmethod
    def open(remote: SessionChannel, handle: str, ring_bytes: int = 0, executions: bool = False) -> FastBurstLink:
        """Open a fast burst of prepared model ``handle`` — or with ``executions`` (``handle``
        ""), the session's same-host execution queue (:mod:`.samehost`); raises the refusal's
        HalError."""
        remote.check("openFastBurst")
        request = fpb.FastBurstRequest(
            session=remote.session_id, prepared_model=handle, ring_bytes=ring_bytes, executions=executions
        )
        call = remote.invoke(
            lambda: remote.stubs.fast_path.openFastBurst(request, timeout=BURST_STREAM_TIMEOUT), "openFastBurst"
        )
        try:
            first = remote.invoke(lambda: next(call, None), "openFastBurst")
            if first is None:
                raise GeneralFailure("openFastBurst: the stream ended without an answer")
            status, message = wire_status.status_from(first)
            if status != ErrorStatus.NONE:
                raise HalError.of(status, f"openFastBurst: {message}")
            return FastBurstLink(remote, call, first, executions)
        except BaseException:
            call.cancel()
            raise

    def execute(
        self,
        request: Request,
        options: ExecutionOptions,
        handle: str = "",
        session: str = "",
        limit: float | None = None,
        wait: bool = True,
        tag: bytes = b"",
    ) -> ExecutionResult | None:
        """One execution; None (nothing sent) when it does not fit the rings — or, unless
        ``wait``, when another thread is using them. Transport failures and the burst's end
        come back in the result (module docstring). On a session's queue ``handle`` and
        ``session`` name the prepared model (a burst's server knows them); ``limit``: seconds
        to wait for the answer, past which :class:`QueueTimeout` is raised (the queue is out
        of step then: close it); ``tag``: the call's request id and fault scope, which a
        session's queue takes before every packet (``samehost.encode_tag``)."""
        answer = self.execute_apart(request, options, handle, session, limit, wait, tag)
        return None if answer is None else fastanswer.whole(answer)

    def execute_apart(
        self,
        request: Request,
        options: ExecutionOptions,
        handle: str = "",
        session: str = "",
        limit: float | None = None,
        wait: bool = True,
        tag: bytes = b"",
    ) -> fastanswer.Apart | None:
        """:meth:`execute`, its answer read apart (``fastanswer.Apart``, as :meth:`send`'s): what
        a burst's ``execute`` makes its outcome of."""
        packet = self.execution_packet(request, options, handle, session, tag)
        return None if packet is None else self.send(*packet, limit, wait)

    def execute_planned(
        self, planned: fastpacket.Planned, parts: list[Any], measure: bool, timeout: float | None
    ) -> fastanswer.Apart | None:
        """A burst's execution of a numpy call plan's layout from its pools' bytes (``parts``, in
        order; :meth:`planned_packet`), its answer read apart: a compact call when the burst
        granted the layout an id, else None (nothing sent: the call takes :meth:`execute`, whose
        first call of a layout asks for the id). Failures come back in the answer, as
        :meth:`execute`'s in its result."""
        layout = self.granted(planned, "")
        if not layout:
            return None
        payload = self.planned_packet(layout, b"", measure, 0, timeout, parts, planned.body)
        if payload is None:
            return None
        return self.send(fastpacket.CALL, payload, ("", planned.shape))

    def send(
        self,
        kind: int,
        payload: fastring.Payload,
        key: LayoutRef | None,
        limit: float | None = None,
        wait: bool = True,
    ) -> fastanswer.Apart | None:
        """:meth:`execute` of a packet already made (``execution_packet``, ``planned_packet``):
        its result read apart (``fastanswer.Apart``, ``result_of``'s: :meth:`execute` makes it
        whole), or None (nothing sent) when, unless ``wait``, another thread is using the rings."""
        if not self._lock.acquire(blocking=wait):
            return None
        try:
            try:
                self._remote.check("fast burst")
            except HalError as err:
                failure = failed_result(err)
            else:
                if self._closed or self.doorbell.stopped:
                    failure = self._ended()
                else:
                    try:
                        self.requests.write(kind, payload)
                    except fastring.RingError as err:
                        failure = ExecutionResult(ErrorStatus.GENERAL_FAILURE, f"fast burst: {err}")
                    else:
                        try:
                            self.doorbell.ring()
                        except OSError:  # the server closed its end: its stream is ending too
                            failure = self._ended()
                        else:
                            return self._await_result(key, limit, kind)
            return fastanswer.apart_of(failure)
        finally:
            self._lock.release()

    def exchange(
        self, kind: int, payload: fastring.Payload, timeout: float, key: object = None
    ) -> tuple[int, bytes] | None:
        """Send one packet and wait up to ``timeout`` seconds for the answer packet; None (nothing
        sent) when another thread is using the queue or the packet does not fit the ring.
        ``key``: what kind of call it is, for the hybrid wait's estimate (None: ``kind``).
        Raises :class:`QueueEnded` when the queue ended first (the status it ended with),
        :class:`QueueTimeout` when no answer came in time (the queue is out of step then:
        close it), GENERAL_FAILURE for an answer that breaks the ring's rules."""
        if not self.requests.fits(len(payload)) or not self._lock.acquire(blocking=False):
            return None
        try:
            if self._closed or self.doorbell.stopped:
                raise QueueEnded(self._ended())
            if not self.post(kind, payload):
                raise QueueEnded(self._ended())
            return self._await_packet(timeout, kind if key is None else key)
        finally:
            self._lock.release()

    def _await_packet(self, timeout: float, key: object = None) -> tuple[int, bytes]:
        """Wait for the next answer packet, for up to ``timeout`` seconds (:meth:`exchange`'s
        failures). Holds ``_lock``."""
        packet = self._wait(key, timeout)
        if packet is None:
            raise QueueEnded(self._ended())
        return packet

    def _wait(self, key: object, limit: float | None) -> tuple[int, bytes] | None:
        """The next answer packet (module docstring: the hybrid wait); None once the queue
        ended (its doorbell stopped), QueueTimeout past ``limit`` seconds from now (None: no
        limit), GENERAL_FAILURE for a packet that breaks the ring's rules. Holds ``_lock``."""
        rung = time.monotonic()
        end = None if limit is None else rung + limit
        # The lookout's window: the one ``wake_early`` asked for this call's packet, else asked
        # now. A closed lookout (a busy machine, one CPU) costs the call nothing more.
        allowed = self._window
        if allowed is None:
            allowed = self.lookout.window() if self.hybrid_wait else 0.0
        else:
            self._window = None
        pace = self.pace(key) if allowed > 0.0 else None
        doorbell = self.doorbell
        watched = early = False
        if pace is not None and pace.watch():
            watched = True
            early = self._watch(rung, pace.expected, end, allowed)
        while True:
            left = None
            if end is not None:
                left = end - time.monotonic()
                if left <= 0:
                    raise QueueTimeout(f"no answer within {end - rung:.3g} s")
            if not doorbell.wait(left):
                if doorbell.stopped or left is None:
                    return None
                continue  # the time is up: raised above
            if doorbell.early and not self._await_ring(allowed, end):
                continue  # rung early and the answer's ring did not follow soon: sleep for it
            packet = self.read_answer()
            if packet is not None:
                if pace is not None:
                    pace.took(watched, time.monotonic() - rung, early)
                return packet

    def wake_early(self) -> bool:
        """Asked while it waits the hybrid way and its lookout would look now (``_await_ring``).
        The lookout's window asked here is the one the call's wait (``_wait``, next) looks
        within: one look at the lookout per call, and the ask and the look one decision."""
        if not self.hybrid_wait:
            return False
        window = self._window = self.lookout.window()
        return window > 0.0

    def _await_ring(self, allowed: float, end: float | None) -> bool:
        """Rung early (``doorbell.announce``: the answer is near, not yet written): look for the
        answer's own ring without sleeping, yielding the core between looks, for at most
        ``allowed`` seconds (the lookout's; none: it sleeps again at once) and
        :data:`EARLY_LOOK_S`, not past ``end``, charged to the lookout. Whether it came (its
        doorbell byte read: the answer may be read)."""
        if allowed <= 0.0:
            return False
        doorbell, monotonic = self.doorbell, time.monotonic
        start = monotonic()
        # Conditional expressions, not min() (here and in ``_watch``): no builtin's call per wait.
        last = start + (EARLY_LOOK_S if allowed > EARLY_LOOK_S else allowed)
        if end is not None and end < last:
            last = end
        came = False
        while not doorbell.stopping:
            if doorbell.wait(0) and not doorbell.early:
                came = True
                break
            if monotonic() >= last:
                break
            os.sched_yield()
        self.lookout.spend(monotonic() - start)
        return came

    def _watch(self, rung: float, expected: float, end: float | None, allowed: float = WATCH_MAX_S) -> bool:
        """The hybrid wait's watch: sleep until a little before the answer is expected, then
        look at the result ring's head, yielding the core between looks, until a packet is
        published (its doorbell byte follows or came: the caller's ``wait`` takes it), the
        queue is stopping, or the bounded window passes (at most ``allowed`` seconds of
        looking, charged to the lookout). Whether the first look found it."""
        lead = expected * POLL_LEAD_SHARE
        if lead > POLL_LEAD_MAX_S:
            lead = POLL_LEAD_MAX_S
        last = rung + expected + POLL_WINDOW_S
        if end is not None and end < last:
            last = end
        pending, doorbell, monotonic = self.results.pending, self.doorbell, time.monotonic
        nap = rung + expected - lead - monotonic()
        if nap >= POLL_MIN_NAP_S:
            fine_timers()
            time.sleep(nap)
        if pending():
            return True
        start = monotonic()
        if start + allowed < last:
            last = start + allowed
        for _ in range(POLL_LOOPS):
            if doorbell.stopping or monotonic() >= last:
                break
            os.sched_yield()
            if pending():
                break
        self.lookout.spend(monotonic() - start)
        return False

    def send_raw(self, write: Callable[[fastring.Producer], None]) -> ExecutionResult:
        """Tests of the server's checks: ``write`` puts whatever it likes into the request
        ring; the doorbell rings and the answer (or the burst's end) comes back."""
        with self._lock:
            write(self.requests)
            self.doorbell.ring()
            answer = self._await_result(None)
        if answer is None:
            return ExecutionResult(ErrorStatus.GENERAL_FAILURE, "the queue stepped aside")
        return fastanswer.whole(answer)

    def _await_result(
        self, key: LayoutRef | None, limit: float | None = None, kind: int = 0
    ) -> fastanswer.Apart | None:
        """Wait for the result packet (or the burst's end; past ``limit`` seconds, QueueTimeout):
        its result read apart (:meth:`result_of`). Holds ``_lock``."""
        try:
            packet = self._wait(kind if key is None else key, limit)
        except GeneralFailure as err:
            return fastanswer.apart_of(failed_result(err))
        if packet is None:
            return fastanswer.apart_of(self._ended())
        return self.result_of(packet, key, True)

    def _ended(self) -> ExecutionResult:
        """The result of an execution the burst's end cut short."""
        if self._closed:
            return ExecutionResult(ErrorStatus.GENERAL_FAILURE, "fast burst: the burst is closed")
        try:
            event = self._remote.invoke(lambda: next(self._call, None), "fast burst")
        except HalError as err:  # the stream broke: DEAD_OBJECT for a vanished server
            return failed_result(err)
        return ended_result(event)

    def close(self) -> None:
        """End the burst: the server stops serving it and every descriptor is closed."""
        if self._closed:
            return
        self._closed = True
        self.doorbell.stop()  # a waiting execution returns first
        self._call.cancel()
        with self._lock:
            self._close_ends()


def ended_result(event: fpb.FastBurstEvent | None) -> ExecutionResult:
    """The result of an execution cut short by the end of a queue whose stream brought ``event``
    last (None: it ended without one): the status the server ended it with."""
    if event is not None and wire_status.status_from(event)[0] != ErrorStatus.NONE:
        status, message = wire_status.status_from(event)
        return ExecutionResult(status, f"fast burst: {message}")
    return ExecutionResult(ErrorStatus.GENERAL_FAILURE, "the fast burst ended (closed by the server); open a new burst")

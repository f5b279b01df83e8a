"""The server's end of a same-host fast burst: the queue, its handover and its serving loop.

``FastQueue.create`` makes the queue of one burst: a memfd holding the two
rings (:mod:`nnhal.core.fastring`), sealed against shrinking and growing before
anyone else sees it — a client could otherwise cut pages from under the
server's mapping and fault it (the reason ``memory.py`` never maps client
files) — and the doorbell pipes (:mod:`nnhal.core.doorbell`). It listens on a
unix socket in the server's shared-memory directory (mode 0600, so only the
server's user may connect; the token is what authorises).

``hand_over`` accepts one connection within its timeout, reads the token the
client got through gRPC (compared in constant time), sends the memfd and the
client's pipe ends with SCM_RIGHTS and removes the socket file: from then on
nothing of the queue lives in the file system, and it vanishes with the last of
its descriptors, whichever side dies.

An idle queue holds no thread of its own: the :class:`QueueServer` (one thread
per device) waits on every queue's request doorbell at once (epoll, no polling)
and answers each queue's request packets (a full request, one asking for a
layout id, a compact call: :mod:`nnhal.core.fastpacket`) in order — quick ones
on its own thread, so that busy queues pay no thread switch per packet, the
others on a worker thread. Serving ends at ``stop`` (any thread: the burst's
gRPC stream ended, the server stops) or a STOP from the client. Every packet is
untrusted input: a RingError gets a refusal (``refuse``: the status packet of
the caller's protocol) and the ring is resynchronised; an answer that does not
fit the result ring is replaced by a refusal.
"""

from __future__ import annotations

import fcntl
import hmac
import logging
import mmap
import os
import secrets
import select
import socket
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from nnhal.core import fastpacket, fastring, lookout
from nnhal.core.doorbell import Doorbell, nonblocking_pipe
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure, InvalidArgument

log = logging.getLogger(__name__)

#: A queue whose last packets took at least this long has its packets answered on a worker
#: while other queues are served (:class:`QueueServer`), so that they do not wait behind it.
INLINE_MAX_NS = 1_000_000
#: ... each of its last this many packets.
_SLOW_PACKETS = 2
#: What a turn of a served queue leaves to do (``QueueServer._answer``).
_ARM, _END = object(), object()

#: The most a serving thread may be told to look for the next rung doorbell (1 ms).
SPIN_MAX_US = 1000
#: How long the serving thread looks for the next rung doorbell by default, while looking pays
#: (:class:`nnhal.core.lookout.Lookout`).
SPIN_DEFAULT_US = 200


def spin_from_env(value: str | None) -> tuple[float, bool]:
    """Seconds the serving thread may look for the next rung doorbell before it sleeps, and
    whether it always does, from ``NNHAL_QUEUE_SPIN_US``: unset, empty or ``auto`` —
    :data:`SPIN_DEFAULT_US`, while looking pays (the lookout's policy); ``0`` or ``off`` — it
    sleeps at once; whole microseconds 1 to :data:`SPIN_MAX_US` — that long, after every
    batch (never with a single CPU allowed). Anything else is ignored with a warning: the
    default."""
    return lookout.window_from_env("NNHAL_QUEUE_SPIN_US", value, SPIN_DEFAULT_US, SPIN_MAX_US)


#: How long the serving thread may look for the next rung doorbell, and whether always.
SPIN_S, SPIN_FORCED = spin_from_env(os.environ.get("NNHAL_QUEUE_SPIN_US"))

#: How often a handover waiting for its client looks whether it should stop.
_ACCEPT_SLICE_S = 0.25

#: Turns a refusal (status, message) into the answer packet's payload (kind ``fastring.RESULT``).
Refuse = Callable[[ErrorStatus, str], bytes]
#: Turns a request packet (kind, payload) into the answer packet (kind, payload); never raises.
Handle = Callable[[int, bytes], tuple[int, fastring.Payload]]
#: A Handle that also takes a view of a packet's payload (a part of a larger packet, not copied).
ViewHandle = Callable[[int, bytes | memoryview], tuple[int, fastring.Payload]]
#: The request kinds a queue takes: a full request, one asking for a layout id, a compact call.
REQUEST_KINDS = (fastring.REQUEST, fastpacket.LEARN, fastpacket.CALL)


def available() -> bool:
    """Whether this system has what the fast path needs (Linux memfd seals, fd passing)."""
    return hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS") and hasattr(socket, "send_fds")


class FastQueue:
    """One fast burst's queue (server side). ``close`` always; ``stop`` from any thread."""

    def __init__(self, ring_bytes: int, socket_path: Path, kinds: Collection[int] = REQUEST_KINDS) -> None:
        self.ring_bytes = ring_bytes
        self.socket_path = socket_path
        self.token = secrets.token_bytes(fastring.TOKEN_BYTES)
        #: True once ``stop`` was called or the client's STOP was read (``take_rings``).
        self.stopping = False
        #: Why ``serve`` ended the burst on its own ("" when it did not): the client broke the protocol.
        self.violation = ""
        self._fds: list[int] = []  # handed over, then closed here
        self._listener: socket.socket | None = None
        self._mm: mmap.mmap | None = None
        self._doorbell: Doorbell | None = None
        try:
            memfd = os.memfd_create("nnhal-fast-burst", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            self._fds.append(memfd)
            os.ftruncate(memfd, fastring.region_bytes(ring_bytes))
            fcntl.fcntl(memfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            self._mm = mmap.mmap(memfd, fastring.region_bytes(ring_bytes))
            fastring.write_region_header(self._mm, ring_bytes)
            req_r, req_w = nonblocking_pipe()
            res_r, res_w = nonblocking_pipe()
            self._doorbell = Doorbell(req_r, req_w, res_w)
            self._fds += [os.dup(req_w), res_r, os.dup(res_w)]
            self._listener = self._listen(socket_path)
        except BaseException:
            self.close()
            raise
        self._requests = fastring.Consumer(self._mm, ring_bytes, True, kinds)
        #: What answers an answer too large for the result ring (None: a refusal, ``refuse``).
        self.oversize: Callable[[int], tuple[int, fastring.Payload]] | None = None
        self._results = fastring.Producer(self._mm, ring_bytes, False)

    @staticmethod
    def create(directory: Path, prefix: str, ring_bytes: int, kinds: Collection[int] = REQUEST_KINDS) -> FastQueue:
        """A queue whose handover socket lives in ``directory``, taking request packets of
        ``kinds``. GENERAL_FAILURE when the system cannot make one (no memfd seals, the
        directory is not writable)."""
        path = directory / f"{prefix}fast-{secrets.token_hex(12)}.sock"
        try:
            return FastQueue(ring_bytes, path, kinds)
        except OSError as err:
            raise GeneralFailure(f"cannot set up a fast burst queue: {err.strerror or err}") from err

    @staticmethod
    def _listen(path: Path) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        bound = False
        try:
            sock.bind(str(path))
            bound = True
            # Not through the umask (process-wide, other threads create files): a peer
            # connecting before this line still needs the token.
            os.chmod(path, 0o600)
            sock.listen(1)
        except BaseException:
            sock.close()
            if bound:
                path.unlink(missing_ok=True)
            raise
        return sock

    def hand_over(self, timeout: float) -> None:
        """Give the queue to the client that presents the token within ``timeout`` seconds.
        INVALID_ARGUMENT for a wrong token, GENERAL_FAILURE when nobody came in time."""
        listener = self._listener
        assert listener is not None, "a queue is handed over once"
        # In slices, so that ``stop`` (the client gave up, the server stops) ends the wait soon.
        listener.settimeout(_ACCEPT_SLICE_S)
        end = time.monotonic() + timeout
        try:
            while True:
                try:
                    conn, _ = listener.accept()
                    break
                except TimeoutError:
                    if self.stopping or time.monotonic() >= end:
                        raise GeneralFailure(
                            f"the client did not collect its fast burst queue within {timeout} s"
                        ) from None
        except OSError as err:
            raise GeneralFailure(f"the fast burst handover failed: {err}") from err
        finally:
            self._unlisten()
        with conn:
            conn.settimeout(timeout)
            try:
                token = b""
                while len(token) < fastring.TOKEN_BYTES:
                    chunk = conn.recv(fastring.TOKEN_BYTES - len(token))
                    if not chunk:
                        break
                    token += chunk
                if not hmac.compare_digest(token, self.token):
                    raise InvalidArgument("wrong fast burst token")
                socket.send_fds(conn, [fastring.HANDOVER.pack(fastring.MAGIC, self.ring_bytes)], self._fds)
            except OSError as err:
                raise GeneralFailure(f"handing the fast burst queue over failed: {err}") from err
        self._close_handed()

    def next_packet(self, refuse: Refuse) -> tuple[int, bytes] | None:
        """The next request packet (kind, a private copy of its payload); None when the ring
        is empty or the queue is stopping (``stop``, the client's STOP, a client that does not
        read its answers: what is left is not run). A packet breaking the ring's rules is
        answered with ``refuse``'s refusal here, and the ring resynchronised."""
        while not self.stopping:
            try:
                return self._requests.read()
            except fastring.RingError as err:
                log.warning("fast burst: refused a request packet: %s", err)
                self._requests.resync()
                refusal = refuse(ErrorStatus.INVALID_ARGUMENT, f"malformed fast burst packet: {err}")
                self.answer(fastring.RESULT, refusal, refuse)
        return None

    def ring(self) -> None:
        """Wake the client: answers are waiting (a closed client end stops the queue)."""
        assert self._doorbell is not None
        try:
            self._doorbell.ring()
        except OSError:
            self.stop()

    def answer(self, kind: int, payload: fastring.Payload, refuse: Refuse, ring: bool = True) -> None:
        """Write one answer packet and ring the client (an answer too large for the result
        ring is replaced: ``oversize``, else ``refuse``'s refusal). A client that does not
        read its answers ends the queue (:attr:`violation`). Without ``ring`` the caller
        must call :meth:`ring` later, before it waits for anything."""
        assert self._doorbell is not None
        if not self._results.fits(len(payload)):
            if self.oversize is not None:
                kind, payload = self.oversize(len(payload))
            else:
                kind = fastring.RESULT
                payload = refuse(
                    ErrorStatus.INVALID_ARGUMENT,
                    f"the answer ({len(payload)} bytes) does not fit the fast burst's {self.ring_bytes}-byte ring; "
                    "open the burst with larger rings or use the gRPC burst",
                )
        try:
            self._results.write(kind, payload)
        except fastring.RingError as err:
            # The client does not read its answers (or broke its index): it gets nothing more.
            log.warning("fast burst: cannot answer (%s); ending the burst", err)
            self.violation = f"the fast burst's result ring cannot take the answer ({err}); the burst ended"
            self.stop()
            return
        if ring:
            self.ring()

    @property
    def inbox(self) -> int:
        """The descriptor a ring or a STOP makes readable (what a serving thread polls)."""
        assert self._doorbell is not None
        return self._doorbell.inbox

    def take_rings(self) -> None:
        """Read the request doorbell's bytes once :attr:`inbox` was reported readable (a STOP
        among them stops the queue); the packets they announce are read with ``next_packet``."""
        doorbell = self._doorbell
        assert doorbell is not None
        doorbell.take()
        if doorbell.stopped:
            self.stopping = True

    def stop(self) -> None:
        """End ``serve``, or a ``hand_over`` still waiting for its client (any thread, idempotent)."""
        self.stopping = True
        if self._doorbell is not None:
            self._doorbell.stop()

    def _unlisten(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            try:
                self.socket_path.unlink()
            except FileNotFoundError:
                pass

    def _close_handed(self) -> None:
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)

    def close(self) -> None:
        """Give back everything (idempotent): the socket file, descriptors, the mapping."""
        self._unlisten()
        self._close_handed()
        if self._doorbell is not None:
            self._doorbell.close()
        for ring in (getattr(self, "_requests", None), getattr(self, "_results", None)):
            if ring is not None:
                ring.close()
        if self._mm is not None:
            self._mm.close()
            self._mm = None


@dataclass(eq=False)
class _Served:
    """One queue as the :class:`QueueServer` holds it."""

    queue: FastQueue
    handle: Handle
    refuse: Refuse
    quick: Callable[[int], bool]
    run: Callable[..., object]
    ended: Callable[[], None]
    #: How many of the queue's last packets in a row were slow (``QueueServer._answer``):
    #: a slow queue's packets go to a worker.
    slow: int = 0
    #: Whether its inbox is in the epoll set (out of it while a worker holds the queue).
    polled: bool = True
    #: Answers written on the serving thread whose client was not rung yet.
    unrung: bool = False


class QueueServer:
    """The one thread that serves every queue handed to it (``serve``), each in order.

    A thread of its own waits on all their request doorbells at once (an epoll set,
    level-triggered: a queue answered on that thread stays in the set, so a packet costs no
    epoll call of its own; a queue a worker holds is out of it until handed back) and answers
    each ready queue's packets in turn. A quick packet (``quick(kind)``, unless each of the queue's last two
    packets took :data:`INLINE_MAX_NS` or longer while another queue is served) is answered on
    this thread, so that many
    busy queues cost no thread switch per packet and the server's threads do not contend
    for the GIL. Any other packet goes to a worker (``submit``), which then answers the
    rest of that queue's waiting packets and hands the queue back. A quick packet that
    turns out slow holds the other queues up by that one execution (by two for a queue's
    first slow ones), after which its queue's packets go to workers while other queues are
    served (a sole queue's stay on this thread: nobody waits behind them). While several queues are
    served, the answers written on this thread are rung once every queue one wait reported
    has had its turn: a client woken by a doorbell is often put on the waker's core, and
    ringing it at once would hand that core to it while the other queues' packets wait. Before
    it sleeps, the thread looks for the next rung doorbell while its
    :class:`~nnhal.core.lookout.Lookout` allows (``NNHAL_QUEUE_SPIN_US``). The thread exists
    while a queue is served (started at the first, ending with the last). A queue ends
    once it is stopping (``FastQueue.stop``, the client's STOP, a protocol violation): it
    leaves the set and its ``ended`` is called, on whichever thread held it, after which
    nothing here touches it. Thread-safe."""

    def __init__(self, submit: Callable[[Callable[[], object]], object], name: str = "nnhal-queues") -> None:
        self._submit = submit
        self._name = name
        self._lock = threading.Lock()  # a leaf: guards the set, the epoll and the thread
        self._served: dict[int, _Served] = {}
        self._epoll: select.epoll | None = None
        self._wake: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        #: Whether the serving thread rings the clients after the batch (more than one queue
        #: is served). Only that thread reads or writes it.
        self._batched = False
        #: When the serving thread looks for the next doorbell before it sleeps (only it uses it).
        self._lookout = lookout.Lookout(SPIN_S, SPIN_FORCED)

    @property
    def queues(self) -> int:
        """Queues served now."""
        return len(self._served)

    def serve(
        self,
        queue: FastQueue,
        handle: Handle,
        refuse: Refuse,
        quick: Callable[[int], bool],
        run: Callable[..., object],
        ended: Callable[[], None],
    ) -> None:
        """Serve ``queue`` until it stops, then call ``ended()`` (once, on a serving thread).
        ``handle`` answers a packet and must not raise; ``run(fn, *args)`` runs the queue's
        work (in its context: ``contextvars.Context.run``)."""
        served = _Served(queue, handle, refuse, quick, run, ended)
        with self._lock:
            if self._epoll is None:
                self._epoll = select.epoll()
                self._wake = nonblocking_pipe()
                self._epoll.register(self._wake[0], select.EPOLLIN)
            self._served[queue.inbox] = served
            self._epoll.register(queue.inbox, select.EPOLLIN)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, args=(self._epoll,), name=self._name, daemon=True)
                self._thread.start()

    def _loop(self, epoll: select.epoll) -> None:
        while True:
            with self._lock:
                if not self._served:  # the last queue ended: so does the thread
                    self._close_epoll()
                    return
            rings: list[_Served] = []
            # A sole queue's client is rung at once (nobody else's packets wait; its next packet,
            # should it come while this thread is still in the turn, is answered in that turn).
            self._batched = len(self._served) > 1
            for fd, _events in self._next_events(epoll):
                served = self._served.get(fd)
                if served is None:  # the wake pipe
                    self._drain_wake()
                    continue
                served.queue.take_rings()  # what woke it: read, or the inbox would stay readable
                self._turn(served, None)
                if served.unrung:
                    rings.append(served)
            for served in rings:
                served.unrung = False
                served.queue.ring()

    def _next_events(self, epoll: select.epoll) -> list[tuple[int, int]]:
        """The next doorbells rung: looked for without sleeping while the lookout allows
        (each look a non-blocking ``epoll_wait`` that lets other threads have the GIL, then
        the core yielded), then waited for. A client that sends its next call within the
        window finds this thread awake: no cross-core wake-up, which on a virtual machine
        costs more than the call's own work. Every wait, looked or slept, teaches the lookout."""
        watch = self._lookout
        window = watch.window()
        monotonic = time.monotonic
        start = monotonic()
        if window > 0.0:
            last = start + window
            poll, yield_core = epoll.poll, os.sched_yield
            while True:
                events = poll(0)
                if events:
                    gap = monotonic() - start
                    watch.waited(gap, gap)
                    return events
                if monotonic() >= last:
                    break
                yield_core()
        looked = monotonic() - start
        events = epoll.poll()
        watch.waited(monotonic() - start, looked)
        return events

    def _turn(self, served: _Served, handed: tuple[int, bytes] | None) -> None:
        """One turn of ``served`` (``_answer``) on the serving thread (``handed`` None) or a
        worker, then — outside the queue's context, which the next turn enters, maybe on
        another thread — hand it to a worker (out of the epoll set meanwhile), put it back in
        the set (after a worker's turn) or end it."""
        try:
            state = served.run(self._answer, served, handed)
        except Exception:  # a bug: the queue ends, the others are served on
            log.exception("fast burst: serving a queue failed; ending it")
            served.queue.stop()
            state = _END
        if served.unrung and state is not _ARM:
            served.unrung = False
            served.queue.ring()
        if isinstance(state, tuple):  # for a worker, entering the context now that it was left
            self._poll(served, False)  # not polled while the worker holds it
            try:
                self._submit(partial(self._turn, served, state))
            except RuntimeError:  # no worker takes work (the server is stopping): answered here
                self._turn(served, state)
        elif state is _ARM:
            if not served.polled:
                self._poll(served, True)
        elif state is _END:
            self._end(served)

    def _poll(self, served: _Served, on: bool) -> None:
        """Put ``served``'s inbox in the epoll set or take it out (by the queue's holder)."""
        epoll = self._epoll
        if epoll is None:
            return
        # The flag first: once registered, the serving thread may take the queue at once (and
        # hand it to a worker, taking it out again) before this thread would have set it.
        served.polled = on
        try:
            if on:
                epoll.register(served.queue.inbox, select.EPOLLIN)
            else:
                epoll.unregister(served.queue.inbox)
        except (OSError, ValueError):  # the set was closed under a racing end: nothing left to do
            pass

    def _answer(self, served: _Served, handed: tuple[int, bytes] | None) -> object:
        """Answer ``served``'s waiting packets — on a worker (``handed``: the packet it was
        given, answered first) all of them, on the serving thread the quick ones: ``_ARM``
        once none waits, ``_END`` once the queue is stopping, or the first packet that is not
        quick, for a worker."""
        queue, handle, refuse = served.queue, served.handle, served.refuse
        packet = handed
        while True:
            if packet is None:
                packet = queue.next_packet(refuse)
                if packet is None:
                    return _END if queue.stopping else _ARM
                # A slow queue's packets go to a worker only while another queue is served:
                # alone, nobody waits behind it, and the hop to a worker and back costs its
                # client more than the turn it frees.
                quick = (served.slow < _SLOW_PACKETS or len(self._served) < 2) and served.quick(packet[0])
                if handed is None and not quick:
                    return packet
            t0 = time.perf_counter_ns()
            batched = handed is None and self._batched
            queue.answer(*handle(*packet), refuse, not batched)
            served.unrung = served.unrung or batched
            # Slow after two slow packets in a row: one preempted packet of a loaded machine
            # alone does not send a small model's queue to the workers.
            served.slow = served.slow + 1 if time.perf_counter_ns() - t0 >= INLINE_MAX_NS else 0
            packet = None

    def _end(self, served: _Served) -> None:
        fd = served.queue.inbox
        with self._lock:
            if self._served.pop(fd, None) is None:
                return
            if self._epoll is not None and served.polled:
                served.polled = False
                self._epoll.unregister(fd)
            if not self._served and self._wake is not None:
                try:
                    os.write(self._wake[1], b"\x00")  # the serving thread looks whether it should end
                except BlockingIOError:
                    pass
        served.ended()

    def _drain_wake(self) -> None:
        wake = self._wake
        if wake is not None:
            try:
                os.read(wake[0], 4096)
            except (BlockingIOError, OSError):
                pass

    def _close_epoll(self) -> None:
        """Under the lock: the thread ends; the next ``serve`` makes a new set and thread."""
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
        if self._wake is not None:
            for fd in self._wake:
                os.close(fd)
            self._wake = None
        self._thread = None

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
orders the answer's bytes before the client's reads on any architecture.

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

:class:`QueueEnds` is what both clients' links share (the rings, the doorbell, the
granted layouts, an execution's packets); :class:`FastBurstLink` waits on it with
blocking reads, the asyncio client's link (:mod:`.aio_samehost`) through its event loop.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import mmap
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

from nnhal.client.outcome import failed_result
from nnhal.client.remote.messages import ExecutionOptions, fill_execution
from nnhal.client.remote.pace import (
    POLL_LEAD_MAX_S,
    POLL_LEAD_SHARE,
    POLL_LOOPS,
    POLL_MIN_NAP_S,
    POLL_WINDOW_S,
    WATCH_MAX_S,
    Pace,
    hybrid_from_env,
)
from nnhal.client.remote.transport import BURST_STREAM_TIMEOUT, remaining_time
from nnhal.core import fastpacket, fastring, samehost, wire
from nnhal.core.doorbell import Doorbell, fine_timers
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure, HalError
from nnhal.core.lookout import Lookout
from nnhal.core.types import ExecutionResult, InlinePool, MemoryPool, PoolData, Request
from nnhal.proto import fastpath_pb2 as fpb, service_pb2 as spb

if TYPE_CHECKING:
    from nnhal.client.remote.channel import SessionChannel

log = logging.getLogger(__name__)

#: Seconds to collect the queue once the server named its socket.
HANDOVER_TIMEOUT_S = 10.0
#: Room kept in the result ring for what an answer carries besides its inline output pools.
RESULT_ENVELOPE_BYTES = 16 << 10
_RESULT_KINDS = (fastring.RESULT, fastpacket.LEARNED, fastpacket.ANSWER)
_QUEUE_KINDS = (*_RESULT_KINDS, samehost.REPLY, samehost.ABORTED, samehost.STEP_ASIDE)
_GRPC_CODES = {code.value[0]: code for code in grpc.StatusCode}
#: Serials of the queues a process collects (a planned layout's grant names its queue by one).
_SERIALS = itertools.count(1)
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW if hasattr(fcntl, "F_SEAL_SHRINK") else 0


def _collect(path: str, token: bytes, ring_bytes: int) -> tuple[mmap.mmap, Doorbell]:
    """Connect to the handover socket, present ``token``, take and check the descriptors."""
    fds: list[int] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(HANDOVER_TIMEOUT_S)
            sock.connect(path)
            sock.sendall(token)
            msg, fds, _flags, _addr = socket.recv_fds(sock, fastring.HANDOVER.size, fastring.HANDOVER_FDS)
        for fd in fds:
            os.set_inheritable(fd, False)
        if len(fds) != fastring.HANDOVER_FDS or msg != fastring.HANDOVER.pack(fastring.MAGIC, ring_bytes):
            raise GeneralFailure("the server's fast burst handover was not understood")
        memfd, req_w, res_r, res_w = fds
        size = fastring.region_bytes(ring_bytes)
        if os.fstat(memfd).st_size != size or fcntl.fcntl(memfd, fcntl.F_GET_SEALS) & _SEALS != _SEALS:
            raise GeneralFailure("the fast burst region is not a sealed region of the announced size")
        mm = mmap.mmap(memfd, size)
        os.close(memfd)
        fds = [req_w, res_r, res_w]
        try:
            fastring.check_region(mm, ring_bytes)
        except fastring.RingError as err:
            mm.close()
            raise GeneralFailure(f"the fast burst region: {err}") from None
        for fd in (req_w, res_w):
            os.set_blocking(fd, False)
        # Watching the server's end: a queue it ends (or its death) wakes a waiter at once.
        return mm, Doorbell(res_r, res_w, req_w, watch_peer=True)
    except OSError as err:
        for fd in fds:
            os.close(fd)
        raise GeneralFailure(f"cannot collect the fast burst queue at {path}: {err}") from err
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


class CarriedAbort(grpc.RpcError):
    """The server ended a carried call as its gRPC call would have ended (an injected abort):
    read by the session's one error mapping like any gRPC failure."""

    def __init__(self, code: int, details: str) -> None:
        super().__init__(details)
        self._code = _GRPC_CODES.get(code, grpc.StatusCode.UNKNOWN)
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


#: A layout as the client knows it: the prepared model ("" on a burst) and the request's layout.
_Key = tuple[str, fastpacket.LayoutKey]


class _CallTemplate:
    """A granted layout's compact call as the client sends it (``QueueEnds.execution_packet``):
    the argument tuples and model it is for, its pools' lengths and sizes, its id."""

    __slots__ = ("body", "handle", "inputs", "key", "layout", "outputs", "padded", "sizes")

    def __init__(self, key: _Key, layout: int) -> None:
        self.key = key
        self.handle, (self.inputs, self.outputs, self.sizes) = key
        self.layout = layout
        lengths = [n for n, _ in self.sizes]
        body = fastpacket.body_spans(lengths)[1]
        #: The length of a call's body (the pools' bytes and the pads aligning them).
        self.body = body
        #: Whether the body has pads (else it is the pools' bytes back to back).
        self.padded = body != sum(lengths)

    def datas(self, pools: tuple[MemoryPool, ...]) -> list[PoolData] | None:
        """The pools' bytes (views of bytes) as the call's body carries them (with the pads
        aligning them) when they are inline and of this layout's lengths and sizes, else None."""
        sizes = self.sizes
        if len(pools) != len(sizes):
            return None
        datas: list[PoolData] = []
        for pool, (length, size) in zip(pools, sizes):
            if type(pool) is not InlinePool:
                return None
            data = pool.data
            if type(data) is memoryview:
                if data.format != "B" or data.ndim != 1:
                    data = data.cast("B")
                n = data.nbytes
            else:
                n = len(data)
            if n != length or max(pool.size, n) != size:
                return None
            datas.append(data)
        return fastpacket.body_parts(datas) if self.padded else datas

    def packet(self, tag: bytes, options: ExecutionOptions, datas: list[PoolData]) -> fastring.Payload:
        """The compact call's payload: ``tag``, the header of this call's scalars (padded), the
        body ``datas`` (a small one joined at once: the ring copies it once)."""
        remaining = (
            options.timeout if options.deadline_at is None else remaining_time(options.timeout, options.deadline_at)
        )
        deadline = None if remaining is None else fastpacket.remaining_ns(remaining)
        header = fastpacket.call_head(self.layout, options.measure, deadline, options.loop_timeout_ns)
        length = len(tag) + len(header) + self.body
        if length <= fastring.CHECKED_BYTES:
            return b"".join((tag, header, *datas))
        return fastring.Gathered([tag, header, *datas], length)


class QueueEnded(Exception):
    """The queue ended before the answer came: ``result`` carries the status it ended with
    (DEAD_OBJECT for a vanished server)."""

    def __init__(self, result: ExecutionResult) -> None:
        super().__init__(result.message)
        self.result = result


class QueueTimeout(Exception):
    """No answer came within the call's time."""


class QueueEnds:
    """The client's ends of a collected queue, whatever waits on it (the sync link blocks on
    its doorbell, the asyncio one awaits it through the event loop): the rings, the doorbell,
    the layouts the server granted, and the packet codec of an execution. Not thread-safe:
    its owner runs one exchange at a time."""

    def __init__(
        self, first: fpb.FastBurstEvent, executions: bool, ends: tuple[mmap.mmap, Doorbell] | None = None
    ) -> None:
        """``ends``: what :meth:`collect` took for ``first`` (None: collect it now)."""
        self.ring_bytes = QueueEnds._granted(first)
        #: How many queues the session may hold at once (a session's queue; 0: not said).
        self.max_queues = int(first.max_queues)
        self._mm, self.doorbell = ends or QueueEnds.collect(first)
        #: The two rings (public for tests that break the protocol on purpose).
        self.requests = fastring.Producer(self._mm, self.ring_bytes, True)
        self.results = fastring.Consumer(
            self._mm, self.ring_bytes, False, _QUEUE_KINDS if executions else _RESULT_KINDS
        )
        #: The layouts the server granted ids for (:mod:`nnhal.core.fastpacket`).
        self._layouts: dict[_Key, int] = {}
        #: The compact call of the last granted layout sent (``execution_packet``).
        self._template: _CallTemplate | None = None
        self._answers = fastpacket.AnswerReader()
        #: This queue among the process's (:meth:`granted`): never reused, unlike ``id()``.
        self.serial = next(_SERIALS)
        #: The hybrid wait's paces by kind of call (the last key's looked up by identity
        #: first: a layout key hashes slowly).
        self._paces: dict[object, Pace] = {}
        self._pace_key: object = None
        self._pace = Pace()

    def pace(self, key: object) -> Pace:
        """What the hybrid wait knows of calls of ``key``."""
        if key is self._pace_key or key == self._pace_key:  # equal: a planned call's new tuple
            return self._pace
        pace = self._paces.get(key)
        if pace is None:
            if len(self._paces) >= 4 * fastpacket.MAX_LAYOUTS:
                self._paces.clear()
            pace = self._paces[key] = Pace()
        self._pace_key, self._pace = key, pace
        return pace

    @staticmethod
    def _granted(first: fpb.FastBurstEvent) -> int:
        ring_bytes = int(first.ring_bytes)
        if not fastring.MIN_RING_BYTES <= ring_bytes <= fastring.MAX_RING_BYTES:
            raise GeneralFailure(f"the server granted {ring_bytes}-byte rings")
        return ring_bytes

    @staticmethod
    def collect(first: fpb.FastBurstEvent) -> tuple[mmap.mmap, Doorbell]:
        """Take the queue the server's first event names (blocks on a local socket, within
        ``HANDOVER_TIMEOUT_S``): its checked region and the doorbell."""
        return _collect(first.socket_path, first.token, QueueEnds._granted(first))

    @staticmethod
    def discard(ends: tuple[mmap.mmap, Doorbell]) -> None:
        """Give back what :meth:`collect` took, unused."""
        ends[1].close()
        ends[0].close()

    @property
    def compact_layouts(self) -> int:
        """How many request layouts travel as compact calls (the server granted their ids)."""
        return len(self._layouts)

    def _answer_fits(self, request: Request) -> bool:
        outputs = sum(p.size for p in request.pools if isinstance(p, InlinePool) and not p.data)
        return outputs + RESULT_ENVELOPE_BYTES <= self.results.max_payload

    def execution_packet(
        self, request: Request, options: ExecutionOptions, handle: str, session: str, tag: bytes
    ) -> tuple[int, fastring.Payload, _Key | None] | None:
        """The packet (kind, payload) of one execution and the layout key its answer may grant
        an id for; None when it or its largest possible answer does not fit the rings. The
        payload is in parts (``tag``, the header, the pools' bytes as the request holds them):
        the ring copies each once."""
        t = self._template
        # The numpy client sends the same argument tuples for a layout, a burst loop equal ones:
        # its compact call is known by their identity (else equality) and the pools' sizes, with
        # nothing hashed (the arguments' dataclass hashes are most of a lookup's cost) and
        # nothing re-checked that the template's first packet passed (the packet and its answer
        # fit the rings: the same output pools' sizes).
        if (
            t is not None
            and handle == t.handle
            and not options.profile
            and (request.inputs is t.inputs or request.inputs == t.inputs)
            and (request.outputs is t.outputs or request.outputs == t.outputs)
        ):
            datas = t.datas(request.pools)
            if datas is not None:
                packet = t.packet(tag, options, datas)
                return (fastpacket.CALL, packet, t.key) if self.requests.fits(len(packet)) else None
        if not self._answer_fits(request):
            return None
        shape = None if options.profile else fastpacket.layout_key(request.inputs, request.outputs, request.pools)
        key: _Key | None = None
        layout = None
        if shape is not None:
            key = (handle, shape)
            layout = self._layouts.get(key)
            t = None if layout is None else _CallTemplate(key, layout)
        if t is not None and layout is not None:
            # A layout the server knows: only the per-call scalars and the pools' bytes travel.
            datas = t.datas(request.pools)
            assert datas is not None  # the layout's own pools
            packet = t.packet(tag, options, datas)
            if not self.requests.fits(len(packet)):
                return None
            self._template = t
            return fastpacket.CALL, packet, t.key
        else:
            kind = fastring.REQUEST if key is None or len(self._layouts) >= fastpacket.MAX_LAYOUTS else fastpacket.LEARN
            msg = spb.ExecuteRequest(session=session, profile=options.profile)
            fill_execution(msg, handle, request, options)  # a burst's server fills in the session and model
            payload = [msg.SerializeToString()]
        packet = fastring.Gathered([tag, *payload] if tag else payload)
        if not self.requests.fits(len(packet)):
            return None
        return kind, packet, key

    def granted(self, planned: fastpacket.Planned, handle: str) -> int:
        """The id this queue granted ``planned``'s layout of prepared model ``handle`` (0: none
        yet — its next call travels as a full request and asks for one), remembered in
        ``planned`` so that a later call looks nothing up."""
        serial, layout = planned.grant
        if serial == self.serial:
            return layout
        layout = self._layouts.get((handle, planned.shape), 0)
        if layout:
            planned.grant = (self.serial, layout)
        return layout

    def planned_packet(
        self,
        layout: int,
        tag: bytes,
        measure: bool,
        loop_timeout_ns: int,
        remaining: float | None,
        parts: list[Any],
        body: int,
    ) -> fastring.Payload | None:
        """The compact call of a granted ``layout`` (:meth:`granted`) whose pools' bytes are
        ``parts`` (``body`` bytes in all, each part a C-contiguous buffer), ``remaining``
        seconds left of its deadline (None: none); None when it does not fit the request ring.
        A small packet is joined at once (the ring copies it once), a large one goes in parts."""
        deadline = None if remaining is None else fastpacket.remaining_ns(remaining)
        header = fastpacket.call_head(layout, measure, deadline, loop_timeout_ns)
        length = len(tag) + fastpacket.CALL_HEAD_BYTES + body
        if length > self.requests.max_payload:
            return None
        if length <= fastring.CHECKED_BYTES:
            return b"".join((tag, header, *parts))
        return fastring.Gathered([tag, header, *(memoryview(p).cast("B") for p in parts)], length)

    def read_answer(self) -> tuple[int, bytes] | None:
        """The next answer packet, None when none is waiting; GENERAL_FAILURE (the ring
        resynchronised) for one that breaks the ring's rules."""
        try:
            return self.results.read()
        except fastring.RingError as err:
            self.results.resync()
            raise GeneralFailure(f"same-host queue: a malformed answer packet: {err}") from None

    def result_of(self, packet: tuple[int, bytes], key: _Key | None) -> ExecutionResult | None:
        """The execution result an answer packet carries (a layout id it grants remembered for
        ``key``); None when a session's queue steps aside, CarriedAbort when it ended the call
        as gRPC would have. A malformed answer is a GENERAL_FAILURE result."""
        kind, payload = packet
        if kind == samehost.STEP_ASIDE:  # a session's queue: this call takes gRPC
            return None
        if kind == samehost.ABORTED:
            try:
                raise CarriedAbort(*samehost.decode_aborted(payload))
            except fastpacket.PacketError as err:
                return ExecutionResult(ErrorStatus.GENERAL_FAILURE, f"fast burst: a malformed answer: {err}")
        if kind == fastpacket.ANSWER:
            try:
                return self._answers.read(payload)
            except fastpacket.PacketError as err:
                return ExecutionResult(ErrorStatus.GENERAL_FAILURE, f"fast burst: a malformed answer: {err}")
        if kind == fastpacket.LEARNED:
            if len(payload) < fastpacket.LEARNED_HEADER.size:
                return ExecutionResult(ErrorStatus.GENERAL_FAILURE, "fast burst: a malformed LEARNED packet")
            (layout,) = fastpacket.LEARNED_HEADER.unpack_from(payload)
            if layout and key is not None and len(self._layouts) < fastpacket.MAX_LAYOUTS:
                self._layouts[key] = layout
            payload = payload[fastpacket.LEARNED_HEADER.size :]
        elif kind != fastring.RESULT:
            return ExecutionResult(ErrorStatus.GENERAL_FAILURE, f"fast burst: an answer of kind {kind}")
        try:
            result = spb.ExecuteResult.FromString(payload)
        except DecodeError:
            return ExecutionResult(ErrorStatus.GENERAL_FAILURE, "fast burst: the result packet is not an ExecuteResult")
        return wire.execution_result_from(result)

    def _close_ends(self) -> None:
        self.doorbell.close()
        self.requests.close()
        self.results.close()
        self._mm.close()


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
            status, message = wire.status_from(first)
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
        packet = self.execution_packet(request, options, handle, session, tag)
        return None if packet is None else self.send(*packet, limit, wait)

    def execute_planned(
        self, planned: fastpacket.Planned, parts: list[Any], measure: bool, timeout: float | None
    ) -> ExecutionResult | None:
        """A burst's execution of a numpy call plan's layout from its pools' bytes (``parts``, in
        order; :meth:`planned_packet`): a compact call when the burst granted the layout an id,
        else None (nothing sent: the call takes :meth:`execute`, whose first call of a layout
        asks for the id). Failures come back in the result, as :meth:`execute`'s."""
        layout = self.granted(planned, "")
        if not layout:
            return None
        payload = self.planned_packet(layout, b"", measure, 0, timeout, parts, planned.body)
        if payload is None:
            return None
        return self.send(fastpacket.CALL, payload, ("", planned.shape))

    def send(
        self, kind: int, payload: fastring.Payload, key: _Key | None, limit: float | None = None, wait: bool = True
    ) -> ExecutionResult | None:
        """:meth:`execute` of a packet already made (``execution_packet``, ``planned_packet``):
        its result, or None (nothing sent) when, unless ``wait``, another thread is using the
        rings."""
        if not self._lock.acquire(blocking=wait):
            return None
        try:
            try:
                self._remote.check("fast burst")
            except HalError as err:
                return failed_result(err)
            if self._closed or self.doorbell.stopped:
                return self._ended()
            try:
                self.requests.write(kind, payload)
            except fastring.RingError as err:
                return ExecutionResult(ErrorStatus.GENERAL_FAILURE, f"fast burst: {err}")
            try:
                self.doorbell.ring()
            except OSError:  # the server closed its end: its stream is ending too
                return self._ended()
            return self._await_result(key, None if limit is None else time.monotonic() + limit, kind)
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
            try:
                self.requests.write(kind, payload)
            except fastring.RingError as err:
                raise GeneralFailure(f"same-host queue: {err}") from None
            try:
                self.doorbell.ring()
            except OSError:  # the server closed its end: its stream is ending too
                raise QueueEnded(self._ended()) from None
            return self._await_packet(timeout, kind if key is None else key)
        finally:
            self._lock.release()

    def _await_packet(self, timeout: float, key: object = None) -> tuple[int, bytes]:
        """Wait for the next answer packet, for up to ``timeout`` seconds (:meth:`exchange`'s
        failures). Holds ``_lock``."""
        packet = self._wait(key, time.monotonic() + timeout)
        if packet is None:
            raise QueueEnded(self._ended())
        return packet

    def _wait(self, key: object, end: float | None) -> tuple[int, bytes] | None:
        """The next answer packet (module docstring: the hybrid wait); None once the queue
        ended (its doorbell stopped), QueueTimeout past ``end``, GENERAL_FAILURE for a
        packet that breaks the ring's rules. Holds ``_lock``."""
        rung = time.monotonic()
        # A closed lookout (a busy machine, one CPU) costs the call nothing more.
        allowed = self.lookout.window() if self.hybrid_wait else 0.0
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
            packet = self.read_answer()
            if packet is not None:
                if pace is not None:
                    pace.took(watched, time.monotonic() - rung, early)
                return packet

    def _watch(self, rung: float, expected: float, end: float | None, allowed: float = WATCH_MAX_S) -> bool:
        """The hybrid wait's watch: sleep until a little before the answer is expected, then
        look at the result ring's head, yielding the core between looks, until a packet is
        published (its doorbell byte follows or came: the caller's ``wait`` takes it), the
        queue is stopping, or the bounded window passes (at most ``allowed`` seconds of
        looking, charged to the lookout). Whether the first look found it."""
        lead = min(expected * POLL_LEAD_SHARE, POLL_LEAD_MAX_S)
        last = rung + expected + POLL_WINDOW_S
        if end is not None:
            last = min(last, end)
        pending, doorbell, monotonic = self.results.pending, self.doorbell, time.monotonic
        nap = rung + expected - lead - monotonic()
        if nap >= POLL_MIN_NAP_S:
            fine_timers()
            time.sleep(nap)
        if pending():
            return True
        start = monotonic()
        last = min(last, start + allowed)
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
            result = self._await_result(None)
        return result or ExecutionResult(ErrorStatus.GENERAL_FAILURE, "the queue stepped aside")

    def _await_result(self, key: _Key | None, end: float | None = None, kind: int = 0) -> ExecutionResult | None:
        """Wait for the result packet (or the burst's end; past ``end``, QueueTimeout): its
        result (:meth:`result_of`). Holds ``_lock``."""
        try:
            packet = self._wait(kind if key is None else key, end)
        except GeneralFailure as err:
            return failed_result(err)
        if packet is None:
            return self._ended()
        return self.result_of(packet, key)

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
    if event is not None and wire.status_from(event)[0] != ErrorStatus.NONE:
        status, message = wire.status_from(event)
        return ExecutionResult(status, f"fast burst: {message}")
    return ExecutionResult(ErrorStatus.GENERAL_FAILURE, "the fast burst ended (closed by the server); open a new burst")

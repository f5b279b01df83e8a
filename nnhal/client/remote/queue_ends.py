"""What both clients' same-host links share (:class:`QueueEnds`): collecting a queue from
the server's handover socket (its descriptors checked before they are mapped), the rings,
the doorbell, the granted request layouts and an execution's packets, each checked as
untrusted input. The sync client's link waits with blocking reads
(:class:`nnhal.client.remote.fastpath.FastBurstLink`), the asyncio client's through its
event loop (:mod:`nnhal.client.remote.aio_queue_link`).
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import mmap
import os
import socket
from typing import TYPE_CHECKING, Any, Literal, overload

import grpc
from google.protobuf.message import DecodeError

from nnhal.client.remote.messages import ExecutionOptions, fill_execution
from nnhal.client.remote.pace import (
    Pace,
)
from nnhal.client.remote.transport import remaining_time
from nnhal.core import fastanswer, fastpacket, fastring, samehost, wire_result
from nnhal.core.doorbell import EARLY, Doorbell
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure
from nnhal.core.lookout import LOAD
from nnhal.core.types import ExecutionResult, InlinePool, MemoryPool, PoolData, Request, arguments_key
from nnhal.proto import fastpath_pb2 as fpb, service_pb2 as spb

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

#: Seconds to collect the queue once the server named its socket.
HANDOVER_TIMEOUT_S = 10.0
#: Room kept in the result ring for what an answer carries besides its inline output pools.
RESULT_ENVELOPE_BYTES = 16 << 10
_ANSWER = fastpacket.ANSWER
_RESULT_KINDS = (fastring.RESULT, fastpacket.LEARNED, _ANSWER)
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
LayoutRef = tuple[str, fastpacket.LayoutKey]


class _CallTemplate:
    """A granted layout's compact call as the client sends it (``QueueEnds.execution_packet``):
    the argument tuples and model it is for, its pools' lengths and sizes, its id."""

    __slots__ = (
        "arguments",
        "body",
        "fixed",
        "handle",
        "header",
        "inputs",
        "key",
        "layout",
        "options",
        "outputs",
        "padded",
        "sizes",
    )

    def __init__(self, key: LayoutRef, layout: int) -> None:
        self.key = key
        self.handle, (self.inputs, self.outputs, self.sizes) = key
        #: The arguments' fields (``types.arguments_key``): what equal arguments of a new
        #: request are known by, compared in C.
        self.arguments = (arguments_key(self.inputs), arguments_key(self.outputs))
        self.layout = layout
        lengths = [n for n, _ in self.sizes]
        body = fastpacket.body_spans(lengths)[1]
        #: The length of a call's body (the pools' bytes and the pads aligning them).
        self.body = body
        #: Whether the body has pads (else it is the pools' bytes back to back).
        self.padded = body != sum(lengths)
        #: A call's length but for its tag: the header with its pad, and the body.
        self.fixed = fastpacket.CALL_HEAD_BYTES + body
        #: The last options without a deadline that a call was made with (options are frozen,
        #: the plain ones one shared value) and the header they make: a repeated call's.
        self.options: ExecutionOptions | None = None
        self.header = b""

    def datas(self, pools: tuple[MemoryPool, ...]) -> list[PoolData] | None:
        """The pools' bytes (views of bytes) as the call's body carries them (with the pads
        aligning them) when they are inline and of this layout's lengths and sizes, else None."""
        sizes = self.sizes
        if len(pools) != len(sizes):
            return None
        datas: list[PoolData] = []
        # Indexes, not a zip of the pools with their lengths and sizes, and the usual pool (its
        # size the layout's) compared whole: a repeated call's every pool passes here.
        i = 0
        for pool in pools:
            if type(pool) is not InlinePool:
                return None
            data = pool.data
            if type(data) is memoryview:
                if data.format != "B" or data.ndim != 1:
                    data = data.cast("B")
                n = data.nbytes
            else:
                n = len(data)
            if (n, pool.size) != sizes[i]:  # else: a size below its length counts as the length
                length, size = sizes[i]
                if n != length or max(pool.size, n) != size:
                    return None
            datas.append(data)
            i += 1  # noqa: SIM113  (enumerate costs a tuple per pool)
        return fastpacket.body_parts(datas) if self.padded else datas

    def packet(self, tag: bytes, options: ExecutionOptions, datas: list[PoolData]) -> fastring.Payload:
        """The compact call's payload: ``tag``, the header of this call's scalars (padded), the
        body ``datas`` (a small one joined at once: the ring copies it once)."""
        header = self.header if options is self.options else self._header(options)
        length = len(tag) + self.fixed
        if length <= fastring.CHECKED_BYTES:
            return b"".join((tag, header, *datas))
        # The tag and header are one part: the ring checksums and copies one part fewer.
        return fastring.Gathered([tag + header, *datas], length)

    def _header(self, options: ExecutionOptions) -> bytes:
        """The header of a call with ``options``, kept for the next call with the same options
        when they have no deadline (a deadline's remainder changes from call to call)."""
        remaining = (
            options.timeout if options.deadline_at is None else remaining_time(options.timeout, options.deadline_at)
        )
        deadline = None if remaining is None else fastpacket.remaining_ns(remaining)
        header = fastpacket.call_head(self.layout, options.measure, deadline, options.loop_timeout_ns)
        if remaining is None:
            self.options, self.header = options, header
        return header


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
        self.results: fastring.Consumer[bytes] = fastring.Consumer(
            self._mm, self.ring_bytes, False, _QUEUE_KINDS if executions else _RESULT_KINDS
        )
        #: The layouts the server granted ids for (:mod:`nnhal.core.fastpacket`).
        self._layouts: dict[LayoutRef, int] = {}
        #: The compact call of the last granted layout sent (``execution_packet``).
        self._template: _CallTemplate | None = None
        self._answers = fastanswer.AnswerReader()
        #: This queue among the process's (:meth:`granted`): never reused, unlike ``id()``.
        self.serial = next(_SERIALS)
        #: The hybrid wait's paces by kind of call (the last key's looked up by identity
        #: first: a layout key hashes slowly).
        self._paces: dict[object, Pace] = {}
        self._pace_key: object = None
        self._pace = Pace()

    def post(self, kind: int, payload: fastring.Payload) -> bool:
        """Write one packet into the request ring and ring the server; False when the server
        closed its end of the doorbell (its stream is ending too: the queue ended). Raises
        GENERAL_FAILURE for a packet the ring refuses. What both links send with, whatever
        waits for the answer."""
        try:
            self.requests.write(kind, payload)
        except fastring.RingError as err:
            raise GeneralFailure(f"same-host queue: {err}") from None
        try:
            self.doorbell.ring()
        except OSError:
            return False
        return True

    def pace(self, key: object) -> Pace:
        """What the hybrid wait knows of calls of ``key``."""
        if key is self._pace_key:
            return self._pace
        if key == self._pace_key:  # equal: a planned call's new tuple, a burst's new template's key
            # Known by identity from now on: a key of request arguments compares them through
            # their dataclasses' Python equality.
            self._pace_key = key
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
    ) -> tuple[int, fastring.Payload, LayoutRef | None] | None:
        """The packet (kind, payload) of one execution and the layout key its answer may grant
        an id for; None when it or its largest possible answer does not fit the rings. The
        payload is in parts (``tag``, the header, the pools' bytes as the request holds them):
        the ring copies each once."""
        t = self._template
        # The numpy client sends the same argument tuples for a layout, a burst loop equal ones:
        # its compact call is known by their identity (else their fields, read and compared in
        # C: the arguments' dataclass equality and hashes are Python calls per argument) and the
        # pools' sizes, with nothing re-checked that the template's first packet passed (the
        # packet and its answer fit the rings: the same output pools' sizes).
        if (
            t is not None
            and handle == t.handle
            and not options.profile
            and (
                (request.inputs is t.inputs and request.outputs is t.outputs)
                or (arguments_key(request.inputs), arguments_key(request.outputs)) == t.arguments
            )
        ):
            datas = t.datas(request.pools)
            if datas is not None:
                packet = t.packet(tag, options, datas)
                return (fastpacket.CALL, packet, t.key) if self.requests.fits(len(packet)) else None
        if not self._answer_fits(request):
            return None
        shape = None if options.profile else fastpacket.layout_key(request.inputs, request.outputs, request.pools)
        key: LayoutRef | None = None
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
        A small packet is joined at once (the ring copies it once), a large one goes in parts —
        and when it asks to be rung early (:meth:`wake_early`), the server is rung early too
        (:meth:`ring_early`): the caller must send it next."""
        length = len(tag) + fastpacket.CALL_HEAD_BYTES + body
        if length > self.requests.max_payload:
            return None
        deadline = None if remaining is None else fastpacket.remaining_ns(remaining)
        early = self.wake_early()
        header = fastpacket.call_head(layout, measure, deadline, loop_timeout_ns, early)
        if length <= fastring.CHECKED_BYTES:
            return b"".join((tag, header, *parts))
        if early and length >= fastring.DIRECT_BYTES and LOAD.idle():
            # A waiter that looks may ask the server to look too: rung early, the server's
            # wake-up (tens of µs across cores) overlaps this packet's copy into the ring. Only
            # with a CPU idle: woken onto this thread's core, the server would take it from the
            # copy it is to overlap (measured: 70-100 µs from the early ring to the packet's
            # ring then, 30-50 µs otherwise).
            self.ring_early()
        # The tag and header are one part: the ring checksums and copies one part fewer. A loop,
        # not a generator: that would make a function object and a generator per call.
        gathered: list[bytes | memoryview] = [tag + header]
        for part in parts:
            gathered.append(memoryview(part).cast("B"))
        return fastring.Gathered(gathered, length)

    def ring_early(self) -> None:
        """Tell the server a packet is being written (``doorbell.EARLY``): its serving thread,
        woken now, looks for the packet's own ring rather than sleeping again
        (``QueueServer._next_events``). A closed server end is seen by the packet's own ring."""
        try:
            self.doorbell.ring(EARLY)
        except OSError:
            pass

    def wake_early(self) -> bool:
        """Whether a numpy call's compact call (``planned_packet``) asks to be rung as soon as
        its answer is near (``fastpacket.WAKE_EARLY``): only a waiter that, woken with no
        answer yet, looks for the answer's own ring before it sleeps again (the sync link,
        while it may look) asks."""
        return False

    def read_answer(self) -> tuple[int, bytes] | None:
        """The next answer packet, None when none is waiting; GENERAL_FAILURE (the ring
        resynchronised) for one that breaks the ring's rules."""
        try:
            return self.results.read()
        except fastring.RingError as err:
            self.results.resync()
            raise GeneralFailure(f"same-host queue: a malformed answer packet: {err}") from None

    @overload
    def result_of(
        self, packet: tuple[int, bytes], key: LayoutRef | None, apart: Literal[False] = False
    ) -> ExecutionResult | None: ...
    @overload
    def result_of(
        self, packet: tuple[int, bytes], key: LayoutRef | None, apart: Literal[True]
    ) -> fastanswer.Apart | None: ...
    @overload
    def result_of(
        self, packet: tuple[int, bytes], key: LayoutRef | None, apart: bool
    ) -> ExecutionResult | fastanswer.Apart | None: ...

    def result_of(
        self, packet: tuple[int, bytes], key: LayoutRef | None, apart: bool = False
    ) -> ExecutionResult | fastanswer.Apart | None:
        """The execution result an answer packet carries (a layout id it grants remembered for
        ``key``), with ``apart`` read apart (``fastanswer.Apart``: no result made for a compact
        answer like the last); None when a session's queue steps aside, CarriedAbort when it
        ended the call as gRPC would have. A malformed answer is a GENERAL_FAILURE result."""
        kind, payload = packet
        if kind == _ANSWER:  # first: a repeated call's usual answer
            try:
                return self._answers.read(payload, apart)
            except fastpacket.PacketError as err:
                result: ExecutionResult | None = ExecutionResult(
                    ErrorStatus.GENERAL_FAILURE, f"fast burst: a malformed answer: {err}"
                )
        else:
            result = self._result_of(kind, payload, key)
        return fastanswer.apart_of(result) if apart and result is not None else result

    def _result_of(self, kind: int, payload: bytes, key: LayoutRef | None) -> ExecutionResult | None:
        """``result_of`` of a packet of another kind than ANSWER."""
        if kind == samehost.STEP_ASIDE:  # a session's queue: this call takes gRPC
            return None
        if kind == samehost.ABORTED:
            try:
                raise CarriedAbort(*samehost.decode_aborted(payload))
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
        return wire_result.execution_result_from(result)

    def _close_ends(self) -> None:
        self.doorbell.close()
        self.requests.close()
        self.results.close()
        self._mm.close()

"""The FastPath service: same-host fast bursts, set up, authorised and kept alive over gRPC.

``openFastBurst`` is granted only when every one of these holds, else its one
event carries the refusal (GENERAL_FAILURE when the fast path is not offered,
INVALID_ARGUMENT for a bad session or model, RESOURCE_EXHAUSTED_* past a cap or
the memory budget) and the stream ends:

- the server has the fast path on (``ServerOptions.fast_path``) and the system
  has memfd seals and descriptor passing (Linux);
- the caller is on the server's host: its session's peer and this call's are a
  unix socket or loopback, and the server has a shared-memory directory (where
  the handover socket lives) — DESIGN §6's same-host rule;
- the session is open and owns the prepared model;
- the long-call caps admit one more burst (an idle fast burst holds no thread,
  as an idle gRPC burst holds none) and the budget admits its two rings
  (charged to the session as "fast burst rings").

Then the first event names the handover socket and token
(:mod:`nnhal.server.fastpath`), the client collects its queue, and the queue is
served without a thread of its own: the device's one queue server thread
(:class:`nnhal.server.queue_server.QueueServer`) waits on every open queue's doorbell and
answers each queue's packets in order — a compact call of a queue whose packets run
short (no fault armed, no injected delay) on that thread, any other packet on a worker
thread — so that busy queues pay no thread hop per packet, however many there are.
Every full request packet is parsed as an ExecuteRequest (a packet that is not one, or
names another session or model, is refused with INVALID_ARGUMENT) and runs exactly as
a gRPC burst execution does —
same launch checks, statuses, drain refusal and metrics — and its ExecuteResult
goes back through the result ring. A full request asking for a layout id (kind
``fastpacket.LEARN``) is granted one when it passed validation and all its pools
are inline; a compact call of a granted layout (``fastpacket.CALL``: the id, the
per-call scalars, the raw pool bytes) is rebuilt from the validated layout and
runs through the same ``Executions.execute``; an unknown id or a body not of the
layout's length is INVALID_ARGUMENT and the burst serves on. The stream stays open as the burst's liveness
channel: when the client's connection dies or the client cancels it, gRPC ends
the call and the queue is stopped; when the server stops, likewise. A burst the
server ends on its own (the client broke the queue protocol) gets a last event
with the status.

With ``executions`` set, ``openFastBurst`` opens the session's same-host execution queue
instead (no prepared model; not gated as a burst; counted as a "same-host queue" of the
session — capped per session and by a total of its own, outside the long-call total,
since an idle queue holds no thread (``long_calls.QUEUE``); its rings are charged to the
session's client; its first event says the cap, ``max_queues``, so that a client carrying
concurrent calls opens one queue per call in flight, up to it): its packets carry every execution form of the session
(:mod:`nnhal.server.rpc.samehost`), and ``executeSynchronously_1_3`` also as the burst's
full, learning and compact packets above — each naming its prepared model, tagged with
the call's request id and fault scope — served as ``executeSynchronously_1_3`` counted
under ``same_host``. An answer too large for the ring makes the queue step aside (the
client runs that call over gRPC).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor, Future
from functools import partial
from typing import Any, cast

from google.protobuf.message import DecodeError
from grpc import aio

from nnhal.core import fastanswer, fastpacket, fastring, lookout, samehost, wire_request
from nnhal.core.doorbell import HERALD
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure, HalError, InvalidArgument
from nnhal.core.fastpacket import PacketError
from nnhal.core.types import ExecutionResult
from nnhal.proto import fastpath_pb2 as fpb, fastpath_pb2_grpc as fpgrpc, service_pb2 as spb
from nnhal.server import fastpath
from nnhal.server.budget import MemoryBudget
from nnhal.server.executions import Executions, Method, Refused
from nnhal.server.executions.afterwards import Afterwards
from nnhal.server.executions.faults import BURST, KINDS, Liveness
from nnhal.server.executions.lean import Compact, launch_compact
from nnhal.server.executions.long_calls import QUEUE, once
from nnhal.server.executions.methods import CARRIER
from nnhal.server.fastpath import FastQueue
from nnhal.server.queue_server import QueueServer
from nnhal.server.rpc.common import result_to, status_to
from nnhal.server.rpc.identity import stream_client
from nnhal.server.rpc.prepared_model_servicer import EXECUTION_FAULTS, check_burst_fields, execution_from
from nnhal.server.rpc.samehost import QueueCall, SameHostMethods
from nnhal.server.rpc.sync_handlers import pool_of
from nnhal.server.session import Session, is_local_address

#: The client collects its queue right after the first event; this is generous.
HANDOVER_TIMEOUT_S = 10.0
RINGS = "fast burst rings"
_METHOD = "openFastBurst"


def _packet(refused: Refused) -> tuple[int, bytes]:
    """A result packet carrying a refusal (an ExecuteResult with its status)."""
    return fastring.RESULT, status_to(spb.ExecuteResult(), refused).SerializeToString()


def _violation(status: ErrorStatus, message: str) -> bytes:
    """The queue's answer to a packet breaking its protocol (``FastQueue.serve_ready``)."""
    return _packet(Refused(status, message))[1]


def _step_aside(size: int) -> tuple[int, bytes]:
    """A same-host queue's answer too large for its ring: the client runs the call over gRPC."""
    return samehost.STEP_ASIDE, f"the answer ({size} bytes) does not fit the queue's ring".encode()


def _quick(x: Executions, session: Session, kind: int) -> bool:
    """Whether a packet of ``kind`` may run on the queue server's thread: a compact call (a
    validated layout of inline pools: a small sync execution), with no fault armed and no
    injected delay to hold that thread up."""
    return kind == fastpacket.CALL and not x.faults.armed and not session.faults.execute_delay_ms


def _settle(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


class _Opened:
    """What an open queue holds (``close``: given back once, on any thread)."""

    def __init__(self, session: str, budget: MemoryBudget, leave: Callable[[], None]) -> None:
        self._session = session
        self._budget = budget
        self._leave = leave
        self.charged = 0
        self.queue: FastQueue = cast(FastQueue, None)  # set once made (``FastPathServicer._open``)
        self.handle: fastpath.Handle = cast(fastpath.Handle, None)
        self.context = contextvars.Context()
        #: Whether a packet of this kind may be answered on the queue server's thread.
        self.quick: Callable[[int], bool] = lambda kind: False
        #: What its packets' executions leave for after their answers (run by the queue server).
        self.after = Afterwards()
        self.close = once(self._close)

    def _close(self) -> None:
        try:
            if self.queue is not None:
                self.queue.close()
        finally:
            if self.charged:
                self._budget.uncharge(self._session, self.charged, RINGS)
            self._leave()


def _discard(opening: Future[Any]) -> None:
    """Give back a queue made for a call that ended meanwhile."""
    if not opening.cancelled() and opening.exception() is None and isinstance(opening.result(), _Opened):
        opening.result().close()


def _after(step: Future[Any] | None, fn: Callable[[], None]) -> None:
    """``fn()`` now, or once ``step`` (a worker thread's, perhaps still running) is done."""
    if step is None or step.done():
        fn()
    else:
        step.add_done_callback(lambda _step: fn())


class FastPathServicer(fpgrpc.FastPathServicer):
    """An adapter of the device's ``Executions``: each packet is one of its burst executions."""

    def __init__(self, executions: Executions, enabled: bool = True) -> None:
        self.executions = executions
        self.driver = executions.driver
        self._method = executions.method(_METHOD, "a fast burst execution", fault=BURST, transport="same_host")
        self._enabled = enabled and fastpath.available()
        self._methods: SameHostMethods | None = None  # the same-host queue's forms, made at its first use
        self._lock = threading.Lock()  # a leaf: guards the one below
        self._server: QueueServer | None = None  # serves every open queue, made at the first

    def _authorise(self, request: fpb.FastBurstRequest, peer: str) -> Session:
        policy = self.driver.config.shared_memory
        if not self._enabled:
            raise GeneralFailure("this server does not offer the fast path; use the gRPC burst")
        if request.executions:  # the session's queue: every form, each gated and faulted per call
            if request.prepared_model:
                raise InvalidArgument("a same-host execution queue names no prepared model")
            return self._local_session(request, peer, policy is not None)
        arrival = self.executions.arrive(self.executions.method(BURST, timer=None, fault=None))
        if arrival is not None and arrival.error is not None:
            raise arrival.error  # a fast burst is a burst: HAL 1.2 on
        faults = self.executions.faults
        if faults.armed and any(f.method == BURST and f.kind == "abort" for f in faults.pending()):
            # An injected abort is a transport event of the gRPC stream: the client falls back to it.
            raise GeneralFailure("the fast path steps aside while a burst abort is injected; use the gRPC burst")
        session = self._local_session(request, peer, policy is not None)
        self.driver.prepared(session, request.prepared_model)  # INVALID_ARGUMENT unless the session owns it
        return session

    def _local_session(self, request: fpb.FastBurstRequest, peer: str, shm: bool) -> Session:
        """The caller's session, when it and this call come from the server's host."""
        if not shm:
            raise GeneralFailure("this server has no shared-memory directory, which the fast path needs")
        session = self.driver.session(request.session)
        if not (session.is_local and is_local_address(peer)):
            raise GeneralFailure("the fast path is for clients on the server's host (unix socket or loopback)")
        return session

    async def openFastBurst(
        self, request: fpb.FastBurstRequest, context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[fpb.FastBurstEvent]:
        pool = pool_of(asyncio.get_running_loop())
        peer, client = context.peer() or "", stream_client(context)
        opening = pool.submit(contextvars.copy_context().run, self._open, request, peer, client)
        try:
            opened = await asyncio.wrap_future(opening)
        except asyncio.CancelledError:
            opening.add_done_callback(_discard)  # the call ended while its queue was being made
            raise
        if isinstance(opened, fpb.FastBurstEvent):
            yield opened  # refused
            return
        queue = opened.queue
        step: Future[Any] | None = None  # what a worker thread does for the queue now
        served = False  # handed to the queue server, which then gives it back (``opened.close``)
        try:
            context.add_done_callback(lambda _context: queue.stop())
            # A session's queue says how many the session may hold: its client opens more
            # to carry concurrent calls, up to that (the cap ``_open`` enforces).
            cap = self.executions.long_calls.per_client[QUEUE] if request.executions else 0
            yield fpb.FastBurstEvent(
                socket_path=str(queue.socket_path), token=queue.token, ring_bytes=queue.ring_bytes, max_queues=cap
            )
            step = pool.submit(queue.hand_over, HANDOVER_TIMEOUT_S)
            await asyncio.wrap_future(step)
            step = None
            # While idle the queue holds no thread of its own: the queue server's one thread
            # waits on every queue's doorbell and answers their packets, in each queue's context
            # (a queue's: the carrier and each packet's request id stay in it).
            loop = asyncio.get_running_loop()
            ended: asyncio.Future[None] = loop.create_future()

            def on_end() -> None:
                opened.close()
                try:
                    loop.call_soon_threadsafe(_settle, ended)
                except RuntimeError:  # the loop is closed: the server stopped
                    pass

            self._queue_server(pool).serve(
                queue, opened.handle, _violation, opened.quick, opened.context.run, on_end, opened.after
            )
            served = True
            await ended
            if queue.violation:
                yield self._event(self.executions.refuse(self._method, InvalidArgument(queue.violation)))
        except HalError as err:
            step = None
            yield self._event(self.executions.refuse(self._method, err))
        finally:
            queue.stop()  # a served queue ends on the queue server's thread, which closes it
            if not served:
                _after(step, opened.close)  # never under a handover still running

    def _open(self, request: fpb.FastBurstRequest, peer: str, client: str) -> _Opened | fpb.FastBurstEvent:
        """The authorised, admitted and charged queue (on a worker thread), or the refusal's event.
        ``client``: whose burst it is for the long-call caps (``identity.stream_client``)."""
        try:
            session = self._authorise(request, peer)
            if request.executions:  # the session's: threadless while idle, its own caps
                leave = self.executions.long_calls.open(QUEUE, session.id)
            else:
                leave = self.executions.long_calls.open("burst", client)
        except HalError as err:
            return self._event(self.executions.refuse(self._method, err))
        opened = _Opened(session.id, self.driver.budget, leave)
        try:
            ring_bytes = fastring.grant_ring_bytes(request.ring_bytes)
            self.driver.budget.charge(session.id, 2 * ring_bytes, RINGS)
            opened.charged = 2 * ring_bytes
            policy = self.driver.config.shared_memory
            assert policy is not None  # checked by _authorise
            kinds = (samehost.METHOD, *fastpath.REQUEST_KINDS) if request.executions else fastpath.REQUEST_KINDS
            opened.queue = queue = FastQueue.create(policy.directory, policy.prefix, ring_bytes, kinds)
            if request.executions:
                methods = self._same_host()
                call = QueueCall(lambda: not queue.stopping, peer)
                packets, calls = self._packets(session, None, methods.sync, call, queue.reserve_answer, opened.after)
                opened.handle = methods.handler(session, call, packets, opened.after, calls)
                queue.oversize = _step_aside
                opened.context = contextvars.Context()
                opened.context.run(CARRIER.set, "same_host")
            else:
                opened.handle = self._handler(
                    session, request.prepared_model, reserve=queue.reserve_answer, after=opened.after
                )
                opened.context = contextvars.copy_context()
            opened.quick = partial(_quick, self.executions, session)
            return opened
        except HalError as err:
            opened.close()
            return self._event(self.executions.refuse(self._method, err))
        except BaseException:
            opened.close()
            raise

    def _queue_server(self, pool: Executor) -> QueueServer:
        with self._lock:
            if self._server is None:
                self._server = QueueServer(pool.submit)
            return self._server

    def _same_host(self) -> SameHostMethods:
        if self._methods is None:
            self._methods = SameHostMethods(self.executions)
        return self._methods

    @staticmethod
    def _event(refused: Refused) -> fpb.FastBurstEvent:
        return status_to(fpb.FastBurstEvent(), refused)

    def _handler(self, session: Session, handle: str | None, *rest: Any, **named: Any) -> fastpath.ViewHandle:
        """The packet handler of one fast burst or session queue (:meth:`_packets`' arguments)."""
        return self._packets(session, handle, *rest, **named)[0]

    def _packets(
        self,
        session: Session,
        handle: str | None,
        method: Method | None = None,
        live: Liveness | None = None,
        reserve: Callable[[int], memoryview | None] | None = None,
        after: Afterwards | None = None,
    ) -> tuple[fastpath.ViewHandle, Callable[[bytes | memoryview], tuple[int, fastring.Payload]]]:
        """The packet handler of one fast burst: full requests, requests asking for a layout
        id, and compact calls of a granted layout (:mod:`nnhal.core.fastpacket`) — and its
        handler of compact calls alone (a compact call's payload: what a session's queue hands
        it straight, the kind resolved there once). With
        ``handle`` None, those of a session's same-host queue: executions of any prepared
        model of the session (each full request names it; a layout is granted for one), as
        ``method`` (executeSynchronously_1_3 there), alive while ``live`` is. ``reserve``:
        the queue's ``FastQueue.reserve_answer`` (a granted layout's answers in place; None:
        written the usual way); ``after``: the queue's work for after its answers, where the
        executions leave what need not precede them (``Executions.execute``; the queue server
        runs it once each answer is written)."""
        x = self.executions
        driver = self.driver
        m: Method = method or self._method
        burst = handle is not None
        # The fault kinds an execution takes: a burst's per execution (its abort is taken
        # when it opens), any on a queue (whose abort steps aside before it gets here).
        kinds = EXECUTION_FAULTS if burst else KINDS
        layouts: dict[int, Compact] = {}  # granted layouts, by id (from 1)
        # An early ring wakes a caller that then looks for the answer: only with a core to spare.
        spare = lookout.LOAD.spare
        decode_call, monotonic_ns, answered = fastpacket.decode_call, time.monotonic_ns, fastanswer.ANSWERED

        def refuse(message: str) -> tuple[int, bytes]:
            """A packet the burst cannot run (not counted: it names no execution)."""
            return _packet(Refused(ErrorStatus.INVALID_ARGUMENT, message))

        def run_full(kind: int, payload: bytes) -> tuple[int, bytes]:
            try:
                msg = spb.ExecuteRequest.FromString(payload)
            except DecodeError:
                return refuse("a fast burst packet that is not an ExecuteRequest")
            if handle is not None:
                if msg.session not in ("", session.id) or msg.prepared_model not in ("", handle):
                    return refuse("a fast burst executes only the prepared model of the session it was opened for")
                msg.session = session.id
                msg.prepared_model = handle
                try:
                    check_burst_fields(x, msg)  # what the device's level lacks, as on the gRPC burst
                except HalError as err:
                    return _packet(x.refuse(m, err))
            elif msg.session != session.id:
                return refuse("same-host queue: a call for another session than the queue's")
            # The faults a gRPC execution of this kind takes (an injected status, a stall, an exit).
            arrival = x.arrive(m, kinds)
            if kind != fastpacket.LEARN:
                result = x.execute(m, partial(execution_from, msg), live, arrival, after=after)
                return fastring.RESULT, result_to(result).SerializeToString()
            try:
                canonical = wire_request.request_from(msg.request)
            except HalError as err:
                return _packet(x.refuse(m, err))
            result = x.execute(m, partial(execution_from, msg, canonical), live, arrival, after=after)
            answer = result_to(result)
            key = fastpacket.layout_key(canonical.inputs, canonical.outputs, canonical.pools)
            granted = 0
            # Granted once the layout passed validation (its plan is learned), within the cap.
            room = len(layouts) < fastpacket.MAX_LAYOUTS
            if room and key is not None and result.status in fastanswer.ANSWERED and not msg.profile:
                granted = len(layouts) + 1
                layouts[granted] = Compact(session.id, msg.prepared_model, key, reserve)
            return fastpacket.LEARNED, fastpacket.LEARNED_HEADER.pack(granted) + answer.SerializeToString()

        def run_call(payload: bytes | memoryview) -> tuple[int, fastring.Payload]:
            try:
                layout, measure, deadline, loop, body, wake_early = decode_call(payload)
                compact = layouts.get(layout)
                if compact is None:
                    return refuse(f"fast burst: unknown layout id {layout}")
                compact.check(body)
            except PacketError as err:
                return refuse(f"malformed fast burst call: {err}")
            if burst:
                try:  # a layout holds inline pools only: no token to look for
                    x.check_burst_fields(deadline is not None, loop, False)
                except HalError as err:
                    return _packet(x.refuse(m, err))
            arrival = x.arrive(m, kinds)
            if wake_early and spare():  # its caller looks for the answer's ring after an early one
                HERALD.arm()
            # The deadline travels as the time remaining, re-based on this host's clock at arrival.
            if deadline is not None:
                deadline += monotonic_ns()
            # The lean launch from the call's bytes (no fault taken: a fault's path is the full one).
            fast = (
                None if arrival is not None else partial(launch_compact, driver, compact, body, measure, deadline, loop)
            )
            result = x.execute(
                m, partial(compact.execution, body, measure, deadline, loop), live, arrival, None, fast, after=after
            )
            if isinstance(result, ExecutionResult) and result.status in answered:
                return fastpacket.ANSWER, compact.answers.write(result)
            return fastring.RESULT, result_to(result).SerializeToString()

        def handle_packet(kind: int, payload: bytes | memoryview) -> tuple[int, fastring.Payload]:
            if kind == fastpacket.CALL:
                return run_call(payload)  # read in place: the inputs are not copied again
            return run_full(kind, bytes(payload))

        return handle_packet, run_call

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
- the long-call caps admit one more burst (a fast burst holds a worker thread
  for its life, serving its queue; an idle gRPC burst holds none) and the budget
  admits its two rings
  (charged to the session as "fast burst rings").

Then the first event names the handover socket and token
(:mod:`nnhal.server.fastpath`), the client collects its queue, and this call's
thread serves the queue: every full request packet is parsed as an
ExecuteRequest (a packet that is not one, or names another session or model, is
refused with INVALID_ARGUMENT) and runs exactly as a gRPC burst execution does —
same launch checks, statuses, drain refusal and metrics — and its ExecuteResult
goes back through the result ring. A full request asking for a layout id (kind
``fastpacket.LEARN``) is granted one when it passed validation and all its pools
are inline; a compact call of a granted layout (``fastpacket.CALL``: the id, the
per-call scalars, the raw pool bytes) is rebuilt from the validated layout and
runs through the same ``execute_sync``; an unknown id or a body not of the
layout's length is INVALID_ARGUMENT and the burst serves on. The stream stays open as the burst's liveness
channel: when the client's connection dies or the client cancels it, gRPC ends
the call and the queue is stopped; when the server stops, likewise. A burst the
server ends on its own (the client broke the queue protocol) gets a last event
with the status.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from functools import partial

import grpc
from google.protobuf.message import DecodeError

from nnhal.core import fastpacket, fastring, wire
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure, HalError, InvalidArgument
from nnhal.core.types import ExecutionResult, Request
from nnhal.proto import fastpath_pb2 as fpb, fastpath_pb2_grpc as fpgrpc, service_pb2 as spb
from nnhal.server import fastpath
from nnhal.server.executions import Execution, Executions, Method, Refused
from nnhal.server.executions.faults import BURST
from nnhal.server.fastpath import FastQueue
from nnhal.server.rpc.common import result_to, status_to
from nnhal.server.rpc.prepared_model_servicer import EXECUTION_FAULTS, burst_refusal, execution_from
from nnhal.server.session import Session, is_local_address

#: The client collects its queue right after the first event; this is generous.
HANDOVER_TIMEOUT_S = 10.0
RINGS = "fast burst rings"
_METHOD = "openFastBurst"


def _refusal(status: ErrorStatus, message: str) -> bytes:
    """An ExecuteResult packet carrying a refusal."""
    data: bytes = wire.status_to(spb.ExecuteResult(), status, message).SerializeToString()
    return data


def _refused(err: HalError) -> tuple[int, bytes]:
    return fastring.RESULT, status_to(spb.ExecuteResult(), Refused.of(err, _METHOD)).SerializeToString()


class FastPathServicer(fpgrpc.FastPathServicer):
    """An adapter of the device's ``Executions``: each packet is one of its burst executions."""

    def __init__(self, executions: Executions, enabled: bool = True) -> None:
        self.executions = executions
        self.driver = executions.driver
        self._method = executions.method(_METHOD, "a fast burst execution", fault=BURST)
        self._enabled = enabled and fastpath.available()

    def _authorise(self, request: fpb.FastBurstRequest, peer: str) -> Session:
        policy = self.driver.config.shared_memory
        if not self._enabled:
            raise GeneralFailure("this server does not offer the fast path; use the gRPC burst")
        arrival = self.executions.arrive(self.executions.method(BURST, timer=None, fault=None))
        if arrival is not None and arrival.error is not None:
            raise arrival.error  # a fast burst is a burst: HAL 1.2 on
        faults = self.executions.faults
        if faults.armed and any(f.method == BURST and f.kind == "abort" for f in faults.pending()):
            # An injected abort is a transport event of the gRPC stream: the client falls back to it.
            raise GeneralFailure("the fast path steps aside while a burst abort is injected; use the gRPC burst")
        if policy is None:
            raise GeneralFailure("this server has no shared-memory directory, which the fast path needs")
        session = self.driver.session(request.session)
        if not (session.is_local and is_local_address(peer)):
            raise GeneralFailure("the fast path is for clients on the server's host (unix socket or loopback)")
        self.driver.prepared(session, request.prepared_model)  # INVALID_ARGUMENT unless the session owns it
        return session

    def openFastBurst(
        self, request: fpb.FastBurstRequest, context: grpc.ServicerContext
    ) -> Iterator[fpb.FastBurstEvent]:
        peer = context.peer() or ""
        record = self._method.record
        try:
            session = self._authorise(request, peer)
            leave = self.executions.long_calls.open("burst", peer)
        except HalError as err:
            record(err.error_status, None)
            yield self._event(err.error_status, err.message)
            return
        context.add_callback(leave)
        ring_bytes = fastring.grant_ring_bytes(request.ring_bytes)
        charged = 0
        queue: FastQueue | None = None
        try:
            budget = self.driver.budget
            budget.charge(session.id, 2 * ring_bytes, RINGS)
            charged = 2 * ring_bytes
            policy = self.driver.config.shared_memory
            assert policy is not None  # checked by _authorise
            queue = FastQueue.create(policy.directory, policy.prefix, ring_bytes)
            if not context.add_callback(queue.stop):
                return  # the call ended already
            yield fpb.FastBurstEvent(socket_path=str(queue.socket_path), token=queue.token, ring_bytes=ring_bytes)
            queue.hand_over(HANDOVER_TIMEOUT_S)
            queue.serve(self._handler(session, request.prepared_model), _refusal)
            if queue.violation:
                record(ErrorStatus.INVALID_ARGUMENT, None)
                yield self._event(ErrorStatus.INVALID_ARGUMENT, queue.violation)
        except HalError as err:
            record(err.error_status, None)
            yield self._event(err.error_status, err.message)
        finally:
            if queue is not None:
                queue.close()
            if charged:
                self.driver.budget.uncharge(session.id, charged, RINGS)
            leave()

    @staticmethod
    def _event(status: ErrorStatus, message: str) -> fpb.FastBurstEvent:
        event: fpb.FastBurstEvent = wire.status_to(fpb.FastBurstEvent(), status, message)
        return event

    def _handler(self, session: Session, handle: str) -> fastpath.Handle:
        """The packet handler of one fast burst: full requests, requests asking for a layout
        id, and compact calls of a granted layout (:mod:`nnhal.core.fastpacket`)."""
        x = self.executions
        m: Method = self._method
        layouts: dict[int, fastpacket.Layout] = {}  # this burst's granted layouts, by id (from 1)

        def refuse(status: ErrorStatus, message: str) -> tuple[int, bytes]:
            return fastring.RESULT, _refusal(status, message)

        def run_full(kind: int, payload: bytes) -> tuple[int, bytes]:
            try:
                msg = spb.ExecuteRequest.FromString(payload)
            except DecodeError:
                return refuse(ErrorStatus.INVALID_ARGUMENT, "a fast burst packet that is not an ExecuteRequest")
            if msg.session not in ("", session.id) or msg.prepared_model not in ("", handle):
                err = InvalidArgument("a fast burst executes only the prepared model of the session it was opened for")
                return refuse(err.error_status, err.message)
            msg.session = session.id
            msg.prepared_model = handle
            # What the device's level lacks is refused as on the gRPC burst.
            refused = burst_refusal(x, msg)
            if refused is not None:
                return _refused(refused)
            # The faults a gRPC burst execution takes (an injected status, a stall, an exit).
            arrival = x.arrive(m, EXECUTION_FAULTS)
            if kind != fastpacket.LEARN:
                result = x.execute(m, partial(execution_from, msg), None, arrival)
                return fastring.RESULT, result_to(result).SerializeToString()
            try:
                canonical = wire.request_from(msg.request)
            except HalError as err:
                return refuse(err.error_status, err.message)
            result = x.execute(m, partial(execution_from, msg, canonical), None, arrival)
            answer = result_to(result)
            key = fastpacket.layout_key(canonical.inputs, canonical.outputs, canonical.pools)
            granted = 0
            # Granted once the layout passed validation (its plan is learned), within the cap.
            room = len(layouts) < fastpacket.MAX_LAYOUTS
            if room and key is not None and result.status in fastpacket.ANSWERED and not msg.profile:
                granted = len(layouts) + 1
                layouts[granted] = fastpacket.Layout(key)
            return fastpacket.LEARNED, fastpacket.LEARNED_HEADER.pack(granted) + answer.SerializeToString()

        def run_call(payload: bytes) -> tuple[int, bytes]:
            try:
                call = fastpacket.decode_call(payload)
                layout = layouts.get(call.layout)
                if layout is None:
                    return refuse(ErrorStatus.INVALID_ARGUMENT, f"fast burst: unknown layout id {call.layout}")
                pools = layout.pools(call.body)
            except fastpacket.PacketError as err:
                return refuse(ErrorStatus.INVALID_ARGUMENT, f"malformed fast burst call: {err}")
            # A layout holds inline pools only: no token to look for.
            refused = x.burst_refusal(call.deadline_ns is not None, call.loop_timeout_ns, False)
            if refused is not None:
                return _refused(refused)
            arrival = x.arrive(m, EXECUTION_FAULTS)
            # The deadline travels as the time remaining, re-based on this host's clock at arrival.
            deadline = None if call.deadline_ns is None else time.monotonic_ns() + call.deadline_ns
            execution = Execution(
                session.id,
                handle,
                Request(layout.inputs, layout.outputs, pools),
                call.measure,
                deadline,
                call.loop_timeout_ns,
            )
            result = x.execute(m, lambda: execution, None, arrival)
            if isinstance(result, ExecutionResult) and result.status in fastpacket.ANSWERED:
                return fastpacket.ANSWER, fastpacket.encode_answer(result)
            return fastring.RESULT, result_to(result).SerializeToString()

        def handle_packet(kind: int, payload: bytes) -> tuple[int, bytes]:
            if kind == fastpacket.CALL:
                return run_call(payload)
            return run_full(kind, payload)

        return handle_packet

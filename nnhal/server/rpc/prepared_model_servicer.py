"""The PreparedModel and FencedExecutionCallback services: adapters of the device's ``Executions``.

``execute_1_3`` is a server stream: the launch status (the HAL method's return value),
then exactly one notify carrying the ExecutionResult (``Executions.execute_async``).
``executeSynchronously_1_3`` and the burst stream are coroutines on the server's event
loop: an idle burst holds no thread, and a short execution runs on the loop's thread
(``Executions.runs_inline``), any other on a worker thread. The burst stream is served by
``direct.burst`` through :func:`serve_burst` (the servicer has no method of its own for it), its
answers written as bytes.

An open burst stream counts among its connection's long-lived calls (its session is
only named by its first request, which an idle stream never sends): past a cap it gets
one response with RESOURCE_EXHAUSTED_TRANSIENT (naming the cap) and ends. A burst takes
an injected abort when it opens and the other fault kinds per execution; a 1.2 device's
burst execution carrying a deadline, a loop timeout or a buffer token is INVALID_ARGUMENT
(``Executions.check_burst_fields``). A fence wait is capped alike (``Executions.fenced_info``).
A burst keeps a standing charge of its small executions' request data (``lean.Standing``),
given back as the stream ends, and answers the messages of the layout it repeats from their
bytes (``repeat.Repeat``: not parsed; every per-call rule run through its owner).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import partial
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc import aio

from nnhal.core import wire_deadline, wire_pool, wire_request, wire_result
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import ExecutionResult, Request
from nnhal.core.wire_spans import BURST_POOL_DATA, BURST_POOLS_AT, UNARY_POOL_DATA, UNARY_POOLS_AT
from nnhal.proto import service_pb2 as spb, service_pb2_grpc as sgrpc
from nnhal.server import log_limits
from nnhal.server.executions import Arrival, Execution, Executions, FencedExecution, Method, Refused
from nnhal.server.executions.afterwards import Afterwards
from nnhal.server.executions.faults import abort_of
from nnhal.server.executions.lean import Inline, LeanRun, Standing, launch_inline
from nnhal.server.executions.repeat import Repeat
from nnhal.server.rpc.common import answer_bytes, events_to, hal_method, result_to
from nnhal.server.rpc.ending import abort_ended, call_ender, current_ender, ended
from nnhal.server.rpc.identity import stream_client
from nnhal.server.rpc.request_id import begin
from nnhal.server.rpc.sync_handlers import SyncContext, abort, in_thread, run_sync

SYNC = "executeSynchronously_1_3"
#: The fault kinds a burst takes per execution (an abort is taken when it opens).
EXECUTION_FAULTS = ("error", "stall", "exit")
#: The fault kinds a burst takes as it opens.
OPEN_FAULTS = ("abort",)


def execution_from(msg: spb.ExecuteRequest, request: Request | None = None) -> Execution:
    """The canonical execution ``msg`` asks for (``request``: its request already converted)."""
    return Execution(
        msg.session,
        msg.prepared_model,
        wire_request.request_from(msg.request) if request is None else request,
        msg.measure == 1,
        wire_deadline.deadline_from(msg.deadline),
        msg.loop_timeout_ns,
        msg.profile,
    )


def lean_launch(
    x: Executions,
    inline: Inline,
    msg: spb.ExecuteRequest,
    standing: Standing | None = None,
    kept: list[LeanRun] | None = None,
) -> LeanRun | None:
    """``msg`` launched with no canonical objects made (``lean.launch_inline``) when it asks
    no profile and its pools are all inline, ``inline`` its session, prepared model and slot
    (``Executions.runs_inline``; the slot stays the caller's unless the run takes it),
    ``standing`` its stream's standing charge (a burst's), ``kept`` where the run launched is
    added (a burst's: ``repeat.Repeat.of`` is made from it); None: the full path
    (``execution_from``). For ``Executions.execute``'s ``lean_launch``."""
    if msg.profile:
        return None
    request = msg.request
    pools = wire_pool.inline_pools_from(request.pools)
    if pools is None:
        return None
    inputs, outputs = wire_request.args_from(request.inputs), wire_request.args_from(request.outputs)
    deadline = wire_deadline.deadline_from(msg.deadline)
    found, ticket = inline
    run = launch_inline(
        x.driver,
        found,
        inputs,
        outputs,
        pools,
        msg.measure == 1,
        deadline,
        msg.loop_timeout_ns,
        ticket,
        standing=standing,
    )
    if kept is not None and run is not None:
        kept.append(run)
    return run


def inline_bytes(msg: spb.ExecuteRequest) -> int:
    """At least the bytes ``msg``'s pools carry inline: its request's serialized size (one C
    call that copies no pool, where reading each pool's ``data`` makes a bytes object of it)."""
    return msg.request.ByteSize()


def check_burst_fields(executions: Executions, msg: spb.ExecuteRequest) -> None:
    """INVALID_ARGUMENT for what the device's level lacks of a burst execution
    (``Executions.check_burst_fields``). A stream asks ``Executions.burst_fields_checked``
    once, and calls this only when it is set."""
    if executions.burst_fields_checked:  # else nothing to look at: the burst's hot path
        tokens = any(p.WhichOneof("pool") == "token" for p in msg.request.pools)
        executions.check_burst_fields(msg.deadline.has_deadline, msg.loop_timeout_ns, tokens)


class PreparedModelServicer(sgrpc.PreparedModelServicer):
    def __init__(self, executions: Executions) -> None:
        self.executions = executions
        self.driver = executions.driver

    @hal_method(SYNC, timer="execute")
    async def executeSynchronously_1_3(
        self, request: spb.ExecuteRequest, context: aio.ServicerContext[Any, Any], m: Method, arrival: Arrival | None
    ) -> spb.ExecuteResult:
        """A coroutine: a short execution runs on the loop's thread (``runs_inline``), any
        other on a worker thread."""
        x = self.executions
        build = partial(execution_from, request)
        if arrival is not None and arrival.fault is None:  # refused: answered at once
            return result_to(x.execute(m, build, None, arrival))
        if arrival is None:
            inline = x.runs_inline(request.session, request.prepared_model, inline_bytes(request))
            if inline is not None:
                return result_to(x.execute(m, build, inline=inline))
        return await run_sync(context, lambda sync: result_to(x.execute(m, build, sync, arrival)))

    @hal_method("execute_1_3", what="an execution", timer="execute")
    def execute_1_3(
        self, request: spb.ExecuteRequest, context: grpc.ServicerContext, m: Method, arrival: Arrival | None
    ) -> Iterator[spb.ExecuteEvent]:
        events = self.executions.execute_async(m, partial(execution_from, request), context, arrival)
        return events_to(events, spb.ExecuteEvent, wire_result.execution_result_to, spb.ExecuteResult)

    @hal_method(make=spb.FencedExecuteResponse)
    def executeFenced(
        self, request: spb.FencedExecuteRequest, context: grpc.ServicerContext
    ) -> spb.FencedExecuteResponse:
        call = FencedExecution(
            request.session,
            request.prepared_model,
            wire_request.request_from(request.request),
            tuple(request.wait_for),
            request.measure == 1,
            wire_deadline.deadline_from(request.deadline),
            request.loop_timeout_ns,
            request.timeout_after_fence_ns or None,
        )
        fence = self.executions.execute_fenced("executeFenced", call)
        return spb.FencedExecuteResponse(sync_fence=fence, callback=fence)

    @hal_method(make=spb.StatusMessage)
    def release(self, request: spb.ReleaseRequest, context: grpc.ServicerContext) -> spb.StatusMessage:
        self.driver.release_prepared(self.driver.session(request.session), request.handle)
        return spb.StatusMessage()


async def serve_burst(
    x: Executions, m: Method, scoped: bool, _requests: object, context: aio.ServicerContext[Any, Any]
) -> None:
    """The burst stream ``context`` of ``x``'s device (``configureExecutionBurst``: served by
    ``direct.burst``, with ``x``, ``m`` — its ``Method`` — and ``scoped`` — its fault plan is
    seeded — bound): the call's ender (a call ended to make room for another client is aborted
    RESOURCE_EXHAUSTED with the reason), its request id, the arrival of ``m`` (an injected abort
    taken as it opens); then read, execute and answer until the client half-closes — in one
    coroutine frame under grpc's (every message read and every answer written resumes each
    frame it awaits in). The stream has no serializer: its answers are written serialized (an
    inline execution's by ``common.answer_bytes``: the common answer from kept bytes). Nor a
    deserializer: a message of the layout the stream repeats (``repeat.Repeat``, made by a
    message the lean path ran for its model's lane) is answered from its bytes; any other is
    parsed here (garbage answered in band, as before) and takes the path it always took."""
    call_ender()
    begin(context, scoped)
    try:
        arrival = x.arrive(m, OPEN_FAULTS)
        try:
            if arrival is not None and arrival.error is not None:
                raise arrival.error
            leave = x.long_calls.open("burst", stream_client(context), current_ender())
        except HalError as err:
            await context.write(answer_bytes(x.refuse(m, err), True))
            return
        # Given back when the stream ends, also when the call is cancelled mid-wait.
        context.add_done_callback(lambda _context: leave())
        checked = x.burst_fields_checked  # fixed with the device's level: asked once per stream
        sync = SyncContext(context, asyncio.get_running_loop()).watch()  # the executions' context
        # What an inline execution leaves for after its answer (``executions.afterwards``): run at
        # the loop's next turn, once the answer was handed to gRPC — not once the write completes,
        # which waits for a client that does not read (DESIGN §5: such a call holds no slot).
        after = Afterwards()
        # The stream's standing charge of its small executions' data (``lean.Standing``): given
        # back as the stream ends, whichever way.
        standing = Standing(x.driver.budget)
        soon = asyncio.get_running_loop().call_soon
        parse = spb.BurstRequest.FromString
        try:
            injected = arrival.fault if arrival is not None else None
            if injected is not None and injected.after == 0:
                await abort(context, abort_of(injected))
            sent = 0
            # The layout the stream repeats (``repeat.Repeat``: made by a message the lean path
            # ran for its model's lane and answered the common answer), and the one before it (a
            # stream alternating two layouts makes none afresh); None: none yet.
            repeat: Repeat | None = None
            before: Repeat | None = None
            kept: list[LeanRun] = []  # the lean run of the message being run (``lean_launch``)
            while True:
                raw = await context.read()  # bytes: no deserializer (a repeat is not parsed)
                if raw is aio.EOF:
                    return
                answer = None if repeat is None else repeat.answer(raw, after)
                if answer is None and before is not None:
                    answer = before.answer(raw, after)
                    if answer is not None:
                        repeat, before = before, repeat
                if answer is None:
                    try:
                        req = parse(raw)
                    except DecodeError as err:
                        # Garbage from the client: answered in band, one rate-limited log line, the
                        # stream ended (raised into gRPC, it logged tracebacks, one printed to stderr).
                        garbage = Refused(ErrorStatus.INVALID_ARGUMENT, f"a burst request could not be decoded: {err}")
                        m.record(garbage.status, None)
                        log_limits.undecodable("configureExecutionBurst", err)
                        await context.write(answer_bytes(garbage, True))
                        return
                    msg = req.execute
                    try:
                        if checked:
                            check_burst_fields(x, msg)
                    except HalError as err:
                        answer = answer_bytes(x.refuse(m, err), True)
                    else:
                        build = partial(execution_from, msg)
                        run = x.arrive(m, EXECUTION_FAULTS)
                        inline = (
                            None
                            if run is not None
                            else x.runs_inline(msg.session, msg.prepared_model, inline_bytes(msg))
                        )
                        if inline is not None:
                            lean = partial(lean_launch, x, inline, msg, standing, kept)  # the call's own, tried first
                            result = x.execute(m, build, lean_launch=lean, inline=inline, after=after)
                            answer = answer_bytes(result, True)
                            del lean
                            if kept:  # the lean path ran it: its layout may repeat
                                made = repeat_of(x, m, raw, msg, kept.pop(), result, standing)
                                if made is not None:
                                    repeat, before = made, repeat
                                del made
                            del result, inline  # not held while the stream idles (its model's release)
                        else:
                            answer = await in_thread(_execute_to_wire, x, m, build, sync, run)
                    del req, msg
                del raw
                if after:
                    soon(after.run)
                await context.write(answer)
                del answer
                if injected is not None:
                    sent += 1
                    if injected.after == sent:
                        await abort(context, abort_of(injected))
        finally:
            after.run()  # what an answer never written left (its making or writing raised)
            standing.end()  # after the last run's close
            leave()
    except asyncio.CancelledError:
        if not ended():  # the transport's cancellation
            raise
        await abort_ended(context)


def repeat_of(
    x: Executions,
    m: Method,
    raw: bytes,
    msg: spb.ExecuteRequest,
    run: LeanRun,
    result: ExecutionResult | Refused,
    standing: Standing,
    burst: bool = True,
) -> Repeat | None:
    """The Repeat of the burst message ``raw`` (``msg`` its execution, as parsed), which the lean
    path ran as ``run`` and answered ``result`` (``repeat.Repeat.of``; None: none). Without
    ``burst``: of the unary ``executeSynchronously_1_3`` message ``raw`` (``msg`` itself), its
    answers an ``ExecuteResult`` (``direct.execute_sync``'s ``repeats.Repeats``)."""
    if isinstance(result, Refused) or Repeat.lane_of(run, result) is None:
        return None  # none made: the message's answer and fields not looked at again
    head = wire_result.answer_head(result, burst)
    if head is None:
        return None
    request = msg.request
    datas = [pool.inline.data for pool in request.pools]
    layout = (wire_request.args_from(request.inputs), wire_request.args_from(request.outputs))
    fallback, path = (_burst_answer, _BURST_PATH) if burst else (answer_bytes, _UNARY_PATH)
    return Repeat.of(x, m, raw, datas, layout, inline_bytes(msg), run, result, head, standing, fallback, path)


#: Where a burst message's and a unary one's pools' data are (``wire_spans.field_spans``'s path
#: and where it repeats).
_BURST_PATH = (BURST_POOL_DATA, BURST_POOLS_AT)
_UNARY_PATH = (UNARY_POOL_DATA, UNARY_POOLS_AT)


def _burst_answer(result: ExecutionResult | Refused) -> bytes:
    """A burst's answer that is not the common one (``repeat.Repeat``'s fallback)."""
    return answer_bytes(result, True)


def _execute_to_wire(x: Executions, m: Method, build: Any, live: SyncContext, arrival: Arrival | None) -> bytes:
    return answer_bytes(x.execute(m, build, live, arrival), True)


class FencedExecutionCallbackServicer(sgrpc.FencedExecutionCallbackServicer):
    def __init__(self, executions: Executions) -> None:
        self.executions = executions

    @hal_method(make=spb.FencedInfoResponse)
    def getExecutionInfo(self, request: spb.FencedInfoRequest, context: grpc.ServicerContext) -> spb.FencedInfoResponse:
        info = self.executions.fenced_info(request.session, request.callback, request.wait, context)
        return wire_result.fenced_info_to(info)

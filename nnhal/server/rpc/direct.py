"""Direct handlers: a hot unary HAL method served by one coroutine instead of a stack of wrappers.

A unary method registered through ``sync_handlers.Collector`` is served by four nested
coroutines: the admission of its request (``gated_handlers.gated``), its request id
(``request_id.with_request_id``), the method's arrival (``common.hal_method``) and the
servicer's method. For ``executeSynchronously_1_3`` — a small model's whole execution costs
less than those layers' frames, lookups and argument passing — :func:`execute_sync` makes
one handler that takes the same steps in the same order of effect, so that every input gets
the answer the layered path gives it:

1. the call's request id (published, sent back in the trailing metadata; the fault scope noted
   when the device's fault plan is seeded, the only reader of it);
2. the request read once admitted and held until the call ends (``Inbound.receive``: the
   read's place, its time bound, the client's and the server's limits, RESOURCE_EXHAUSTED,
   INVALID_ARGUMENT without a message, INTERNAL when it cannot be decoded);
3. the owner's ``Method`` (looked up once, when the handler is made) and the arrival (level
   gate, injected fault);
4. the execution on the loop's thread when it is short (``Executions.runs_inline``), on a
   worker thread otherwise (an injected abort there aborts the call);
5. a large answer handed over one at a time per connection (``AnswerWrites.hand_over``); a call
   ended to make room for another client aborted RESOURCE_EXHAUSTED with the reason.

The request id is given before the read (the layered path gives it after): a call refused
while its message is read also carries its id back.

A message of a layout the device repeats (``executions.repeats.Repeats``: one a lean run
answered before, found by its length and bytes within the read's place) is not parsed: once it
arrived with nothing (step 3) it is answered by its ``repeat.Repeat`` — every per-call rule of
step 4 through its owner — or, where one says no, parsed then and run as any other (step 5
for every call). Every other message is parsed in the read's place (step 2, INTERNAL as before).

:func:`burst` serves the burst stream (there is no layered handler of it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import Any

import grpc
from grpc import aio

from nnhal.proto import service_pb2 as spb
from nnhal.server.executions import Arrival, Execution, Executions, Method
from nnhal.server.executions.afterwards import Afterwards
from nnhal.server.executions.faults import BURST, KINDS
from nnhal.server.executions.lean import LeanRun
from nnhal.server.executions.owner import INLINE_MAX_BYTES
from nnhal.server.executions.repeat import Repeat
from nnhal.server.executions.repeats import Repeats
from nnhal.server.rpc.common import answer_bytes
from nnhal.server.rpc.ending import abort_ended, ended
from nnhal.server.rpc.inbound import Inbound
from nnhal.server.rpc.prepared_model_servicer import SYNC, execution_from, lean_launch, repeat_of, serve_burst
from nnhal.server.rpc.request_id import begin
from nnhal.server.rpc.sync_handlers import SyncContext, run_sync

_SERVICE = spb.DESCRIPTOR.services_by_name["PreparedModel"].full_name
#: The full names of the methods :func:`execute_sync` and :func:`burst` serve.
EXECUTE_SYNC = f"/{_SERVICE}/{SYNC}"
#: What :func:`execute_sync`'s read gives: a repeated layout's message (its ``Repeat``, not
#: parsed, and its bytes), or another's parsed message and its bytes (None: too large to run on
#: the loop's thread, not kept).
_Read = tuple[Repeat | None, spb.ExecuteRequest | None, bytes | None]
BURST_STREAM = f"/{_SERVICE}/configureExecutionBurst"


def execute_sync(executions: Executions, inbound: Inbound) -> grpc.RpcMethodHandler:
    """The handler of ``executeSynchronously_1_3`` for ``executions``' device, its request read
    through ``inbound`` (module docstring)."""
    x = executions
    # The Method ``hal_method(SYNC, timer="execute")`` gives the layered path (made once per key).
    m = x.method(SYNC, "", "execute")
    parse = spb.ExecuteRequest.FromString
    scoped = x.faults.seeded  # the call's fault scope matters to a seeded plan only
    # What the inline executions leave for after their answers: all run on the loop's thread,
    # one at a time; run at the loop's next turn, once the handler returned its answer to gRPC
    # (or sooner, should the handler wait for anything first).
    after = Afterwards()
    # The device's layouts that repeat (``repeats.Repeats``): a message of one is answered from
    # its bytes (``repeat.Repeat.answer``), not parsed.
    repeats = Repeats()
    find = repeats.find

    def read(raw: bytes) -> _Read:
        # ``Inbound.receive``'s parse, within the read's place: a repeated layout's message found
        # (not parsed); any other parsed (undecodable: INTERNAL, as ever), its bytes kept when it
        # may run on the loop's thread (a Repeat is made of them, should the lean path run it).
        found = find(raw)
        if found is not None:
            return found, None, raw
        return None, parse(raw), raw if len(raw) <= INLINE_MAX_BYTES else None

    async def execute(_requests: object, context: aio.ServicerContext[Any, Any]) -> bytes:
        begin(context, scoped)
        try:
            repeat: Repeat | None
            request: spb.ExecuteRequest | None
            raw: bytes | None
            (repeat, request, raw), call = await inbound.receive(context, read, SYNC)
            arrival = x.arrive(m, KINDS)
            answer: bytes | None = None
            if repeat is not None and raw is not None:  # a repeated layout's message (``read``)
                if arrival is None:
                    answer = repeat.answer(raw, after, True)
                if answer is None:  # the full path's: it refuses, or runs it, as it always did
                    repeats.drop_stale(repeat)
                    # Parses: it matched a message parsed before but for its data's bytes.
                    request = parse(raw)
                    raw = None  # its Repeat is kept already
                else:
                    asyncio.get_running_loop().call_soon(after.run)
                del repeat
            if answer is None:
                msg = request
                assert msg is not None  # parsed by ``read``, or above
                build = partial(execution_from, msg)
                if arrival is None:
                    # The message's size: at least the bytes its pools carry inline (``inline_bytes``),
                    # known from its read (no size computed again).
                    inline = x.runs_inline(msg.session, msg.prepared_model, call.nbytes)
                    if inline is not None:
                        kept: list[LeanRun] = []  # the lean run, once launched (a Repeat is made of it)
                        lean = partial(lean_launch, x, inline, msg, None, kept)  # the call's own, tried first
                        result = x.execute(m, build, lean_launch=lean, inline=inline, after=after)
                        asyncio.get_running_loop().call_soon(after.run)  # mostly work waits: not asked
                        answer = answer_bytes(result)
                        if kept and raw is not None:  # the lean path ran it: its layout may repeat
                            run = kept.pop()
                            lane = Repeat.lane_of(run, result)
                            if lane is not None:
                                # Its runs covered by the session's standing charge (``lean.launch_inline``'s),
                                # or none kept: each call would be sent to the full path.
                                standing = run.session.standing
                                if (
                                    standing is not None
                                    and standing.may_cover(run.session.id, lane.data_bytes)
                                    and repeats.admits()
                                ):
                                    repeats.add(repeat_of(x, m, raw, msg, run, result, standing, False))
                                del standing
                            del run, lane
                        del lean, result, kept
                    else:
                        answer = await run_sync(context, partial(_on_worker, x, m, build, None))
                elif arrival.fault is None:  # refused as it arrived: answered at once
                    answer = answer_bytes(x.execute(m, build, None, arrival))
                else:
                    answer = await run_sync(context, partial(_on_worker, x, m, build, arrival))
                del msg, build
            del request, raw
            handing = inbound.answer(context, call.let_go, len(answer), SYNC)
            if handing is not None:  # a large answer's turn
                await handing
            return answer
        except asyncio.CancelledError:
            if not ended():  # the transport's cancellation
                raise
            await abort_ended(context)
            raise AssertionError("unreachable: abort raises") from None  # pragma: no cover

    return grpc.stream_unary_rpc_method_handler(
        execute,
        request_deserializer=None,
        response_serializer=None,  # answered as bytes (``answer_bytes``)
    )


def _on_worker(
    x: Executions, m: Method, build: Callable[[], Execution], arrival: Arrival | None, sync: SyncContext
) -> bytes:
    return answer_bytes(x.execute(m, build, sync, arrival))


def burst(executions: Executions) -> grpc.RpcMethodHandler:
    """The handler of the burst stream (``configureExecutionBurst``) for ``executions``' device,
    its only one: ``prepared_model_servicer.serve_burst`` (the call's ender, its request id, the
    arrival of the burst's ``Method``, then its messages), the stream's one coroutine."""
    x = executions
    m = x.method(BURST, "a burst execution", "execute")
    return grpc.stream_stream_rpc_method_handler(
        partial(serve_burst, x, m, x.faults.seeded),
        request_deserializer=None,  # read as bytes: a repeated layout is not parsed (``serve_burst``)
        response_serializer=None,  # answered as bytes (``serve_burst``)
    )

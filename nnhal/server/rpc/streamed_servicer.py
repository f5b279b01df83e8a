"""The StreamedExecution service (``streamed.proto``): executeSynchronously_1_3 whose large
inline pools travel in chunks.

The stream is read whole (``wire_stream.read_request``: the head, then the chunks
reassembled into the pools, every rule checked), then the execution runs exactly as a
synchronous one (``Executions.execute``: level and drain refusals, launch
checks, injected faults of ``executeSynchronously_1_3``, metrics), and the answer goes
back as its head, then the chunks of its large output pools. Each chunk is charged to the stream's session
as it arrives (RESOURCE_EXHAUSTED_* in the head past a memory limit), until the execution,
which charges its request data itself, takes over. A stream breaking the rules
is answered with INVALID_ARGUMENT in the head. The handler is a coroutine on the server's
loop: the chunks are taken in as they arrive (no thread waits on a slow sender), each
chunk's read asked for, its bytes charged first, before the chunk before is copied into its
pool (``chunk_reads.ChunkReads``: the sender is granted its window while the server works;
a session the budget refuses that charge reads one chunk at a time), the execution runs on
a worker thread. An open stream counts among the long-lived calls of its
connection (``executions.LongCalls``, kind ``streamed execution``): past the cap the head says
RESOURCE_EXHAUSTED_TRANSIENT.

The method is served with ``wire_stream``'s own (de)serializers (:func:`add_to_server`): a
chunk arrives as a view of the received bytes and is copied once, into its pool; a chunk of
the answer is a view of the output pool, joined once with its header.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc import aio

from nnhal.core import wire, wire_result, wire_stream
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError, ResourceExhaustedPersistent
from nnhal.proto import service_pb2 as spb, streamed_pb2 as stpb, streamed_pb2_grpc as stgrpc
from nnhal.server import log_limits
from nnhal.server.executions import Abort, Arrival, Execution, Executions, Method, Refused
from nnhal.server.executions.notified import RESULTS_WAITING
from nnhal.server.rpc.chunk_reads import ChunkReads
from nnhal.server.rpc.common import hal_method, status_to
from nnhal.server.rpc.ending import current_ender
from nnhal.server.rpc.identity import stream_client
from nnhal.server.rpc.prepared_model_servicer import execution_from
from nnhal.server.rpc.sync_handlers import SyncContext, abort, in_thread

METHOD = "executeStreamed"
#: The method whose level rule and injected faults a streamed execution shares.
SYNC_METHOD = "executeSynchronously_1_3"
#: The budget's kind for the chunks of a streamed request while it arrives.
ARRIVING = "request data arriving"

SERVICE = stpb.DESCRIPTOR.services_by_name["StreamedExecution"].full_name


def _head(refused: Refused) -> stpb.StreamedExecuteResult:
    """The one message answering a refused stream."""
    return stpb.StreamedExecuteResult(head=status_to(spb.ExecuteResult(), refused))


class StreamedExecutionServicer(stgrpc.StreamedExecutionServicer):
    """An adapter of the device's ``Executions``: the stream in, one ``execute`` call, the stream out."""

    def __init__(self, executions: Executions) -> None:
        self.executions = executions

    @hal_method(METHOD, timer="execute", fault=SYNC_METHOD, gate=SYNC_METHOD, transport="streamed")
    async def executeStreamed(
        self,
        request_iterator: AsyncIterator[stpb.StreamedExecuteRequest | wire_stream.Chunk],
        context: aio.ServicerContext[Any, Any],
        m: Method,
        arrival: Arrival | None,
    ) -> AsyncIterator[stpb.StreamedExecuteResult | wire_stream.Chunk]:
        x = self.executions
        t0 = time.perf_counter()
        try:
            if arrival is not None and arrival.error is not None:
                raise arrival.error  # the level of the method it shares
            leave = x.long_calls.open("streamed execution", stream_client(context), current_ender())
        except HalError as err:
            yield _head(x.refuse(m, err, None, t0))
            return
        # Given back when the stream ends, also when gRPC never resumes this generator.
        context.add_done_callback(lambda _context: leave())
        sync = SyncContext(context, asyncio.get_running_loop()).watch()  # the execution's context
        reads: ChunkReads | None = None  # the chunks' reads, charged to the session (module docstring)
        try:
            first = None
            try:
                parts = aiter(request_iterator)
                first = await anext(parts, None)
                reader = wire_stream.RequestReader(first)
                cap = x.driver.config.receive_cap(wire.max_inline_bytes())
                if reader.declared > cap:
                    raise ResourceExhaustedPersistent(
                        f"the stream's inline pools declare {reader.declared} bytes, more than one client "
                        f"may hold ({cap})"
                    )
                session = reader.head.session
                reads = ChunkReads(parts, x.driver.budget, session, ARRIVING, reader.declared)
                while (part := await reads.next()) is not None:
                    if reads.ahead():
                        await asyncio.sleep(0)  # the next read asked of gRPC before this copy
                    reader.add(part)
                    del part  # copied into its pool
                head, request = reader.finish()
            except (HalError, DecodeError) as err:
                if isinstance(err, HalError) and first is not None:
                    yield _head(x.refuse(m, err, None, t0))
                    return
                # Garbage, or a stream that broke before its head: one rate-limited line, not a
                # failed call's (the hooks, which log those, are not told).
                if isinstance(err, DecodeError):
                    refused = Refused(ErrorStatus.INVALID_ARGUMENT, f"a part could not be decoded: {err}")
                    log_limits.undecodable(METHOD, err)
                else:
                    refused = Refused.of(err, METHOD)
                    log_limits.broken_stream(METHOD, refused.message)
                m.record(refused.status, None)
                yield _head(refused)
                return

            build: Callable[[], Execution] = functools.partial(execution_from, head, request)

            # The execution charges its request data itself, from its launch on.
            if reads is not None:
                await reads.close()
            try:
                result = await in_thread(x.execute, m, build, sync, arrival, t0)
            except Abort as aborted:
                await abort(context, aborted)
            # The request's data is not needed to answer: not held while the answer is written.
            del build, head, request, reader, first
            if isinstance(result, Refused):
                yield _head(result)
                return
            kept, large = wire_stream.split_result(result)
            del result
            # The output pools wait to be written, charged to the session until they are.
            budget = x.driver.budget
            waiting = sum(len(data) for data in large.values())
            try:
                budget.charge(session, waiting, RESULTS_WAITING)
            except HalError as err:
                yield _head(Refused(err.error_status, f"{METHOD}'s answer cannot wait to be written: {err.message}"))
                return
            try:
                yield stpb.StreamedExecuteResult(head=wire_result.execution_result_to(kept))
                for chunk in wire_stream.chunks(large):
                    yield chunk
            finally:
                del large
                budget.uncharge(session, waiting, RESULTS_WAITING)
        finally:
            try:
                if reads is not None:
                    await reads.close()
            finally:
                leave()


def add_to_server(servicer: StreamedExecutionServicer, server: Any) -> None:
    """``add_StreamedExecutionServicer_to_server`` with ``wire_stream``'s (de)serializers
    (module docstring): the same method, the same messages on the wire."""
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.executeStreamed,
        request_deserializer=wire_stream.parser(stpb.StreamedExecuteRequest),
        response_serializer=wire_stream.write_part,
    )
    handlers = {METHOD: handler}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)

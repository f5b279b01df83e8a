"""The StreamedExecution service (``streamed.proto``): executeSynchronously_1_3 whose large
inline pools travel in chunks.

The stream is read whole (``wire_stream.read_request``: the head, then the chunks
reassembled into the pools, every rule checked), then the execution runs exactly as a
synchronous one (``PreparedModelServicer.execute_sync``: level and drain refusals, launch
checks, injected faults of ``executeSynchronously_1_3``, metrics), and the answer goes
back as its head, then the chunks of its large output pools. A stream breaking the rules
is answered with INVALID_ARGUMENT in the head. The handler is a coroutine on the server's
loop: the chunks are taken in as they arrive (no thread waits on a slow sender), the
execution runs on a worker thread. An open stream counts among the long-lived calls of its
connection (``common.LongCalls``, kind ``streamed execution``): past the cap the head says
RESOURCE_EXHAUSTED_TRANSIENT.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from grpc import aio

from nnhal.core import wire, wire_stream
from nnhal.core.errors import HalError
from nnhal.proto import service_pb2 as spb, streamed_pb2 as stpb, streamed_pb2_grpc as stgrpc
from nnhal.server.executions import Abort, Arrival, Execution, Executions, Method, Refused
from nnhal.server.rpc.common import hal_method, status_to
from nnhal.server.rpc.prepared_model_servicer import execution_from
from nnhal.server.rpc.sync_handlers import SyncContext, abort, in_thread

METHOD = "executeStreamed"
#: The method whose level rule and injected faults a streamed execution shares.
SYNC_METHOD = "executeSynchronously_1_3"


def _refused(refused: Refused) -> stpb.StreamedExecuteResult:
    return stpb.StreamedExecuteResult(head=status_to(spb.ExecuteResult(), refused))


class StreamedExecutionServicer(stgrpc.StreamedExecutionServicer):
    """An adapter of the device's ``Executions``: the stream in, one ``execute`` call, the stream out."""

    def __init__(self, executions: Executions) -> None:
        self.executions = executions

    @hal_method(METHOD, timer="execute", fault=SYNC_METHOD, gate=SYNC_METHOD)
    async def executeStreamed(
        self,
        request_iterator: AsyncIterator[stpb.StreamedExecuteRequest],
        context: aio.ServicerContext[Any, Any],
        m: Method,
        arrival: Arrival | None,
    ) -> AsyncIterator[stpb.StreamedExecuteResult]:
        x = self.executions
        peer = context.peer() or ""
        t0 = time.perf_counter()
        try:
            if arrival is not None and arrival.error is not None:
                raise arrival.error  # the level of the method it shares
            leave = x.long_calls.open("streamed execution", peer)
        except HalError as err:
            m.record(err.error_status, None)
            yield _refused(Refused.of(err, METHOD))
            return
        # Given back when the stream ends, also when gRPC never resumes this generator.
        context.add_done_callback(lambda _context: leave())
        sync = SyncContext(context, asyncio.get_running_loop()).watch()  # the execution's context
        try:
            try:
                parts = aiter(request_iterator)
                reader = wire_stream.RequestReader(await anext(parts, None))
                async for part in parts:
                    reader.add(part)
                head, request = reader.finish()
            except HalError as err:
                m.record(err.error_status, None)
                yield _refused(Refused.of(err, METHOD))
                return

            def build() -> Execution:
                return execution_from(head, request)

            try:
                result = await in_thread(x.execute, m, build, sync, arrival, t0)
            except Abort as aborted:
                await abort(context, aborted)
            if isinstance(result, Refused):
                yield _refused(result)
                return
            kept, large = wire_stream.split_result(result)
            yield stpb.StreamedExecuteResult(head=wire.execution_result_to(kept))
            for chunk in wire_stream.chunks(stpb.StreamedExecuteResult, large):
                yield chunk
        finally:
            leave()

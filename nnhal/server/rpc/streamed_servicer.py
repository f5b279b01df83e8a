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

from google.protobuf.message import DecodeError
from grpc import aio

from nnhal.core import wire, wire_stream
from nnhal.core.errors import HalError, InvalidArgument
from nnhal.core.types import ExecutionResult, PoolData
from nnhal.proto import service_pb2 as spb, streamed_pb2 as stpb, streamed_pb2_grpc as stgrpc
from nnhal.server import call_log, log_limits
from nnhal.server.driver import Driver
from nnhal.server.metrics import Metrics
from nnhal.server.rpc.common import Record, long_calls, once, recorder
from nnhal.server.rpc.levels import require
from nnhal.server.rpc.prepared_model_servicer import PreparedModelServicer
from nnhal.server.rpc.sync_handlers import SyncContext, in_thread

METHOD = "executeStreamed"
#: The method whose level rule and injected faults a streamed execution shares.
SYNC_METHOD = "executeSynchronously_1_3"


def _refused(err: HalError) -> stpb.StreamedExecuteResult:
    return stpb.StreamedExecuteResult(head=wire.status_to(spb.ExecuteResult(), err.error_status, err.message))


class StreamedExecutionServicer(stgrpc.StreamedExecutionServicer):
    def __init__(self, driver: Driver, executions: PreparedModelServicer, metrics: Metrics | None = None) -> None:
        """``executions``: the servicer whose synchronous execution this one runs."""
        self.driver = driver
        self._executions = executions
        self.metrics = metrics = metrics or executions.metrics
        self._record = recorder(metrics, METHOD, metrics.execute_seconds.observe)
        self._long_calls = long_calls(driver)

    async def executeStreamed(
        self, request_iterator: AsyncIterator[stpb.StreamedExecuteRequest], context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[stpb.StreamedExecuteResult]:
        peer = context.peer() or ""
        t0 = time.perf_counter()
        try:
            require(self.driver, SYNC_METHOD)
            self._long_calls.enter("streamed execution", peer)
        except HalError as err:
            self._record(err.error_status, None)
            yield _refused(err)
            return
        # Given back when the stream ends, also when gRPC never resumes this generator.
        leave = once(lambda: self._long_calls.leave("streamed execution", peer))
        context.add_done_callback(lambda _context: leave())
        sync = SyncContext(context, asyncio.get_running_loop()).watch()  # the execution's context
        try:
            first = None
            try:
                parts = aiter(request_iterator)
                first = await anext(parts, None)
                reader = wire_stream.RequestReader(first)
                async for part in parts:
                    reader.add(part)
                head, request = reader.finish()
            except (HalError, DecodeError) as caught:
                refused: HalError
                if isinstance(caught, DecodeError):
                    refused = InvalidArgument(f"a part could not be decoded: {caught}")
                    log_limits.undecodable(METHOD, caught)
                else:
                    refused = caught
                    if first is None:  # the client sent nothing: it left, or its stream broke
                        log_limits.broken_stream(METHOD, refused.message)
                    else:
                        call_log.failed(METHOD, refused.error_status, refused.message)
                self._record(refused.error_status, None)
                yield _refused(refused)
                return
            chunked: dict[int, PoolData] = {}

            def reply(result: ExecutionResult) -> spb.ExecuteResult:
                kept, large = wire_stream.split_result(result)
                chunked.update(large)
                return wire.execution_result_to(kept)

            faults = self._executions.faults
            fault = faults.take(SYNC_METHOD) if faults.armed else None
            record = self._record_since(t0)
            execute = self._executions.execute_sync
            msg = await in_thread(execute, head, METHOD, record, sync, fault, request, reply)
            yield stpb.StreamedExecuteResult(head=msg)
            for chunk in wire_stream.chunks(stpb.StreamedExecuteResult, chunked):
                yield chunk
        finally:
            leave()

    def _record_since(self, t0: float) -> Record:
        """A Record timing the execution from the stream's start (its transfer included)."""

        def record(status: int, seconds: float | None) -> None:
            self._record(status, None if seconds is None else time.perf_counter() - t0)

        return record

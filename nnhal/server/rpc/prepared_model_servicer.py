"""The PreparedModel and FencedExecutionCallback services: executions of every kind.

``execute_1_3`` is a server stream: the launch status (the HAL method's return
value), then exactly one notify carrying the ExecutionResult; a launch error is
followed by a notify with the same status. The launched job is closed on every
path (its scheduler ticket and bound pools given back), also when the client
cancels the stream between the two messages.

``executeSynchronously_1_3`` and the burst stream are coroutines on the server's event
loop: an idle burst holds no thread, and a short execution runs on the loop's thread
(``PreparedModelServicer.runs_inline``), any other on a worker thread.

Long-lived calls are capped (``common.LongCalls``): an open burst stream per
connection (its session is only named by its first request, which an idle stream
never sends) and a ``getExecutionInfo(wait=True)`` still waiting per client (its session,
or every session of one verified mTLS identity), and
both together over the server. A burst stream past a cap gets one response with
RESOURCE_EXHAUSTED_TRANSIENT (naming the cap) and ends; a fence wait past a cap gets
that status at once (signalled false) — unless its fence has signalled already.
A response that would not fit one gRPC message is INVALID_ARGUMENT instead.

While the server drains, new executions of every kind (also a burst's next
execution) are refused with DEVICE_UNAVAILABLE; launched ones are counted from
launch to result (``Lifecycle``), fenced ones by their scheduler ticket.

Injected faults (``nnhal.server.rpc.faults``, ``--enable-fault-injection``) are taken
when a call arrives; a burst takes an abort when it opens and the other kinds per
execution.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc import aio

from nnhal.core import wire
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import ExecutionResult, FencedExecutionInfo, Request
from nnhal.proto import service_pb2 as spb, service_pb2_grpc as sgrpc
from nnhal.server import call_log, log_limits
from nnhal.server.driver import Driver
from nnhal.server.jobs import ExecutionJob
from nnhal.server.metrics import Metrics
from nnhal.server.rpc.common import (
    Record,
    failure,
    guarded,
    launch_then_notify,
    long_calls,
    once,
    recorder,
    within_message_limit,
)
from nnhal.server.rpc.faults import BURST, Fault, abort_status, at_start, before_reply, fault_plan
from nnhal.server.rpc.levels import burst_refusal, refusal, require
from nnhal.server.rpc.sync_handlers import SyncContext, in_thread, run_sync
from nnhal.server.session import Session


def refused_result(status: ErrorStatus, message: str) -> ExecutionResult:
    return ExecutionResult(status, message)


def refused_info(status: ErrorStatus, message: str) -> FencedExecutionInfo:
    return FencedExecutionInfo(True, status, message)


#: Executions of a model whose fastest run is shorter than this may run on the event loop's
#: thread (``PreparedModelServicer.runs_inline``); 1 ms: the loop is never held up longer
#: than a gRPC round trip takes anyway.
INLINE_MAX_NS = 1_000_000
#: ... and whose request carries at most this many bytes inline.
INLINE_MAX_BYTES = 64 * 1024
#: getExecutionInfo answers this long before the caller's gRPC deadline expires.
_INFO_MARGIN_S = 0.05
#: A fence wait looks this often whether its caller is still there (a cancelled call's
#: thread and cap slot are given back within this).
_INFO_SLICE_S = 0.5


class PreparedModelServicer(sgrpc.PreparedModelServicer):
    def __init__(self, driver: Driver, metrics: Metrics | None = None) -> None:
        """``metrics``: the server's (a fresh, unserved set when None)."""
        self.driver = driver
        self.metrics = metrics = metrics or Metrics(driver)
        self._lifecycle = driver.lifecycle
        observe = metrics.execute_seconds.observe
        self._record_sync = recorder(metrics, "executeSynchronously_1_3", observe)
        self._record_async = recorder(metrics, "execute_1_3", observe)
        self._record_burst = recorder(metrics, "configureExecutionBurst", observe)
        self._long_calls = long_calls(driver)
        self.faults = fault_plan(driver)

    def _launch(self, request: spb.ExecuteRequest, canonical: Request | None = None) -> ExecutionJob:
        return self.driver.begin_execute(
            self.driver.session(request.session),
            request.prepared_model,
            wire.request_from(request.request) if canonical is None else canonical,
            request.measure == 1,
            wire.deadline_from(request.deadline),
            request.loop_timeout_ns,
            request.profile,
        )

    async def executeSynchronously_1_3(
        self, request: spb.ExecuteRequest, context: aio.ServicerContext[Any, Any]
    ) -> spb.ExecuteResult:
        """A coroutine: a short execution runs on the loop's thread (``runs_inline``), any
        other on a worker thread."""
        refused = refusal(self.driver, "executeSynchronously_1_3")
        if refused is not None:
            self._record_sync(refused.error_status, None)
            call_log.failed("executeSynchronously_1_3", refused.error_status, refused.message)
            return wire.status_to(spb.ExecuteResult(), refused.error_status, refused.message)  # type: ignore[no-any-return]
        fault = self.faults.take("executeSynchronously_1_3") if self.faults.armed else None
        if fault is None and self.runs_inline(request):
            return self.execute_sync(request, "executeSynchronously_1_3", self._record_sync)
        return await run_sync(
            context, lambda sync: self.execute_sync(request, "executeSynchronously_1_3", self._record_sync, sync, fault)
        )

    def runs_inline(self, request: spb.ExecuteRequest) -> bool:
        """Whether this execution may run on the event loop's thread instead of a worker's.

        Handing a call to a worker thread and its answer back to the loop costs two thread
        switches under the GIL — more than a small model's whole execution (measured: ADD
        2x4 went from ~1.0 ms per call on the thread-per-call server to ~1.5 ms with the
        hop; inline it is back below the old figure). So an execution runs inline when it
        cannot hold the loop up: its model's fastest run so far (``fastest_ns``) is under
        :data:`INLINE_MAX_NS`, its inline data under :data:`INLINE_MAX_BYTES`, a slot is
        free for it at once (``Scheduler.starts_at_once``), and no fault or injected delay
        is set. Anything else — a model never run, a large one, a busy device — goes to a
        worker. (A racing admission may still make it wait for a slot, and the same
        client's higher-priority work arriving mid-run may pause it: both bounded by one
        execution, and rare.)"""
        if self.faults.armed:
            return False
        try:
            session = self.driver.session(request.session)
            pm = self.driver.prepared(session, request.prepared_model)
        except HalError:
            return False  # the worker's path reports it
        fastest = pm.fastest_ns
        if fastest is None or fastest >= INLINE_MAX_NS or session.faults.execute_delay_ms:
            return False
        if sum(len(p.inline.data) for p in request.request.pools) > INLINE_MAX_BYTES:
            return False
        return self.driver.scheduler.starts_at_once(session.client_key, pm.priority)

    def execute_sync(
        self,
        request: spb.ExecuteRequest,
        what: str,
        record: Record,
        context: grpc.ServicerContext | None = None,
        fault: Fault | None = None,
        canonical: Request | None = None,
        reply: Callable[[ExecutionResult], spb.ExecuteResult] = wire.execution_result_to,
    ) -> spb.ExecuteResult:
        """One synchronous execution (also a burst's, a fast burst's, a streamed one's): the
        result, never raises (but an injected abort, which aborts the RPC). ``canonical``: the
        request already converted (a streamed execution's, its pools reassembled); ``reply``
        makes the answer of a result (a streamed execution's leaves its large pools out).
        A failure is logged once (``call_log``)."""
        msg = self._execute_sync(request, what, record, context, fault, canonical, reply)
        call_log.failed(what, msg.status, msg.message)
        return msg

    def _execute_sync(
        self,
        request: spb.ExecuteRequest,
        what: str,
        record: Record,
        context: grpc.ServicerContext | None,
        fault: Fault | None,
        canonical: Request | None,
        reply: Callable[[ExecutionResult], spb.ExecuteResult],
    ) -> spb.ExecuteResult:
        t0 = time.perf_counter()
        error = at_start(fault, context)  # an abort raises
        try:
            if error is not None:
                raise error
            self._lifecycle.enter(what)
        except Exception as err:
            msg: spb.ExecuteResult = wire.status_to(spb.ExecuteResult(), *failure(err, f"launching {what}"))
            record(msg.status, None)
            return msg
        try:
            try:
                job = self._launch(request, canonical)
            except Exception as err:
                msg = wire.status_to(spb.ExecuteResult(), *failure(err, f"launching {what}"))
                record(msg.status, None)
                return msg
            try:
                msg = reply(within_message_limit(job.run(), refused_result))
            except Exception as err:
                msg = wire.status_to(spb.ExecuteResult(), *failure(err, f"in {what}"))
            finally:
                job.close()
            before_reply(fault, context)
            record(msg.status, time.perf_counter() - t0)
            return msg
        finally:
            self._lifecycle.leave()

    def execute_1_3(self, request: spb.ExecuteRequest, context: grpc.ServicerContext) -> Iterator[spb.ExecuteEvent]:
        def launch() -> ExecutionJob:
            require(self.driver, "execute_1_3")
            return self._launch(request)

        return launch_then_notify(
            spb.ExecuteEvent,
            spb.ExecuteResult,
            launch,
            lambda job: wire.execution_result_to(within_message_limit(job.run(), refused_result)),
            "an execution",
            self._lifecycle,
            self._record_async,
            context,
            self.faults.take("execute_1_3") if self.faults.armed else None,
        )

    async def configureExecutionBurst(
        self, request_iterator: AsyncIterator[spb.BurstRequest], context: aio.ServicerContext[Any, Any]
    ) -> None:
        """A burst: one stream, many executions, answered in order. A coroutine on the
        server's loop: an idle burst holds no thread; a short execution runs inline
        (``runs_inline``), any other on a worker thread. Counted against the caps from its
        start, keyed by its connection.

        It reads and writes the call itself (``context.read`` / ``context.write``) instead of
        iterating ``request_iterator`` and yielding answers: each of those is an async
        generator (grpc.aio's request iterator, this handler, the request-id wrapper) whose
        steps cost more per execution than a small model's whole run."""
        peer = context.peer() or ""
        try:
            require(self.driver, "configureExecutionBurst")
            self._long_calls.enter("burst", peer)
        except HalError as err:
            self.metrics.rpc("configureExecutionBurst", err.error_status)
            await context.write(
                spb.BurstResponse(result=wire.status_to(spb.ExecuteResult(), err.error_status, err.message))
            )
            return
        # Given back when the stream ends, also when the call is cancelled mid-wait.
        leave = once(lambda: self._long_calls.leave("burst", peer))
        context.add_done_callback(lambda _context: leave())
        sync = SyncContext(context, asyncio.get_running_loop()).watch()  # the executions' context
        try:
            # An injected abort is taken when the stream opens; the other faults per execution.
            abort = self.faults.take(BURST, ("abort",)) if self.faults.armed else None
            if abort is not None and abort.after == 0:
                await context.abort(*abort_status(abort))
            sent = 0
            while True:
                try:
                    req = await context.read()
                except DecodeError as err:
                    # Garbage from the client: answered in band and logged once, the stream ended.
                    status, message = ErrorStatus.INVALID_ARGUMENT, f"a burst request could not be decoded: {err}"
                    self.metrics.rpc("configureExecutionBurst", status)
                    log_limits.undecodable("configureExecutionBurst", err)
                    await context.write(spb.BurstResponse(result=wire.status_to(spb.ExecuteResult(), status, message)))
                    return
                if req is aio.EOF:
                    return
                # A 1.2 device's burst has no deadline, loop timeout or tokens (INVALID_ARGUMENT).
                result = burst_refusal(self.driver, req.execute)
                if result is None:
                    fault = self.faults.take(BURST, ("error", "stall", "exit")) if self.faults.armed else None
                    if fault is None and self.runs_inline(req.execute):
                        result = self.execute_sync(req.execute, "a burst execution", self._record_burst)
                    else:
                        result = await in_thread(
                            self.execute_sync, req.execute, "a burst execution", self._record_burst, sync, fault
                        )
                await context.write(spb.BurstResponse(result=result))
                sent += 1
                if abort is not None and abort.after == sent:
                    await context.abort(*abort_status(abort))
        finally:
            leave()

    @guarded(spb.FencedExecuteResponse)
    def executeFenced(
        self, request: spb.FencedExecuteRequest, context: grpc.ServicerContext
    ) -> spb.FencedExecuteResponse:
        require(self.driver, "executeFenced")
        # Counted until the launch took its scheduler ticket, which then counts it.
        with self._lifecycle.work("executeFenced"):
            fence = self.driver.execute_fenced(
                self.driver.session(request.session),
                request.prepared_model,
                wire.request_from(request.request),
                list(request.wait_for),
                request.measure == 1,
                wire.deadline_from(request.deadline),
                request.loop_timeout_ns,
                request.timeout_after_fence_ns or None,
            )
        return spb.FencedExecuteResponse(sync_fence=fence, callback=fence)

    @guarded(spb.StatusMessage)
    def release(self, request: spb.ReleaseRequest, context: grpc.ServicerContext) -> spb.StatusMessage:
        self.driver.release_prepared(self.driver.session(request.session), request.handle)
        return spb.StatusMessage()


class FencedExecutionCallbackServicer(sgrpc.FencedExecutionCallbackServicer):
    def __init__(self, driver: Driver, metrics: Metrics | None = None) -> None:
        """``metrics``: the server's (a fresh, unserved set when None)."""
        self.driver = driver
        self.metrics = metrics or Metrics(driver)
        self._long_calls = long_calls(driver)
        self.faults = fault_plan(driver)

    @guarded(spb.FencedInfoResponse)
    def getExecutionInfo(self, request: spb.FencedInfoRequest, context: grpc.ServicerContext) -> spb.FencedInfoResponse:
        session = self.driver.session(request.session)
        info = self.driver.fenced_info(session, request.callback, False, None)
        if request.wait and not info.signalled:
            with self._long_calls.holding("fence wait", session.client_key):
                info = self._wait(session, request.callback, context)
        return wire.fenced_info_to(within_message_limit(info, refused_info))

    def _wait(self, session: Session, callback: str, context: grpc.ServicerContext) -> FencedExecutionInfo:
        """Wait for the fence until it signals, the caller's deadline is near or the caller is gone."""
        while True:
            remaining = context.time_remaining()
            timeout = _INFO_SLICE_S if remaining is None else max(0.0, min(_INFO_SLICE_S, remaining - _INFO_MARGIN_S))
            info = self.driver.fenced_info(session, callback, True, timeout)
            if info.signalled or timeout < _INFO_SLICE_S or not context.is_active():
                return info

"""The PreparedModel and FencedExecutionCallback services: executions of every kind.

``execute_1_3`` is a server stream: the launch status (the HAL method's return
value), then exactly one notify carrying the ExecutionResult; a launch error is
followed by a notify with the same status. The launched job is closed on every
path (its scheduler ticket and bound pools given back), also when the client
cancels the stream between the two messages.

While the server drains, new executions of every kind (also a burst's next
execution) are refused with DEVICE_UNAVAILABLE; launched ones are counted from
launch to result (``Lifecycle``), fenced ones by their scheduler ticket.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc

from nnhal.core import wire
from nnhal.proto import service_pb2 as spb
from nnhal.proto import service_pb2_grpc as sgrpc
from nnhal.server.driver import Driver
from nnhal.server.jobs import ExecutionJob
from nnhal.server.metrics import Metrics
from nnhal.server.rpc.common import Record, failure, guarded, launch_then_notify, recorder

#: getExecutionInfo answers this long before the caller's gRPC deadline expires.
_INFO_MARGIN_S = 0.05


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

    def _launch(self, request: spb.ExecuteRequest) -> ExecutionJob:
        return self.driver.begin_execute(
            self.driver.session(request.session),
            request.prepared_model,
            wire.request_from(request.request),
            request.measure == 1,
            wire.deadline_from(request.deadline),
            request.loop_timeout_ns,
            request.profile,
        )

    def executeSynchronously_1_3(self, request: spb.ExecuteRequest, context: grpc.ServicerContext) -> spb.ExecuteResult:
        return self._execute_sync(request, "executeSynchronously_1_3", self._record_sync)

    def _execute_sync(self, request: spb.ExecuteRequest, what: str, record: Record) -> spb.ExecuteResult:
        t0 = time.perf_counter()
        try:
            self._lifecycle.enter(what)
        except Exception as err:
            msg: spb.ExecuteResult = wire.status_to(spb.ExecuteResult(), *failure(err, f"launching {what}"))
            record(msg.status, None)
            return msg
        try:
            try:
                job = self._launch(request)
            except Exception as err:
                msg = wire.status_to(spb.ExecuteResult(), *failure(err, f"launching {what}"))
                record(msg.status, None)
                return msg
            try:
                msg = wire.execution_result_to(job.run())
            except Exception as err:
                msg = wire.status_to(spb.ExecuteResult(), *failure(err, f"in {what}"))
            finally:
                job.close()
            record(msg.status, time.perf_counter() - t0)
            return msg
        finally:
            self._lifecycle.leave()

    def execute_1_3(self, request: spb.ExecuteRequest, context: grpc.ServicerContext) -> Iterator[spb.ExecuteEvent]:
        return launch_then_notify(
            spb.ExecuteEvent,
            spb.ExecuteResult,
            lambda: self._launch(request),
            lambda job: wire.execution_result_to(job.run()),
            "an execution",
            self._lifecycle,
            self._record_async,
        )

    def configureExecutionBurst(
        self, request_iterator: Iterator[spb.BurstRequest], context: grpc.ServicerContext
    ) -> Iterator[spb.BurstResponse]:
        """A burst: one stream, many executions, answered in order."""
        for req in request_iterator:
            yield spb.BurstResponse(result=self._execute_sync(req.execute, "a burst execution", self._record_burst))

    @guarded(spb.FencedExecuteResponse)
    def executeFenced(
        self, request: spb.FencedExecuteRequest, context: grpc.ServicerContext
    ) -> spb.FencedExecuteResponse:
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

    @guarded(spb.FencedInfoResponse)
    def getExecutionInfo(self, request: spb.FencedInfoRequest, context: grpc.ServicerContext) -> spb.FencedInfoResponse:
        session = self.driver.session(request.session)
        remaining = context.time_remaining()
        timeout = None if remaining is None else max(0.0, remaining - _INFO_MARGIN_S)
        return wire.fenced_info_to(self.driver.fenced_info(session, request.callback, request.wait, timeout))

"""The Execution (IExecution) and Burst (IBurst) services: AIDL objects named by handles.

Both objects belong to the session that created them (``server.aidl_objects``); a
handle from another session, or released, is INVALID_ARGUMENT. One execution runs on
an object at a time (the AIDL rule): callers wait on its lock — an IExecution's fenced
run holds it from its launch until its fence signals — for at most ``BUSY_WAIT_S``
(or until their deadline), then get GENERAL_FAILURE ("at most one computation at a
time", as the AOSP sample driver answers). Results carry AIDL Timing (ns, -1). Every
method but ``release`` checks the device's level first (``common.hal_method``).

A burst execution names its pools' memory identifier tokens; a pool sent empty is
taken from the burst's cache (``BurstObject.resolve``), and ``releaseMemoryResource``
forgets one — a later execution naming it without sending it is INVALID_ARGUMENT.
"""

from __future__ import annotations

import time

import grpc

from nnhal.core import wire_aidl, wire_deadline
from nnhal.core.aidl_types import loop_timeout_for_driver, optional_duration
from nnhal.core.errors import GeneralFailure, HalError
from nnhal.core.types import Request
from nnhal.proto import aidl_pb2 as apb, aidl_pb2_grpc as agrpc, service_pb2 as spb
from nnhal.server.aidl_objects import ReusableExecution
from nnhal.server.executions import Arrival, Execution, Executions, FencedExecution, Method
from nnhal.server.rpc.aidl_servicer import checked_config
from nnhal.server.rpc.common import as_result, hal_method

#: The longest a run waits for the IExecution's previous one (a fenced run may wait for fences).
BUSY_WAIT_S = 60.0


def _hold(execution: ReusableExecution, deadline_ns: int | None, what: str) -> None:
    """Take the IExecution's one-run-at-a-time lock, waiting up to ``BUSY_WAIT_S`` or the deadline."""
    wait = BUSY_WAIT_S
    if deadline_ns is not None:
        wait = min(wait, max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9))
    if not execution.lock.acquire(timeout=wait):
        raise GeneralFailure(
            f"{what}: an IExecution runs at most one computation at a time, and its previous run "
            f"(a fenced one lasts until its fence signals) did not end within {wait:.3g} s"
        )


class ExecutionServicer(agrpc.ExecutionServicer):
    """IExecution: runs of one reusable execution."""

    def __init__(self, executions: Executions) -> None:
        self.executions = executions
        self.driver = executions.driver

    @hal_method("IExecution.executeSynchronously", timer="execute")
    def executeSynchronously(
        self, request: apb.ExecutionRunRequest, context: grpc.ServicerContext, m: Method, arrival: Arrival | None
    ) -> apb.AidlExecutionResult:
        x = self.executions
        try:
            if arrival is not None and arrival.error is not None:
                raise arrival.error
            session = self.driver.session(request.session)
            e = self.driver.aidl.executions.get(session.id, request.execution)
            deadline = wire_deadline.deadline_from(request.deadline)
            _hold(e, deadline, m.name)
        except HalError as err:
            return wire_aidl.execution_result_to(x.refuse(m, err).result())
        call = Execution(session.id, e.prepared, e.request, e.measure, deadline, e.loop_timeout_ns)
        try:
            result = x.execute(m, lambda: call, context, Arrival(None, arrival.fault) if arrival else None)
            return wire_aidl.execution_result_to(as_result(result))
        finally:
            e.lock.release()

    @hal_method("IExecution.executeFenced", spb.FencedExecuteResponse)
    def executeFenced(
        self, request: apb.ExecutionFencedRequest, context: grpc.ServicerContext
    ) -> spb.FencedExecuteResponse:
        session = self.driver.session(request.session)
        e = self.driver.aidl.executions.get(session.id, request.execution)
        duration = optional_duration(wire_aidl.optional_from(request, "duration_ns"), "durationNs")
        deadline = wire_deadline.deadline_from(request.deadline)
        _hold(e, deadline, "IExecution.executeFenced")
        # Held until the fence signals (the worker releases it); given back here if the launch fails.
        call = FencedExecution(
            session.id,
            e.prepared,
            e.request,
            tuple(request.wait_for),
            e.measure,
            deadline,
            e.loop_timeout_ns,
            duration,
            e.lock.release,
        )
        try:
            what = "IExecution.executeFenced"
            fence = self.executions.execute_fenced(what, call, what)
        except BaseException:
            e.lock.release()
            raise
        return spb.FencedExecuteResponse(sync_fence=fence, callback=fence)

    @hal_method("IExecution.release", spb.StatusMessage)
    def release(self, request: spb.ReleaseRequest, context: grpc.ServicerContext) -> spb.StatusMessage:
        self.driver.aidl.release_execution(self.driver.session(request.session), request.handle)
        return spb.StatusMessage()


class BurstServicer(agrpc.BurstServicer):
    """IBurst: executions with memories cached by identifier token."""

    def __init__(self, executions: Executions) -> None:
        self.executions = executions
        self.driver = executions.driver

    def _execute(
        self,
        m: Method,
        arrival: Arrival | None,
        request: apb.BurstExecuteRequest | apb.BurstExecuteWithConfigRequest,
        context: grpc.ServicerContext,
    ) -> apb.AidlExecutionResult:
        x = self.executions
        try:
            if arrival is not None and arrival.error is not None:
                raise arrival.error
            session = self.driver.session(request.session)
            burst = self.driver.aidl.bursts.get(session.id, request.burst)
            if isinstance(request, apb.BurstExecuteRequest):
                measure = request.measure_timing
                loop_ns = loop_timeout_for_driver(wire_aidl.optional_from(request, "loop_timeout_duration_ns"))
            else:
                config, loop_ns = checked_config(self.driver, request.config, m.name)
                measure = config.measure_timing
            args, pools = wire_aidl.burst_pools_from(request.request)
        except HalError as err:
            return wire_aidl.execution_result_to(x.refuse(m, err).result())
        tokens = list(request.memory_identifier_tokens)
        deadline = wire_deadline.deadline_from(request.deadline)

        def build() -> Execution:
            canonical = Request(args.inputs, args.outputs, burst.resolve(pools, tokens))
            return Execution(session.id, burst.prepared, canonical, measure, deadline, loop_ns)

        fault = Arrival(None, arrival.fault) if arrival is not None else None
        with burst.lock:
            return wire_aidl.execution_result_to(as_result(x.execute(m, build, context, fault)))

    @hal_method("IBurst.executeSynchronously", timer="execute")
    def executeSynchronously(
        self, request: apb.BurstExecuteRequest, context: grpc.ServicerContext, m: Method, arrival: Arrival | None
    ) -> apb.AidlExecutionResult:
        return self._execute(m, arrival, request, context)

    @hal_method("IBurst.executeSynchronouslyWithConfig", timer="execute")
    def executeSynchronouslyWithConfig(
        self,
        request: apb.BurstExecuteWithConfigRequest,
        context: grpc.ServicerContext,
        m: Method,
        arrival: Arrival | None,
    ) -> apb.AidlExecutionResult:
        return self._execute(m, arrival, request, context)

    @hal_method("IBurst.releaseMemoryResource", spb.StatusMessage)
    def releaseMemoryResource(
        self, request: apb.ReleaseMemoryRequest, context: grpc.ServicerContext
    ) -> spb.StatusMessage:
        session = self.driver.session(request.session)
        self.driver.aidl.bursts.get(session.id, request.burst).release_memory(request.memory_identifier_token)
        return spb.StatusMessage()

    @hal_method("IBurst.release", spb.StatusMessage)
    def release(self, request: spb.ReleaseRequest, context: grpc.ServicerContext) -> spb.StatusMessage:
        self.driver.aidl.release_burst(self.driver.session(request.session), request.handle)
        return spb.StatusMessage()

"""The Execution (IExecution) and Burst (IBurst) services: AIDL objects named by handles.

Both objects belong to the session that created them (``server.aidl_objects``); a
handle from another session, or released, is INVALID_ARGUMENT. One execution runs on
an object at a time (the AIDL rule): callers wait on its lock — an IExecution's fenced
run holds it from its launch until its fence signals — for at most ``BUSY_WAIT_S``
(or until their deadline), then get GENERAL_FAILURE ("at most one computation at a
time", as the AOSP sample driver answers). Results carry AIDL Timing (ns, -1). Every
method but ``release`` checks the device's level first (``levels.require``).

A burst execution names its pools' memory identifier tokens; a pool sent empty is
taken from the burst's cache (``BurstObject.resolve``), and ``releaseMemoryResource``
forgets one — a later execution naming it without sending it is INVALID_ARGUMENT.
"""

from __future__ import annotations

import time

import grpc

from nnhal.core import wire, wire_aidl
from nnhal.core.aidl_types import loop_timeout_for_driver, optional_duration
from nnhal.core.errors import GeneralFailure, HalError
from nnhal.core.types import ExecutionResult, Request
from nnhal.proto import aidl_pb2 as apb, aidl_pb2_grpc as agrpc, service_pb2 as spb
from nnhal.server.aidl_objects import ReusableExecution
from nnhal.server.driver import Driver
from nnhal.server.jobs import ExecutionJob
from nnhal.server.metrics import Metrics
from nnhal.server.rpc.aidl_servicer import checked_config
from nnhal.server.rpc.common import Record, failure, recorder
from nnhal.server.rpc.levels import answer, require, run_sync

#: The longest a run waits for the IExecution's previous one (a fenced run may wait for fences).
BUSY_WAIT_S = 60.0


def _refused(err: Exception, what: str) -> apb.AidlExecutionResult:
    return wire_aidl.execution_result_to(ExecutionResult(*failure(err, what)))


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

    def __init__(self, driver: Driver, metrics: Metrics | None = None) -> None:
        self.driver = driver
        self.metrics = metrics = metrics or Metrics(driver)
        self._record = recorder(metrics, "IExecution.executeSynchronously", metrics.execute_seconds.observe)

    def executeSynchronously(
        self, request: apb.ExecutionRunRequest, context: grpc.ServicerContext
    ) -> apb.AidlExecutionResult:
        what = "IExecution.executeSynchronously"
        try:
            require(self.driver, what)
            session = self.driver.session(request.session)
            execution = self.driver.aidl.executions.get(session.id, request.execution)
        except HalError as err:
            self._record(err.error_status, None)
            return _refused(err, what)
        deadline = wire.deadline_from(request.deadline)

        def launch() -> ExecutionJob:
            e = execution
            return self.driver.begin_execute(session, e.prepared, e.request, e.measure, deadline, e.loop_timeout_ns)

        try:
            _hold(execution, deadline, what)
        except HalError as err:
            self._record(err.error_status, None)
            return _refused(err, what)
        try:
            return wire_aidl.execution_result_to(run_sync(self.driver, what, launch, self._record))
        finally:
            execution.lock.release()

    @answer("IExecution.executeFenced", spb.FencedExecuteResponse)
    def executeFenced(self, request: apb.ExecutionFencedRequest) -> spb.FencedExecuteResponse:
        session = self.driver.session(request.session)
        e = self.driver.aidl.executions.get(session.id, request.execution)
        duration = optional_duration(wire_aidl.optional_from(request, "duration_ns"), "durationNs")
        deadline = wire.deadline_from(request.deadline)
        _hold(e, deadline, "IExecution.executeFenced")
        # Held until the fence signals (the worker releases it); given back here if the launch fails.
        try:
            with self.driver.lifecycle.work("IExecution.executeFenced"):
                fence = self.driver.execute_fenced(
                    session,
                    e.prepared,
                    e.request,
                    list(request.wait_for),
                    e.measure,
                    deadline,
                    e.loop_timeout_ns,
                    duration,
                    e.lock.release,
                )
        except BaseException:
            e.lock.release()
            raise
        return spb.FencedExecuteResponse(sync_fence=fence, callback=fence)

    @answer("IExecution.release", spb.StatusMessage, gated=False)
    def release(self, request: spb.ReleaseRequest) -> spb.StatusMessage:
        self.driver.aidl.release_execution(self.driver.session(request.session), request.handle)
        return spb.StatusMessage()


class BurstServicer(agrpc.BurstServicer):
    """IBurst: executions with memories cached by identifier token."""

    def __init__(self, driver: Driver, metrics: Metrics | None = None) -> None:
        self.driver = driver
        self.metrics = metrics = metrics or Metrics(driver)
        observe = metrics.execute_seconds.observe
        self._record = recorder(metrics, "IBurst.executeSynchronously", observe)
        self._record_config = recorder(metrics, "IBurst.executeSynchronouslyWithConfig", observe)

    def _execute(
        self, what: str, request: apb.BurstExecuteRequest | apb.BurstExecuteWithConfigRequest, record: Record
    ) -> apb.AidlExecutionResult:
        try:
            require(self.driver, what)
            session = self.driver.session(request.session)
            burst = self.driver.aidl.bursts.get(session.id, request.burst)
            if isinstance(request, apb.BurstExecuteRequest):
                measure = request.measure_timing
                loop_ns = loop_timeout_for_driver(wire_aidl.optional_from(request, "loop_timeout_duration_ns"))
            else:
                config, loop_ns = checked_config(self.driver, request.config, what)
                measure = config.measure_timing
            args, pools = wire_aidl.burst_pools_from(request.request)
        except HalError as err:
            record(err.error_status, None)
            return _refused(err, what)
        tokens = list(request.memory_identifier_tokens)
        deadline = wire.deadline_from(request.deadline)

        def launch() -> ExecutionJob:
            canonical = Request(args.inputs, args.outputs, burst.resolve(pools, tokens))
            return self.driver.begin_execute(session, burst.prepared, canonical, measure, deadline, loop_ns)

        with burst.lock:
            return wire_aidl.execution_result_to(run_sync(self.driver, what, launch, record))

    def executeSynchronously(
        self, request: apb.BurstExecuteRequest, context: grpc.ServicerContext
    ) -> apb.AidlExecutionResult:
        return self._execute("IBurst.executeSynchronously", request, self._record)

    def executeSynchronouslyWithConfig(
        self, request: apb.BurstExecuteWithConfigRequest, context: grpc.ServicerContext
    ) -> apb.AidlExecutionResult:
        return self._execute("IBurst.executeSynchronouslyWithConfig", request, self._record_config)

    @answer("IBurst.releaseMemoryResource", spb.StatusMessage)
    def releaseMemoryResource(self, request: apb.ReleaseMemoryRequest) -> spb.StatusMessage:
        session = self.driver.session(request.session)
        self.driver.aidl.bursts.get(session.id, request.burst).release_memory(request.memory_identifier_token)
        return spb.StatusMessage()

    @answer("IBurst.release", spb.StatusMessage, gated=False)
    def release(self, request: spb.ReleaseRequest) -> spb.StatusMessage:
        self.driver.aidl.release_burst(self.driver.session(request.session), request.handle)
        return spb.StatusMessage()

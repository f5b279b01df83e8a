"""The AIDL method forms of IDevice, IPreparedModel and IFencedExecutionCallback (``aidl.proto``).

Requests carry the canonical (1.3 = AIDL) Model and Request; what differs is
converted here: AIDL Timing (ns, -1) in results, optional durations (-1 or unset:
omitted; other negative values INVALID_ARGUMENT), the V4 configuration parcelables
and their hints (``aidl_types.accepted_hints``: INVALID_ARGUMENT for a negative or
repeated token or a bad extension mapping; hints of extensions the device lacks are
ignored — this device uses none of the rest either), and ``BufferRole.probability``.
``configureExecutionBurst`` and ``createReusableExecution`` return handles of
session-owned objects served by ``aidl_objects_servicer``. Every method checks the
device's level first (``common.hal_method``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc

from nnhal.core import wire_aidl, wire_deadline, wire_device, wire_model, wire_request
from nnhal.core.aidl_types import ExecutionConfig, accepted_hints, loop_timeout_for_driver, optional_duration
from nnhal.core.types import Request
from nnhal.proto import aidl_pb2 as apb, aidl_pb2_grpc as agrpc, service_pb2 as spb
from nnhal.server.aidl_objects import BURST_CACHE, BurstObject, ReusableExecution
from nnhal.server.driver import Driver
from nnhal.server.executions import Arrival, Execution, Executions, FencedExecution, Method, Preparation
from nnhal.server.rpc.common import as_result, hal_method
from nnhal.server.rpc.device_servicer import prepare_events


def checked_config(driver: Driver, msg: apb.ExecutionConfig, where: str) -> tuple[ExecutionConfig, int]:
    """The execution config, its hints validated; and its loop timeout in the driver's form."""
    config = wire_aidl.execution_config_from(msg)
    names = [e.name for e in driver.extensions()]
    accepted_hints(config.execution_hints, config.extension_name_to_prefix, names, f"{where} executionHints")
    return config, loop_timeout_for_driver(config.loop_timeout_duration_ns)


class AidlDeviceServicer(agrpc.AidlDeviceServicer):
    """AIDL IDevice: ``allocate`` with BufferRole.probability, ``prepareModelWithConfig`` (V4)."""

    def __init__(self, executions: Executions) -> None:
        self.executions = executions
        self.driver = executions.driver

    @hal_method("AIDL IDevice.allocate", spb.AllocateResponse)
    def allocate(self, request: apb.AidlAllocateRequest, context: grpc.ServicerContext) -> spb.AllocateResponse:
        session = self.driver.session(request.session)
        self.executions.admit("allocate")
        buffer, token = self.driver.allocate(
            session,
            wire_device.buffer_desc_from(request.desc),
            [r.handle for r in request.prepared_models],
            [wire_aidl.buffer_role_from(r) for r in request.input_roles],
            [wire_aidl.buffer_role_from(r) for r in request.output_roles],
        )
        return spb.AllocateResponse(buffer=buffer, token=token)

    @hal_method("prepareModelWithConfig", what="a preparation", timer="prepare")
    def prepareModelWithConfig(
        self,
        request: apb.PrepareModelWithConfigRequest,
        context: grpc.ServicerContext,
        m: Method,
        arrival: Arrival | None,
    ) -> Iterator[spb.PrepareModelEvent]:
        msg = request.config

        def build() -> Preparation:
            session = self.driver.session(request.session)
            config = wire_aidl.prepare_config_from(msg, session.protocol_version)
            names = [e.name for e in self.driver.extensions()]
            accepted_hints(config.compilation_hints, config.extension_name_to_prefix, names, "compilationHints")
            return Preparation(
                request.session,
                wire_model.model_from(request.model),
                config.preference,
                config.priority,
                wire_deadline.deadline_from(msg.deadline),
                # The AIDL ignores the token when no cache is asked for.
                config.cache_token if msg.want_cache else b"",
                msg.want_cache,
            )

        return prepare_events(self.executions.prepare(m, build, context, arrival))


class AidlPreparedModelServicer(agrpc.AidlPreparedModelServicer):
    """AIDL IPreparedModel: synchronous and fenced executions (plain and ``WithConfig``),
    bursts and reusable executions."""

    def __init__(self, executions: Executions) -> None:
        self.executions = executions
        self.driver = executions.driver

    def _sync(
        self, m: Method, arrival: Arrival | None, request: Any, options: Callable[[], tuple[bool, int]], live: Any
    ) -> apb.AidlExecutionResult:
        """One synchronous execution; ``options`` (measure, loop timeout in the driver's form)
        is read at launch, so that a bad configuration is the result's status."""

        def build() -> Execution:
            self.driver.session(request.session)
            measure, loop_ns = options()
            canonical = wire_request.request_from(request.request)
            deadline = wire_deadline.deadline_from(request.deadline)
            return Execution(request.session, request.prepared_model, canonical, measure, deadline, loop_ns)

        return wire_aidl.execution_result_to(as_result(self.executions.execute(m, build, live, arrival)))

    @hal_method("AIDL IPreparedModel.executeSynchronously", timer="execute")
    def executeSynchronously(
        self, request: apb.AidlExecuteRequest, context: grpc.ServicerContext, m: Method, arrival: Arrival | None
    ) -> apb.AidlExecutionResult:
        def options() -> tuple[bool, int]:
            loop = wire_aidl.optional_from(request, "loop_timeout_duration_ns")
            return request.measure_timing, loop_timeout_for_driver(loop)

        return self._sync(m, arrival, request, options, context)

    @hal_method("executeSynchronouslyWithConfig", timer="execute")
    def executeSynchronouslyWithConfig(
        self, request: apb.ExecuteWithConfigRequest, context: grpc.ServicerContext, m: Method, arrival: Arrival | None
    ) -> apb.AidlExecutionResult:
        def options() -> tuple[bool, int]:
            config, loop_ns = checked_config(self.driver, request.config, "executeSynchronouslyWithConfig")
            return config.measure_timing, loop_ns

        return self._sync(m, arrival, request, options, context)

    def _fenced(self, method: str, request: Any, measure: bool, loop_ns: int) -> spb.FencedExecuteResponse:
        duration = optional_duration(wire_aidl.optional_from(request, "duration_ns"), "durationNs")
        call = FencedExecution(
            request.session,
            request.prepared_model,
            wire_request.request_from(request.request),
            tuple(request.wait_for),
            measure,
            wire_deadline.deadline_from(request.deadline),
            loop_ns,
            duration,
        )
        fence = self.executions.execute_fenced("executeFenced", call, method)
        return spb.FencedExecuteResponse(sync_fence=fence, callback=fence)

    @hal_method("AIDL IPreparedModel.executeFenced", spb.FencedExecuteResponse)
    def executeFenced(
        self, request: apb.AidlFencedExecuteRequest, context: grpc.ServicerContext
    ) -> spb.FencedExecuteResponse:
        self.driver.session(request.session)
        loop_ns = loop_timeout_for_driver(wire_aidl.optional_from(request, "loop_timeout_duration_ns"))
        return self._fenced("AIDL IPreparedModel.executeFenced", request, request.measure_timing, loop_ns)

    @hal_method("executeFencedWithConfig", spb.FencedExecuteResponse)
    def executeFencedWithConfig(
        self, request: apb.FencedExecuteWithConfigRequest, context: grpc.ServicerContext
    ) -> spb.FencedExecuteResponse:
        self.driver.session(request.session)
        config, loop_ns = checked_config(self.driver, request.config, "executeFencedWithConfig")
        return self._fenced("executeFencedWithConfig", request, config.measure_timing, loop_ns)

    @hal_method("AIDL IPreparedModel.configureExecutionBurst", apb.ObjectResponse)
    def configureExecutionBurst(
        self, request: apb.ConfigureBurstRequest, context: grpc.ServicerContext
    ) -> apb.ObjectResponse:
        session = self.driver.session(request.session)
        self.driver.prepared(session, request.prepared_model)  # INVALID_ARGUMENT when not this session's
        sid, budget = session.id, self.driver.budget

        def charge(delta: int) -> None:
            budget.account(sid, delta, BURST_CACHE)

        handle = self.driver.aidl.add_burst(session, BurstObject(request.prepared_model, charge))
        return apb.ObjectResponse(handle=handle)

    @hal_method("createReusableExecution", apb.ObjectResponse)
    def createReusableExecution(
        self, request: apb.CreateReusableExecutionRequest, context: grpc.ServicerContext
    ) -> apb.ObjectResponse:
        session = self.driver.session(request.session)
        config, loop_ns = checked_config(self.driver, request.config, "createReusableExecution")
        canonical: Request = wire_request.request_from(request.request)
        # Validated once now (INVALID_ARGUMENT here, as the AIDL asks); each run binds afresh.
        self.driver.begin_execute(
            session, request.prepared_model, canonical, config.measure_timing, None, loop_ns
        ).close()
        execution = ReusableExecution(request.prepared_model, canonical, config.measure_timing, loop_ns)
        return apb.ObjectResponse(handle=self.driver.aidl.add_execution(session, execution))


class AidlFencedExecutionCallbackServicer(agrpc.AidlFencedExecutionCallbackServicer):
    """AIDL IFencedExecutionCallback::getExecutionInfo: the 1.3 answer with AIDL Timing."""

    def __init__(self, executions: Executions) -> None:
        self.executions = executions

    @hal_method("AIDL IFencedExecutionCallback.getExecutionInfo", apb.AidlFencedInfoResponse)
    def getExecutionInfo(
        self, request: spb.FencedInfoRequest, context: grpc.ServicerContext
    ) -> apb.AidlFencedInfoResponse:
        method = "AIDL IFencedExecutionCallback.getExecutionInfo"
        info = self.executions.fenced_info(request.session, request.callback, request.wait, context, method)
        return wire_aidl.fenced_info_to(info, apb.AidlFencedInfoResponse())

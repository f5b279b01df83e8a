"""The HidlDevice and HidlPreparedModel services: the NN HAL 1.0-1.2 method forms.

Each RPC takes its version's types (``hidl.proto``), converts them to the versioned
values (``core.wire_hidl``) and then to canonical (``core.versions``), and runs the
same driver as the 1.3 forms. Answers travel in the version's types too; statuses
are converted as the version has them (MISSED_DEADLINE_*, RESOURCE_EXHAUSTED_*
-> GENERAL_FAILURE). Asynchronous forms (``prepareModel*``, ``execute``,
``execute_1_2``) are launch / notify / end streams like the 1.3 ones. A form newer
than the device's level is refused (``levels.require``). A model is held to the
older of the form's version and the device's level, as the AOSP adapters hold a
1.0 model to 1.0: a use of an operation that needs a newer version (RELU of rank 5
in a 1.0 model) is INVALID_ARGUMENT from ``prepareModel``, and unsupported (with
the reason) from ``getSupportedOperations``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from nnhal.core import versions, wire, wire_hidl, wire_session
from nnhal.core.enums import ErrorStatus, ExecutionPreference, HalVersion, Priority
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import ExecutionResult, Model, Request
from nnhal.proto import hidl_pb2 as hpb, hidl_pb2_grpc as hgrpc, service_pb2 as spb
from nnhal.server.driver import Driver
from nnhal.server.executor.validate import supported_operations, validate_full
from nnhal.server.jobs import ExecutionJob, PrepareJob
from nnhal.server.memory import bind_model_pools
from nnhal.server.metrics import Metrics
from nnhal.server.rpc.common import Held, held, launch_then_notify, long_calls, recorder, within_message_limit
from nnhal.server.rpc.device_servicer import prepare_stream
from nnhal.server.rpc.levels import answer, require, run_sync
from nnhal.server.session import Session

V = HalVersion
_Caps = TypeVar("_Caps", hpb.CapabilitiesV1_0Response, hpb.CapabilitiesV1_1Response, hpb.CapabilitiesV1_2Response)


def _versioned_stream(events: Iterator[Any], version: HalVersion) -> Iterator[Any]:
    """The events of a launch / notify stream with their statuses as ``version`` has them."""
    for event in events:
        part = getattr(event, event.WhichOneof("event"))
        part.status = int(wire_hidl.status_for(wire.error_status_from(part.status), version))
        yield event


def _model(msg: Any) -> Model:
    # Not validated here: the driver validates (INVALID_ARGUMENT, as the VTS requires).
    model: Model = versions.to_canonical(wire_hidl.model_from(msg), validate_result=False)
    return model


def _request(msg: hpb.RequestV1_0) -> Request:
    request: Request = versions.to_canonical(wire_hidl.request_from(msg), validate_result=False)
    return request


class HidlDeviceServicer(hgrpc.HidlDeviceServicer):
    """IDevice 1.0, 1.1 and 1.2."""

    def __init__(self, driver: Driver, metrics: Metrics | None = None) -> None:
        self.driver = driver
        self.metrics = metrics = metrics or Metrics(driver)
        self._lifecycle = driver.lifecycle
        self._record = {
            name: recorder(metrics, name, metrics.prepare_seconds.observe)
            for name in ("prepareModel", "prepareModel_1_1", "prepareModel_1_2", "prepareModelFromCache")
        }

    def _capabilities(self, version: HalVersion, msg: _Caps, request: spb.DeviceRequest) -> _Caps:
        self.driver.session(request.session)
        wire_hidl.capabilities_to(versions.convert(self.driver.capabilities, to=version), msg.capabilities)
        return msg

    @answer("getCapabilities", hpb.CapabilitiesV1_0Response, V.V1_0)
    def getCapabilities(self, request: spb.DeviceRequest) -> hpb.CapabilitiesV1_0Response:
        return self._capabilities(V.V1_0, hpb.CapabilitiesV1_0Response(), request)

    @answer("getCapabilities_1_1", hpb.CapabilitiesV1_1Response, V.V1_1)
    def getCapabilities_1_1(self, request: spb.DeviceRequest) -> hpb.CapabilitiesV1_1Response:
        return self._capabilities(V.V1_1, hpb.CapabilitiesV1_1Response(), request)

    @answer("getCapabilities_1_2", hpb.CapabilitiesV1_2Response, V.V1_2)
    def getCapabilities_1_2(self, request: spb.DeviceRequest) -> hpb.CapabilitiesV1_2Response:
        return self._capabilities(V.V1_2, hpb.CapabilitiesV1_2Response(), request)

    def _supported(self, request: Any, version: HalVersion) -> spb.SupportedOperationsResponse:
        session = self.driver.session(request.session)
        model = _model(request.model)
        if version >= self.driver.config.feature_level:
            supported, reasons = self.driver.supported_operations(session, model)
        else:  # held to the form's version (module docstring)
            bound = bind_model_pools(model.pools, self.driver.config.shared_memory, session.is_local)
            try:
                supported, reasons = supported_operations(model, bound.buffers, version)
            finally:
                bound.close()
        return spb.SupportedOperationsResponse(supported=supported, reasons=reasons)

    def _held(self, session: Session, msg: Any, version: HalVersion) -> Model:
        """The canonical model of ``msg``; INVALID_ARGUMENT when it needs more than ``version``
        and the device is newer (the device checks its own level itself)."""
        model = _model(msg)
        if version >= self.driver.config.feature_level:
            return model
        bound = bind_model_pools(model.pools, self.driver.config.shared_memory, session.is_local)
        try:
            needed = validate_full(model, bound.buffers)
        finally:
            bound.close()
        if needed > version:
            raise InvalidArgument(f"the model needs NN HAL {needed.label}; this method carries {version.label} models")
        return model

    @answer("getSupportedOperations", spb.SupportedOperationsResponse, V.V1_0)
    def getSupportedOperations(self, request: hpb.SupportedOperationsV1_0Request) -> spb.SupportedOperationsResponse:
        return self._supported(request, V.V1_0)

    @answer("getSupportedOperations_1_1", spb.SupportedOperationsResponse, V.V1_1)
    def getSupportedOperations_1_1(
        self, request: hpb.SupportedOperationsV1_1Request
    ) -> spb.SupportedOperationsResponse:
        return self._supported(request, V.V1_1)

    @answer("getSupportedOperations_1_2", spb.SupportedOperationsResponse, V.V1_2)
    def getSupportedOperations_1_2(
        self, request: hpb.SupportedOperationsV1_2Request
    ) -> spb.SupportedOperationsResponse:
        return self._supported(request, V.V1_2)

    def _prepare(
        self,
        method: str,
        session_id: str,
        version: HalVersion,
        launch: Callable[[], PrepareJob],
        want_cache: bool,
        context: grpc.ServicerContext,
    ) -> Iterator[spb.PrepareModelEvent]:
        def checked() -> Held[PrepareJob]:
            require(self.driver, method)
            # A preparation is a long-lived call, capped per client as the 1.3 form's are.
            client = self.driver.session(session_id).client_key
            return held(long_calls(self.driver), "preparation", client, launch)

        events = prepare_stream(checked, want_cache, self._lifecycle, self._record[method], context)
        return _versioned_stream(events, version)

    def prepareModel(
        self, request: hpb.PrepareModelV1_0Request, context: grpc.ServicerContext
    ) -> Iterator[spb.PrepareModelEvent]:
        def launch() -> PrepareJob:
            session = self.driver.session(request.session)
            # 1.0 has no preference: the runtime's default, FAST_SINGLE_ANSWER.
            model = self._held(session, request.model, V.V1_0)
            return self.driver.begin_prepare(
                session, model, ExecutionPreference.FAST_SINGLE_ANSWER, Priority.MEDIUM, None
            )

        return self._prepare("prepareModel", request.session, V.V1_0, launch, False, context)

    def prepareModel_1_1(
        self, request: hpb.PrepareModelV1_1Request, context: grpc.ServicerContext
    ) -> Iterator[spb.PrepareModelEvent]:
        def launch() -> PrepareJob:
            session = self.driver.session(request.session)
            model = self._held(session, request.model, V.V1_1)
            return self.driver.begin_prepare(
                session, model, wire_session.preference_of(request, session.protocol_version), Priority.MEDIUM, None
            )

        return self._prepare("prepareModel_1_1", request.session, V.V1_1, launch, False, context)

    def prepareModel_1_2(
        self, request: hpb.PrepareModelV1_2Request, context: grpc.ServicerContext
    ) -> Iterator[spb.PrepareModelEvent]:
        def launch() -> PrepareJob:
            session = self.driver.session(request.session)
            model = self._held(session, request.model, V.V1_2)
            preference = wire_session.preference_of(request, session.protocol_version)
            return self.driver.begin_prepare(session, model, preference, Priority.MEDIUM, None, bytes(request.token))

        return self._prepare("prepareModel_1_2", request.session, V.V1_2, launch, request.want_cache, context)

    def prepareModelFromCache(
        self, request: hpb.PrepareModelFromCacheV1_2Request, context: grpc.ServicerContext
    ) -> Iterator[spb.PrepareModelEvent]:
        def launch() -> PrepareJob:
            return self.driver.prepare_from_cache(
                self.driver.session(request.session),
                [bytes(f.data) for f in request.model_cache],
                [bytes(f.data) for f in request.data_cache],
                bytes(request.token),
                None,
            )

        return self._prepare("prepareModelFromCache", request.session, V.V1_2, launch, False, context)


def _result_v1_0(result: ExecutionResult) -> hpb.ExecuteResultV1_0:
    msg: hpb.ExecuteResultV1_0 = wire.status_to(
        hpb.ExecuteResultV1_0(), wire_hidl.status_for(result.status, V.V1_0), result.message
    )
    for index, data in sorted(result.output_pools.items()):
        msg.output_pools.add(pool_index=index, data=bytes(data))
    return msg


def _result_v1_2(result: ExecutionResult) -> spb.ExecuteResult:
    msg = wire.execution_result_to(result)
    msg.status = int(wire_hidl.status_for(result.status, V.V1_2))  # type: ignore[assignment]
    return msg


def _refused(status: ErrorStatus, message: str) -> ExecutionResult:
    return ExecutionResult(status, message)


class HidlPreparedModelServicer(hgrpc.HidlPreparedModelServicer):
    """IPreparedModel 1.0 (``execute``) and 1.2 (``execute_1_2``, ``executeSynchronously``)."""

    def __init__(self, driver: Driver, metrics: Metrics | None = None) -> None:
        self.driver = driver
        self.metrics = metrics = metrics or Metrics(driver)
        self._lifecycle = driver.lifecycle
        observe = metrics.execute_seconds.observe
        self._record = {name: recorder(metrics, name, observe) for name in ("execute", "execute_1_2")}
        self._record_sync = recorder(metrics, "executeSynchronously", observe)

    def _launcher(self, method: str, request: Any, measure: bool) -> Callable[[], ExecutionJob]:
        def launch() -> ExecutionJob:
            require(self.driver, method)
            session = self.driver.session(request.session)
            return self.driver.begin_execute(session, request.prepared_model, _request(request.request), measure, None)

        return launch

    def execute(self, request: hpb.ExecuteV1_0Request, context: grpc.ServicerContext) -> Iterator[hpb.ExecuteV1_0Event]:
        events = launch_then_notify(
            hpb.ExecuteV1_0Event,
            hpb.ExecuteResultV1_0,
            self._launcher("execute", request, False),
            lambda job: _result_v1_0(within_message_limit(job.run(), _refused)),
            "an execution",
            self._lifecycle,
            self._record["execute"],
            context,
        )
        return _versioned_stream(events, V.V1_0)

    def execute_1_2(self, request: hpb.ExecuteV1_2Request, context: grpc.ServicerContext) -> Iterator[spb.ExecuteEvent]:
        events = launch_then_notify(
            spb.ExecuteEvent,
            spb.ExecuteResult,
            self._launcher("execute_1_2", request, request.measure == 1),
            lambda job: _result_v1_2(within_message_limit(job.run(), _refused)),
            "an execution",
            self._lifecycle,
            self._record["execute_1_2"],
            context,
        )
        return _versioned_stream(events, V.V1_2)

    def executeSynchronously(self, request: hpb.ExecuteV1_2Request, context: grpc.ServicerContext) -> spb.ExecuteResult:
        launch = self._launcher("executeSynchronously", request, request.measure == 1)
        return _result_v1_2(run_sync(self.driver, "executeSynchronously", launch, self._record_sync))

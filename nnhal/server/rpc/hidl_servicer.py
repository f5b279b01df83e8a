"""The HidlDevice and HidlPreparedModel services: the NN HAL 1.0-1.2 method forms.

Each RPC takes its version's types (``hidl.proto``), converts them to the versioned
values (``core.wire_hidl``) and then to canonical (``core.versions``), and runs the
same driver as the 1.3 forms. Answers travel in the version's types too; statuses
are converted as the version has them (MISSED_DEADLINE_*, RESOURCE_EXHAUSTED_*
-> GENERAL_FAILURE). Asynchronous forms (``prepareModel*``, ``execute``,
``execute_1_2``) are launch / notify / end streams like the 1.3 ones. A form newer
than the device's level is refused (``common.hal_method``). A model is held to the
older of the form's version and the device's level, as the AOSP adapters hold a
1.0 model to 1.0: a use of an operation that needs a newer version (RELU of rank 5
in a 1.0 model) is INVALID_ARGUMENT from ``prepareModel``, and unsupported (with
the reason) from ``getSupportedOperations``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from nnhal.core import versions, wire_hidl, wire_result, wire_session, wire_status
from nnhal.core.enums import ExecutionPreference, HalVersion
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import ExecutionResult, Model, Request
from nnhal.proto import hidl_pb2 as hpb, hidl_pb2_grpc as hgrpc, service_pb2 as spb
from nnhal.server.executions import (
    Arrival,
    CachedPreparation,
    Execution,
    Executions,
    Method,
    Preparation,
)
from nnhal.server.executor.validate import supported_operations, validate_full
from nnhal.server.memory import bind_model_pools
from nnhal.server.rpc.common import as_result, cache_contents, events_to, hal_method
from nnhal.server.rpc.device_servicer import prepare_events
from nnhal.server.session import Session

V = HalVersion
_Caps = TypeVar("_Caps", hpb.CapabilitiesV1_0Response, hpb.CapabilitiesV1_1Response, hpb.CapabilitiesV1_2Response)


def _model(msg: Any) -> Model:
    # Not validated here: the driver validates (INVALID_ARGUMENT, as the VTS requires).
    model: Model = versions.to_canonical(wire_hidl.model_from(msg), validate_result=False)
    return model


def _request(msg: hpb.RequestV1_0) -> Request:
    request: Request = versions.to_canonical(wire_hidl.request_from(msg), validate_result=False)
    return request


class HidlDeviceServicer(hgrpc.HidlDeviceServicer):
    """IDevice 1.0, 1.1 and 1.2."""

    def __init__(self, executions: Executions) -> None:
        self.executions = executions
        self.driver = executions.driver

    def _capabilities(self, version: HalVersion, msg: _Caps, request: spb.DeviceRequest) -> _Caps:
        self.driver.session(request.session)
        wire_hidl.capabilities_to(versions.convert(self.driver.capabilities, to=version), msg.capabilities)
        return msg

    @hal_method("getCapabilities", hpb.CapabilitiesV1_0Response, V.V1_0)
    def getCapabilities(
        self, request: spb.DeviceRequest, context: grpc.ServicerContext
    ) -> hpb.CapabilitiesV1_0Response:
        return self._capabilities(V.V1_0, hpb.CapabilitiesV1_0Response(), request)

    @hal_method("getCapabilities_1_1", hpb.CapabilitiesV1_1Response, V.V1_1)
    def getCapabilities_1_1(
        self, request: spb.DeviceRequest, context: grpc.ServicerContext
    ) -> hpb.CapabilitiesV1_1Response:
        return self._capabilities(V.V1_1, hpb.CapabilitiesV1_1Response(), request)

    @hal_method("getCapabilities_1_2", hpb.CapabilitiesV1_2Response, V.V1_2)
    def getCapabilities_1_2(
        self, request: spb.DeviceRequest, context: grpc.ServicerContext
    ) -> hpb.CapabilitiesV1_2Response:
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

    @hal_method("getSupportedOperations", spb.SupportedOperationsResponse, V.V1_0)
    def getSupportedOperations(
        self, request: hpb.SupportedOperationsV1_0Request, context: grpc.ServicerContext
    ) -> spb.SupportedOperationsResponse:
        return self._supported(request, V.V1_0)

    @hal_method("getSupportedOperations_1_1", spb.SupportedOperationsResponse, V.V1_1)
    def getSupportedOperations_1_1(
        self, request: hpb.SupportedOperationsV1_1Request, context: grpc.ServicerContext
    ) -> spb.SupportedOperationsResponse:
        return self._supported(request, V.V1_1)

    @hal_method("getSupportedOperations_1_2", spb.SupportedOperationsResponse, V.V1_2)
    def getSupportedOperations_1_2(
        self, request: hpb.SupportedOperationsV1_2Request, context: grpc.ServicerContext
    ) -> spb.SupportedOperationsResponse:
        return self._supported(request, V.V1_2)

    def _prepare(
        self,
        m: Method,
        arrival: Arrival | None,
        version: HalVersion,
        build: Callable[[], Preparation | CachedPreparation],
        context: grpc.ServicerContext,
    ) -> Iterator[spb.PrepareModelEvent]:
        return prepare_events(self.executions.prepare(m, build, context, arrival), version)

    @hal_method("prepareModel", what="a preparation", timer="prepare")
    def prepareModel(
        self, request: hpb.PrepareModelV1_0Request, context: grpc.ServicerContext, m: Method, arrival: Arrival | None
    ) -> Iterator[spb.PrepareModelEvent]:
        def build() -> Preparation:
            session = self.driver.session(request.session)
            # 1.0 has no preference: the runtime's default, FAST_SINGLE_ANSWER.
            model = self._held(session, request.model, V.V1_0)
            return Preparation(session.id, model, ExecutionPreference.FAST_SINGLE_ANSWER)

        return self._prepare(m, arrival, V.V1_0, build, context)

    @hal_method("prepareModel_1_1", what="a preparation", timer="prepare")
    def prepareModel_1_1(
        self, request: hpb.PrepareModelV1_1Request, context: grpc.ServicerContext, m: Method, arrival: Arrival | None
    ) -> Iterator[spb.PrepareModelEvent]:
        def build() -> Preparation:
            session = self.driver.session(request.session)
            model = self._held(session, request.model, V.V1_1)
            return Preparation(session.id, model, wire_session.preference_of(request, session.protocol_version))

        return self._prepare(m, arrival, V.V1_1, build, context)

    @hal_method("prepareModel_1_2", what="a preparation", timer="prepare")
    def prepareModel_1_2(
        self, request: hpb.PrepareModelV1_2Request, context: grpc.ServicerContext, m: Method, arrival: Arrival | None
    ) -> Iterator[spb.PrepareModelEvent]:
        def build() -> Preparation:
            session = self.driver.session(request.session)
            model = self._held(session, request.model, V.V1_2)
            preference = wire_session.preference_of(request, session.protocol_version)
            return Preparation(session.id, model, preference, token=bytes(request.token), want_cache=request.want_cache)

        return self._prepare(m, arrival, V.V1_2, build, context)

    @hal_method("prepareModelFromCache", what="a preparation", timer="prepare")
    def prepareModelFromCache(
        self,
        request: hpb.PrepareModelFromCacheV1_2Request,
        context: grpc.ServicerContext,
        m: Method,
        arrival: Arrival | None,
    ) -> Iterator[spb.PrepareModelEvent]:
        def build() -> CachedPreparation:
            session = self.driver.session(request.session)
            shm = self.driver.config.shared_memory
            return CachedPreparation(
                request.session,
                cache_contents(request.model_cache, session, shm, "model cache file"),
                cache_contents(request.data_cache, session, shm, "data cache file"),
                bytes(request.token),
            )

        return self._prepare(m, arrival, V.V1_2, build, context)


def _result_v1_0(result: ExecutionResult) -> hpb.ExecuteResultV1_0:
    msg: hpb.ExecuteResultV1_0 = wire_status.status_to(
        hpb.ExecuteResultV1_0(), wire_hidl.status_for(result.status, V.V1_0), result.message
    )
    for index, data in sorted(result.output_pools.items()):
        msg.output_pools.add(pool_index=index, data=bytes(data))
    return msg


def _result_v1_2(result: ExecutionResult) -> spb.ExecuteResult:
    msg = wire_result.execution_result_to(result)
    msg.status = int(wire_hidl.status_for(result.status, V.V1_2))  # type: ignore[assignment]
    return msg


class HidlPreparedModelServicer(hgrpc.HidlPreparedModelServicer):
    """IPreparedModel 1.0 (``execute``) and 1.2 (``execute_1_2``, ``executeSynchronously``)."""

    def __init__(self, executions: Executions) -> None:
        self.executions = executions

    @staticmethod
    def _build(request: Any, measure: bool) -> Callable[[], Execution]:
        def build() -> Execution:
            return Execution(request.session, request.prepared_model, _request(request.request), measure)

        return build

    @hal_method("execute", what="an execution", timer="execute")
    def execute(
        self, request: hpb.ExecuteV1_0Request, context: grpc.ServicerContext, m: Method, arrival: Arrival | None
    ) -> Iterator[hpb.ExecuteV1_0Event]:
        events = self.executions.execute_async(m, self._build(request, False), context, arrival)
        return events_to(events, hpb.ExecuteV1_0Event, _result_v1_0, hpb.ExecuteResultV1_0, V.V1_0)

    @hal_method("execute_1_2", what="an execution", timer="execute")
    def execute_1_2(
        self, request: hpb.ExecuteV1_2Request, context: grpc.ServicerContext, m: Method, arrival: Arrival | None
    ) -> Iterator[spb.ExecuteEvent]:
        events = self.executions.execute_async(m, self._build(request, request.measure == 1), context, arrival)
        return events_to(events, spb.ExecuteEvent, _result_v1_2, spb.ExecuteResult, V.V1_2)

    @hal_method("executeSynchronously", timer="execute")
    def executeSynchronously(
        self, request: hpb.ExecuteV1_2Request, context: grpc.ServicerContext, m: Method, arrival: Arrival | None
    ) -> spb.ExecuteResult:
        result = self.executions.execute(m, self._build(request, request.measure == 1), context, arrival)
        return _result_v1_2(as_result(result))

"""The HIDL 1.0-1.2 method forms, spoken through a RemoteSession's one call path.

``HidlCalls(remote)`` takes and returns canonical values; each call converts them to
the form's version (``core.versions``), then to its messages (``core.wire_hidl``).
A value the form's version cannot hold (a 1.3 operation in a 1.0 model, a token pool
in a 1.0 request) is INVALID_ARGUMENT here, before anything is sent — as the 1.x
utils refuse to convert it. Calls go through the session's ``checked`` / ``stream``
(same package: one transport error mapping and death handling for every form).
Asynchronous forms return callbacks notified exactly once, like the 1.3 ones.
"""

from __future__ import annotations

from typing import Any

from nnhal.client.cache_files import CacheInput, server_reads_held
from nnhal.client.callbacks import Callback
from nnhal.client.remote.messages import PreparedRef, add_cache_file
from nnhal.client.remote.session import RemoteSession
from nnhal.core import versions, wire, wire_hidl
from nnhal.core.enums import ErrorStatus, ExecutionPreference, HalVersion, MeasureTiming
from nnhal.core.errors import HalError, InvalidArgument
from nnhal.core.types import Capabilities, ExecutionResult, Model, Request
from nnhal.core.versions import ConversionError
from nnhal.proto import hidl_pb2 as hpb, service_pb2 as spb

V = HalVersion
_SUFFIX = {V.V1_0: "", V.V1_1: "_1_1", V.V1_2: "_1_2"}
_CAPS = {V.V1_0: hpb.CapabilitiesV1_0, V.V1_1: hpb.CapabilitiesV1_1, V.V1_2: hpb.CapabilitiesV1_2}
_SUPPORTED = {
    V.V1_0: hpb.SupportedOperationsV1_0Request,
    V.V1_1: hpb.SupportedOperationsV1_1Request,
    V.V1_2: hpb.SupportedOperationsV1_2Request,
}


def form_version(level: int) -> HalVersion:
    """The HIDL version whose forms a device of ``level`` (below 1.3) is spoken to in."""
    return V.V1_0 if level < V.V1_1 else V.V1_1 if level < V.V1_2 else V.V1_2


def to_version(value: Any, version: HalVersion, what: str) -> Any:
    """``value`` in ``version``'s types; INVALID_ARGUMENT when the version cannot hold it."""
    try:
        return versions.unvalidated_convert(value, version)
    except ConversionError as err:
        raise InvalidArgument(f"{what}: {err.message}") from err


def failed(status: ErrorStatus, message: str) -> Callback[Any]:
    cb: Callback[Any] = Callback()
    cb.notify(status, None, message)
    return cb


class HidlCalls:
    """The 1.0-1.2 forms of IDevice and IPreparedModel for one session."""

    def __init__(self, remote: RemoteSession) -> None:
        self._r = remote

    @property
    def _sid(self) -> str:
        return self._r.session_id

    # -- IDevice -------------------------------------------------------------------------
    def capabilities(self, version: HalVersion) -> Capabilities:
        name = "getCapabilities" + _SUFFIX[version]
        msg = self._r.checked(getattr(self._r.stubs.hidl_device, name), spb.DeviceRequest(session=self._sid), name)
        caps: Capabilities = versions.to_canonical(wire_hidl.capabilities_from(msg.capabilities))
        return caps

    def supported_operations(self, model: Model, version: HalVersion) -> list[tuple[bool, str]]:
        name = "getSupportedOperations" + _SUFFIX[version]
        req: Any = _SUPPORTED[version](session=self._sid)
        req.model.CopyFrom(wire_hidl.model_to(to_version(model, version, name)))
        msg = self._r.checked(getattr(self._r.stubs.hidl_device, name), req, name)
        return list(zip(msg.supported, msg.reasons))

    def prepare_model(
        self,
        model: Model,
        version: HalVersion,
        preference: ExecutionPreference,
        cache_token: bytes | None,
    ) -> Callback[PreparedRef]:
        """prepareModel / _1_1 / _1_2; the callback delivers the prepared model's reference."""
        name = "prepareModel" + _SUFFIX[version]
        try:
            wire_model = wire_hidl.model_to(to_version(model, version, name))
        except HalError as err:
            return failed(err.error_status, err.message)
        req: Any
        if version == V.V1_0:
            req = hpb.PrepareModelV1_0Request(session=self._sid)
        elif version == V.V1_1:
            req = hpb.PrepareModelV1_1Request(session=self._sid, preference=int(preference))  # type: ignore[arg-type]
        else:
            req = hpb.PrepareModelV1_2Request(session=self._sid, preference=int(preference))  # type: ignore[arg-type]
            if cache_token is not None:
                req.token, req.want_cache = cache_token, True
        req.model.CopyFrom(wire_model)
        return self._prepare(getattr(self._r.stubs.hidl_device, name), req, name)

    def prepare_model_from_cache(self, model_cache: CacheInput, token: bytes) -> Callback[PreparedRef]:
        """prepareModelFromCache (1.2): no deadline."""
        req = hpb.PrepareModelFromCacheV1_2Request(session=self._sid, token=token)
        add_cache_file(req.model_cache, model_cache, server_reads_held(self._r.shm_memfd))
        return self._prepare(self._r.stubs.hidl_device.prepareModelFromCache, req, "prepareModelFromCache")

    def _prepare(self, rpc: Any, req: Any, what: str) -> Callback[PreparedRef]:
        return self._r.prepare_stream(rpc, req, what, None)

    # -- IPreparedModel ---------------------------------------------------------------------
    def _request(self, request: Request, what: str) -> hpb.RequestV1_0:
        return wire_hidl.request_to(to_version(request, V.V1_0, what), hpb.RequestV1_0())

    def execute_async(
        self, handle: str, request: Request, version: HalVersion, measure: bool
    ) -> Callback[ExecutionResult]:
        """execute (1.0: status and output pools only) or execute_1_2 (shapes, timing)."""
        name = "execute" if version < V.V1_2 else "execute_1_2"
        try:
            wire_request = self._request(request, name)
        except HalError as err:
            return failed(err.error_status, err.message)
        req: Any
        if version < V.V1_2:
            req = hpb.ExecuteV1_0Request(session=self._sid, prepared_model=handle)
        else:
            req = hpb.ExecuteV1_2Request(session=self._sid, prepared_model=handle, measure=int(measure))  # type: ignore[arg-type]
        req.request.CopyFrom(wire_request)

        def deliver(notify: Any, cb: Callback[ExecutionResult]) -> None:
            result = _result_from(notify)
            cb.notify(result.status, result, result.message)

        def failure(err: HalError) -> ExecutionResult:
            return ExecutionResult(err.error_status, err.message)

        rpc = getattr(self._r.stubs.hidl_prepared_model, name)
        return self._r.stream(rpc, req, name, None, deliver, failure, "nnhal-execute")

    def execute_sync(self, handle: str, request: Request, measure: bool) -> ExecutionResult:
        """executeSynchronously (1.2). Transport failures raise; HAL errors are in the result."""
        req = hpb.ExecuteV1_2Request(
            session=self._sid,
            prepared_model=handle,
            measure=int(MeasureTiming.YES if measure else MeasureTiming.NO),  # type: ignore[arg-type]
        )
        req.request.CopyFrom(self._request(request, "executeSynchronously"))
        rpc = self._r.stubs.hidl_prepared_model.executeSynchronously
        return wire.execution_result_from(self._r.unary(rpc, req, "executeSynchronously"))


def _result_from(msg: Any) -> ExecutionResult:
    if isinstance(msg, hpb.ExecuteResultV1_0):
        return ExecutionResult(
            wire.error_status_from(msg.status),
            msg.message,
            output_pools={p.pool_index: p.data for p in msg.output_pools},
        )
    return wire.execution_result_from(msg)

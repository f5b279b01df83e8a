"""The HIDL 1.0-1.2 method forms as HAL calls (:mod:`nnhal.client.remote.calls`).

Each function takes canonical values, converts them to the form's version
(``core.versions``), then to its messages (``core.wire_hidl``), and is a call either
session drives on its one call path, or a launch (:class:`~nnhal.client.remote.calls.Notify`)
it starts — the sync session with a callback notified exactly once, the asyncio one
awaited. A value the form's version cannot hold (a 1.3 operation in a 1.0 model, a token
pool in a 1.0 request) is INVALID_ARGUMENT here, before anything is sent — as the 1.x
utils refuse to convert it.
"""

from __future__ import annotations

from typing import Any

from nnhal.client.cache_files import CacheInput
from nnhal.client.remote.calls import Call, Notify, Unary
from nnhal.client.remote.messages import add_cache_file
from nnhal.core import versions, wire_hidl, wire_result, wire_status
from nnhal.core.enums import ExecutionPreference, HalVersion, MeasureTiming
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Capabilities, ExecutionResult, Model, Request
from nnhal.core.versions import ConversionError
from nnhal.proto import hidl_pb2 as hpb, service_pb2 as spb

V = HalVersion
_SUFFIX = {V.V1_0: "", V.V1_1: "_1_1", V.V1_2: "_1_2"}
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


# -- IDevice ---------------------------------------------------------------------------------
def capabilities(session: str, version: HalVersion) -> Call[Capabilities]:
    name = "getCapabilities" + _SUFFIX[version]
    msg = yield Unary("hidl_device", name, spb.DeviceRequest(session=session))
    caps: Capabilities = versions.to_canonical(wire_hidl.capabilities_from(msg.capabilities))
    return caps


def supported_operations(session: str, model: Model, version: HalVersion) -> Call[list[tuple[bool, str]]]:
    name = "getSupportedOperations" + _SUFFIX[version]
    req: Any = _SUPPORTED[version](session=session)
    req.model.CopyFrom(wire_hidl.model_to(to_version(model, version, name)))
    msg = yield Unary("hidl_device", name, req)
    return [(bool(ok), str(why)) for ok, why in zip(msg.supported, msg.reasons)]


def prepare_launch(
    session: str, model: Model, version: HalVersion, preference: ExecutionPreference, cache_token: bytes | None
) -> Notify:
    """prepareModel / _1_1 / _1_2 (its notify reads as a 1.3 preparation's); raises
    INVALID_ARGUMENT for a model the version cannot hold."""
    name = "prepareModel" + _SUFFIX[version]
    wire_model = wire_hidl.model_to(to_version(model, version, name))
    req: Any
    if version == V.V1_0:
        req = hpb.PrepareModelV1_0Request(session=session)
    elif version == V.V1_1:
        req = hpb.PrepareModelV1_1Request(session=session, preference=int(preference))  # type: ignore[arg-type]
    else:
        req = hpb.PrepareModelV1_2Request(session=session, preference=int(preference))  # type: ignore[arg-type]
        if cache_token is not None:
            req.token, req.want_cache = cache_token, True
    req.model.CopyFrom(wire_model)
    return Notify("hidl_device", name, req)


def prepare_from_cache_launch(session: str, model_cache: CacheInput, token: bytes, held: bool = False) -> Notify:
    """prepareModelFromCache (1.2): no deadline; ``held`` as for the 1.3 form."""
    req = hpb.PrepareModelFromCacheV1_2Request(session=session, token=token)
    add_cache_file(req.model_cache, model_cache, held)
    return Notify("hidl_device", "prepareModelFromCache", req)


# -- IPreparedModel ---------------------------------------------------------------------------
def _request(request: Request, what: str) -> hpb.RequestV1_0:
    return wire_hidl.request_to(to_version(request, V.V1_0, what), hpb.RequestV1_0())


def execute_launch(session: str, handle: str, request: Request, version: HalVersion, measure: bool) -> Notify:
    """execute (1.0: status and output pools only) or execute_1_2 (shapes, timing); its
    notify reads with :func:`result_of`. Raises INVALID_ARGUMENT for a request the version
    cannot hold."""
    name = "execute" if version < V.V1_2 else "execute_1_2"
    wire_request = _request(request, name)
    req: Any
    if version < V.V1_2:
        req = hpb.ExecuteV1_0Request(session=session, prepared_model=handle)
    else:
        req = hpb.ExecuteV1_2Request(session=session, prepared_model=handle, measure=int(measure))  # type: ignore[arg-type]
    req.request.CopyFrom(wire_request)
    return Notify("hidl_prepared_model", name, req)


def execute_sync(session: str, handle: str, request: Request, measure: bool) -> Call[ExecutionResult]:
    """executeSynchronously (1.2). Transport failures raise; HAL errors are in the result."""
    req = hpb.ExecuteV1_2Request(
        session=session,
        prepared_model=handle,
        measure=int(MeasureTiming.YES if measure else MeasureTiming.NO),  # type: ignore[arg-type]
    )
    req.request.CopyFrom(_request(request, "executeSynchronously"))
    answer = yield Unary("hidl_prepared_model", "executeSynchronously", req, checked=False)
    return wire_result.execution_result_from(answer)


def result_of(msg: Any) -> ExecutionResult:
    """The result an execute notify of any form (1.0, 1.2, 1.3) carries."""
    if isinstance(msg, hpb.ExecuteResultV1_0):
        return ExecutionResult(
            wire_status.error_status_from(msg.status),
            msg.message,
            output_pools={p.pool_index: p.data for p in msg.output_pools},
        )
    return wire_result.execution_result_from(msg)

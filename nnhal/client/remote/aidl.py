"""The AIDL method forms (``aidl.proto``) as HAL calls (:mod:`nnhal.client.remote.calls`).

Each function takes canonical values (``core.types``, ``core.aidl_types``) and is a call
either session drives on its one call path (``RemoteSession.run``, ``AioSession.run``), or
a launch it starts (:class:`~nnhal.client.remote.calls.Notify`). Execution results come
back as the canonical result plus the AIDL Timing as sent (nanoseconds, -1). Calls raise
their HalError when the answer is an error, except executions, whose status is in the
result (as for the 1.3 forms). Objects (IBurst, IExecution) are named by the handles
returned here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nnhal.client.remote.calls import Call, Notify, Unary
from nnhal.client.remote.messages import fill_allocate
from nnhal.client.remote.transport import grpc_timeout, remaining_time
from nnhal.core import wire_aidl, wire_deadline, wire_model, wire_request
from nnhal.core.aidl_types import ExecutionConfig, PrepareModelConfig, TimingNs
from nnhal.core.types import BufferDesc, BufferRole, ExecutionResult, FencedExecutionInfo, Model, Request
from nnhal.proto import aidl_pb2 as apb, service_pb2 as spb

Result = tuple[ExecutionResult, TimingNs]
#: What an AIDL object's handle names, for :func:`release`: its service.
KINDS = {"execution": "execution", "burst": "burst"}


def _deadline(msg: Any, timeout: float | None, deadline_at: float | None) -> float | None:
    """Fill ``msg.deadline`` (time remaining); the gRPC timeout that covers it."""
    remaining = remaining_time(timeout, deadline_at)
    wire_deadline.deadline_to(remaining, msg.deadline)
    return grpc_timeout(remaining)


def _result(service: str, method: str, msg: Any, timeout: float | None, what: str = "") -> Call[Result]:
    answer = yield Unary(service, method, msg, timeout, checked=False, what=what)
    return wire_aidl.execution_result_from(answer)


# -- IDevice ---------------------------------------------------------------------------------
def prepare_with_config_launch(
    session: str, model: Model, config: PrepareModelConfig, timeout: float | None, deadline_at: float | None
) -> Notify:
    """prepareModelWithConfig (its notify reads as a 1.3 preparation's)."""
    req = apb.PrepareModelWithConfigRequest(session=session)
    wire_model.model_to(model, req.model)
    wire_aidl.prepare_config_to(config, req.config)
    limit = _deadline(req.config, timeout, deadline_at)
    return Notify("aidl_device", "prepareModelWithConfig", req, limit)


def allocate(
    session: str,
    desc: BufferDesc,
    prepared_models: Sequence[str],
    input_roles: Sequence[BufferRole],
    output_roles: Sequence[BufferRole],
) -> Call[tuple[str, int]]:
    """AIDL IDevice::allocate (roles carry ``probability``): the buffer's handle and token."""
    req = apb.AidlAllocateRequest(session=session)
    fill_allocate(req, desc, prepared_models, input_roles, output_roles, wire_aidl.buffer_role_to)
    msg = yield Unary("aidl_device", "allocate", req)
    return str(msg.buffer), int(msg.token)


# -- IPreparedModel ----------------------------------------------------------------------------
def execute(
    session: str,
    handle: str,
    request: Request,
    measure: bool,
    timeout: float | None,
    deadline_at: float | None,
    loop_timeout_ns: int | None,
) -> Call[Result]:
    msg = apb.AidlExecuteRequest(session=session, prepared_model=handle, measure_timing=measure)
    wire_request.request_to(request, msg.request)
    if loop_timeout_ns is not None:
        msg.loop_timeout_duration_ns = loop_timeout_ns
    limit = _deadline(msg, timeout, deadline_at)
    return (yield from _result("aidl_prepared_model", "executeSynchronously", msg, limit))


def execute_with_config(
    session: str,
    handle: str,
    request: Request,
    config: ExecutionConfig,
    timeout: float | None,
    deadline_at: float | None,
) -> Call[Result]:
    msg = apb.ExecuteWithConfigRequest(session=session, prepared_model=handle)
    wire_request.request_to(request, msg.request)
    wire_aidl.execution_config_to(config, msg.config)
    limit = _deadline(msg, timeout, deadline_at)
    return (yield from _result("aidl_prepared_model", "executeSynchronouslyWithConfig", msg, limit))


def _fenced(service: str, method: str, msg: Any, limit: float | None, what: str) -> Call[tuple[str, str]]:
    answer = yield Unary(service, method, msg, limit, what=what)
    return str(answer.sync_fence), str(answer.callback)


def execute_fenced(
    session: str,
    handle: str,
    request: Request,
    wait_for: Sequence[str],
    measure: bool,
    timeout: float | None,
    deadline_at: float | None,
    loop_timeout_ns: int | None,
    duration_ns: int | None,
) -> Call[tuple[str, str]]:
    """AIDL IPreparedModel::executeFenced: the sync fence and callback handles (raises the
    launch error). ``duration_ns``: the time the execution has once the fences signalled."""
    msg = apb.AidlFencedExecuteRequest(session=session, prepared_model=handle, measure_timing=measure)
    wire_request.request_to(request, msg.request)
    msg.wait_for.extend(wait_for)
    if loop_timeout_ns is not None:
        msg.loop_timeout_duration_ns = loop_timeout_ns
    if duration_ns is not None:
        msg.duration_ns = duration_ns
    limit = _deadline(msg, timeout, deadline_at)
    return (yield from _fenced("aidl_prepared_model", "executeFenced", msg, limit, "AIDL IPreparedModel.executeFenced"))


def execute_fenced_with_config(
    session: str,
    handle: str,
    request: Request,
    wait_for: Sequence[str],
    config: ExecutionConfig,
    timeout: float | None,
    deadline_at: float | None,
    duration_ns: int | None = None,
) -> Call[tuple[str, str]]:
    """executeFencedWithConfig: the sync fence and callback handles (raises the launch error)."""
    msg = apb.FencedExecuteWithConfigRequest(session=session, prepared_model=handle)
    wire_request.request_to(request, msg.request)
    msg.wait_for.extend(wait_for)
    wire_aidl.execution_config_to(config, msg.config)
    if duration_ns is not None:
        msg.duration_ns = duration_ns
    limit = _deadline(msg, timeout, deadline_at)
    return (yield from _fenced("aidl_prepared_model", "executeFencedWithConfig", msg, limit, ""))


def fenced_info(
    session: str, callback: str, wait: bool, timeout: float
) -> Call[tuple[FencedExecutionInfo, TimingNs, TimingNs]]:
    """AIDL getExecutionInfo: the info, and the launched / fenced AIDL timings."""
    req = spb.FencedInfoRequest(session=session, callback=callback, wait=wait)
    answer = yield Unary("aidl_fenced", "getExecutionInfo", req, timeout, checked=False)
    return wire_aidl.fenced_info_from(answer)


# -- IExecution ---------------------------------------------------------------------------------
def create_reusable_execution(session: str, handle: str, request: Request, config: ExecutionConfig) -> Call[str]:
    msg = apb.CreateReusableExecutionRequest(session=session, prepared_model=handle)
    wire_request.request_to(request, msg.request)
    wire_aidl.execution_config_to(config, msg.config)
    return str((yield Unary("aidl_prepared_model", "createReusableExecution", msg)).handle)


def execution_run(session: str, execution: str, timeout: float | None, deadline_at: float | None) -> Call[Result]:
    msg = apb.ExecutionRunRequest(session=session, execution=execution)
    limit = _deadline(msg, timeout, deadline_at)
    return (yield from _result("execution", "executeSynchronously", msg, limit, "IExecution.executeSynchronously"))


def execution_fenced(
    session: str,
    execution: str,
    wait_for: Sequence[str],
    timeout: float | None,
    deadline_at: float | None,
    duration_ns: int | None = None,
) -> Call[tuple[str, str]]:
    msg = apb.ExecutionFencedRequest(session=session, execution=execution)
    msg.wait_for.extend(wait_for)
    if duration_ns is not None:
        msg.duration_ns = duration_ns
    limit = _deadline(msg, timeout, deadline_at)
    return (yield from _fenced("execution", "executeFenced", msg, limit, "IExecution.executeFenced"))


# -- IBurst ----------------------------------------------------------------------------------------
def configure_burst(session: str, handle: str) -> Call[str]:
    msg = apb.ConfigureBurstRequest(session=session, prepared_model=handle)
    return str((yield Unary("aidl_prepared_model", "configureExecutionBurst", msg)).handle)


def burst_execute(
    session: str,
    burst: str,
    request: Request,
    send: tuple[bool, ...],
    tokens: Sequence[int],
    config: ExecutionConfig,
    timeout: float | None,
    deadline_at: float | None,
) -> Call[Result]:
    """One burst execution; pools whose ``send`` is False travel empty (cached by token).
    A config with hints goes through ``executeSynchronouslyWithConfig``."""
    msg: Any
    if config.execution_hints or config.extension_name_to_prefix:
        msg = apb.BurstExecuteWithConfigRequest(session=session, burst=burst)
        wire_aidl.execution_config_to(config, msg.config)
        method = "executeSynchronouslyWithConfig"
    else:
        msg = apb.BurstExecuteRequest(session=session, burst=burst, measure_timing=config.measure_timing)
        if config.loop_timeout_duration_ns is not None:
            msg.loop_timeout_duration_ns = config.loop_timeout_duration_ns
        method = "executeSynchronously"
    wire_aidl.burst_request_to(request, send, msg.request)
    msg.memory_identifier_tokens.extend(tokens)
    return (yield from _result("burst", method, msg, _deadline(msg, timeout, deadline_at), f"IBurst.{method}"))


def release_memory(session: str, burst: str, token: int) -> Call[None]:
    msg = apb.ReleaseMemoryRequest(session=session, burst=burst, memory_identifier_token=token)
    yield Unary("burst", "releaseMemoryResource", msg)


# -- releases ------------------------------------------------------------------------------------------
def release(session: str, kind: str, handle: str, timeout: float | None = None) -> Call[None]:
    """Release an IExecution (``kind`` "execution") or IBurst ("burst") now; raises its HalError."""
    req = spb.ReleaseRequest(session=session, handle=handle)
    yield Unary(KINDS[kind], "release", req, timeout, prefix=False)

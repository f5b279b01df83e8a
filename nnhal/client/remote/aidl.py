"""The AIDL method forms (``aidl.proto``), spoken through a RemoteSession's one call path.

``AidlCalls(remote)`` takes and returns canonical values (``core.types``,
``core.aidl_types``). Execution results come back as the canonical result plus the
AIDL Timing as sent (nanoseconds, -1). Unary calls raise their HalError when the
answer is an error, except executions, whose status is in the result (as for the
1.3 forms). Objects (IBurst, IExecution) are named by the handles returned here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nnhal.client.callbacks import Callback
from nnhal.client.remote.messages import PreparedRef, fill_allocate, raise_for_status
from nnhal.client.remote.session import RemoteSession
from nnhal.client.remote.transport import GC_RELEASE_TIMEOUT, grpc_timeout, remaining_time
from nnhal.core import wire, wire_aidl
from nnhal.core.aidl_types import ExecutionConfig, PrepareModelConfig, TimingNs
from nnhal.core.errors import HalError
from nnhal.core.types import BufferDesc, BufferRole, ExecutionResult, FencedExecutionInfo, Model, Request
from nnhal.proto import aidl_pb2 as apb, service_pb2 as spb

Result = tuple[ExecutionResult, TimingNs]


def _deadline(msg: Any, timeout: float | None, deadline_at: float | None) -> float | None:
    """Fill ``msg.deadline`` (time remaining); the gRPC timeout that covers it."""
    remaining = remaining_time(timeout, deadline_at)
    wire.deadline_to(remaining, msg.deadline)
    return grpc_timeout(remaining)


class AidlCalls:
    """The AIDL forms of IDevice, IPreparedModel, IExecution, IBurst for one session."""

    def __init__(self, remote: RemoteSession) -> None:
        self._r = remote

    @property
    def _sid(self) -> str:
        return self._r.session_id

    def _result(self, rpc: Any, msg: Any, what: str, timeout: float | None) -> Result:
        return wire_aidl.execution_result_from(self._r.unary(rpc, msg, what, timeout))

    # -- IDevice ---------------------------------------------------------------------------
    def prepare_with_config(
        self, model: Model, config: PrepareModelConfig, timeout: float | None, deadline_at: float | None
    ) -> Callback[PreparedRef]:
        req = apb.PrepareModelWithConfigRequest(session=self._sid)
        wire.model_to(model, req.model)
        wire_aidl.prepare_config_to(config, req.config)
        limit = _deadline(req.config, timeout, deadline_at)
        rpc = self._r.stubs.aidl_device.prepareModelWithConfig
        return self._r.prepare_stream(rpc, req, "prepareModelWithConfig", limit)

    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: Sequence[str],
        input_roles: Sequence[BufferRole],
        output_roles: Sequence[BufferRole],
    ) -> tuple[str, int]:
        """AIDL IDevice::allocate (roles carry ``probability``): the buffer's handle and token."""
        req = apb.AidlAllocateRequest(session=self._sid)
        fill_allocate(req, desc, prepared_models, input_roles, output_roles, wire_aidl.buffer_role_to)
        msg = self._r.checked(self._r.stubs.aidl_device.allocate, req, "allocate")
        return str(msg.buffer), int(msg.token)

    # -- IPreparedModel -------------------------------------------------------------------------
    def execute(
        self,
        handle: str,
        request: Request,
        measure: bool,
        timeout: float | None,
        deadline_at: float | None,
        loop_timeout_ns: int | None,
    ) -> Result:
        msg = apb.AidlExecuteRequest(session=self._sid, prepared_model=handle, measure_timing=measure)
        wire.request_to(request, msg.request)
        if loop_timeout_ns is not None:
            msg.loop_timeout_duration_ns = loop_timeout_ns
        limit = _deadline(msg, timeout, deadline_at)
        return self._result(self._r.stubs.aidl_prepared_model.executeSynchronously, msg, "executeSynchronously", limit)

    def execute_with_config(
        self, handle: str, request: Request, config: ExecutionConfig, timeout: float | None, deadline_at: float | None
    ) -> Result:
        msg = apb.ExecuteWithConfigRequest(session=self._sid, prepared_model=handle)
        wire.request_to(request, msg.request)
        wire_aidl.execution_config_to(config, msg.config)
        limit = _deadline(msg, timeout, deadline_at)
        rpc = self._r.stubs.aidl_prepared_model.executeSynchronouslyWithConfig
        return self._result(rpc, msg, "executeSynchronouslyWithConfig", limit)

    def execute_fenced(
        self,
        handle: str,
        request: Request,
        wait_for: Sequence[str],
        measure: bool,
        timeout: float | None,
        deadline_at: float | None,
        loop_timeout_ns: int | None,
        duration_ns: int | None,
    ) -> tuple[str, str]:
        """AIDL IPreparedModel::executeFenced: the sync fence and callback handles (raises the
        launch error). ``duration_ns``: the time the execution has once the fences signalled."""
        msg = apb.AidlFencedExecuteRequest(session=self._sid, prepared_model=handle, measure_timing=measure)
        wire.request_to(request, msg.request)
        msg.wait_for.extend(wait_for)
        if loop_timeout_ns is not None:
            msg.loop_timeout_duration_ns = loop_timeout_ns
        if duration_ns is not None:
            msg.duration_ns = duration_ns
        limit = _deadline(msg, timeout, deadline_at)
        rpc = self._r.stubs.aidl_prepared_model.executeFenced
        answer = self._r.checked(rpc, msg, "AIDL IPreparedModel.executeFenced", limit)
        return str(answer.sync_fence), str(answer.callback)

    def execute_fenced_with_config(
        self,
        handle: str,
        request: Request,
        wait_for: Sequence[str],
        config: ExecutionConfig,
        timeout: float | None,
        deadline_at: float | None,
        duration_ns: int | None = None,
    ) -> tuple[str, str]:
        """executeFencedWithConfig: the sync fence and callback handles (raises the launch error)."""
        msg = apb.FencedExecuteWithConfigRequest(session=self._sid, prepared_model=handle)
        wire.request_to(request, msg.request)
        msg.wait_for.extend(wait_for)
        wire_aidl.execution_config_to(config, msg.config)
        if duration_ns is not None:
            msg.duration_ns = duration_ns
        limit = _deadline(msg, timeout, deadline_at)
        rpc = self._r.stubs.aidl_prepared_model.executeFencedWithConfig
        answer = self._r.checked(rpc, msg, "executeFencedWithConfig", limit)
        return str(answer.sync_fence), str(answer.callback)

    def fenced_info(self, callback: str, wait: bool, timeout: float) -> tuple[FencedExecutionInfo, TimingNs, TimingNs]:
        """AIDL getExecutionInfo: the info, and the launched / fenced AIDL timings."""
        req = spb.FencedInfoRequest(session=self._sid, callback=callback, wait=wait)
        return wire_aidl.fenced_info_from(
            self._r.unary(self._r.stubs.aidl_fenced.getExecutionInfo, req, "getExecutionInfo", timeout)
        )

    # -- IExecution -----------------------------------------------------------------------------
    def create_reusable_execution(self, handle: str, request: Request, config: ExecutionConfig) -> str:
        msg = apb.CreateReusableExecutionRequest(session=self._sid, prepared_model=handle)
        wire.request_to(request, msg.request)
        wire_aidl.execution_config_to(config, msg.config)
        rpc = self._r.stubs.aidl_prepared_model.createReusableExecution
        return str(self._r.checked(rpc, msg, "createReusableExecution").handle)

    def execution_run(self, execution: str, timeout: float | None, deadline_at: float | None) -> Result:
        msg = apb.ExecutionRunRequest(session=self._sid, execution=execution)
        limit = _deadline(msg, timeout, deadline_at)
        return self._result(self._r.stubs.execution.executeSynchronously, msg, "IExecution.executeSynchronously", limit)

    def execution_fenced(
        self,
        execution: str,
        wait_for: Sequence[str],
        timeout: float | None,
        deadline_at: float | None,
        duration_ns: int | None = None,
    ) -> tuple[str, str]:
        msg = apb.ExecutionFencedRequest(session=self._sid, execution=execution)
        msg.wait_for.extend(wait_for)
        if duration_ns is not None:
            msg.duration_ns = duration_ns
        limit = _deadline(msg, timeout, deadline_at)
        answer = self._r.checked(self._r.stubs.execution.executeFenced, msg, "IExecution.executeFenced", limit)
        return str(answer.sync_fence), str(answer.callback)

    # -- IBurst ------------------------------------------------------------------------------------
    def configure_burst(self, handle: str) -> str:
        msg = apb.ConfigureBurstRequest(session=self._sid, prepared_model=handle)
        rpc = self._r.stubs.aidl_prepared_model.configureExecutionBurst
        return str(self._r.checked(rpc, msg, "configureExecutionBurst").handle)

    def burst_execute(
        self,
        burst: str,
        request: Request,
        send: tuple[bool, ...],
        tokens: Sequence[int],
        config: ExecutionConfig,
        timeout: float | None,
        deadline_at: float | None,
    ) -> Result:
        """One burst execution; pools whose ``send`` is False travel empty (cached by token).
        A config with hints goes through ``executeSynchronouslyWithConfig``."""
        msg: Any
        if config.execution_hints or config.extension_name_to_prefix:
            msg = apb.BurstExecuteWithConfigRequest(session=self._sid, burst=burst)
            wire_aidl.execution_config_to(config, msg.config)
            rpc, what = self._r.stubs.burst.executeSynchronouslyWithConfig, "IBurst.executeSynchronouslyWithConfig"
        else:
            msg = apb.BurstExecuteRequest(session=self._sid, burst=burst, measure_timing=config.measure_timing)
            if config.loop_timeout_duration_ns is not None:
                msg.loop_timeout_duration_ns = config.loop_timeout_duration_ns
            rpc, what = self._r.stubs.burst.executeSynchronously, "IBurst.executeSynchronously"
        wire_aidl.burst_request_to(request, send, msg.request)
        msg.memory_identifier_tokens.extend(tokens)
        return self._result(rpc, msg, what, _deadline(msg, timeout, deadline_at))

    def release_memory(self, burst: str, token: int) -> None:
        msg = apb.ReleaseMemoryRequest(session=self._sid, burst=burst, memory_identifier_token=token)
        self._r.checked(self._r.stubs.burst.releaseMemoryResource, msg, "releaseMemoryResource")

    # -- releases ------------------------------------------------------------------------------------
    def release(self, kind: str, handle: str) -> None:
        """Release an IExecution (``kind`` "execution") or IBurst ("burst") now; raises its HalError."""
        stub = self._r.stubs.execution if kind == "execution" else self._r.stubs.burst
        req = spb.ReleaseRequest(session=self._sid, handle=handle)
        raise_for_status(self._r.unary(stub.release, req, "release"))

    def discard(self, kind: str, handle: str) -> None:
        """Best-effort release (garbage collection): nothing to do once the session is gone."""
        if self._r.closed or self._r.dead:
            return
        stub = self._r.stubs.execution if kind == "execution" else self._r.stubs.burst
        try:
            self._r.unary(
                stub.release, spb.ReleaseRequest(session=self._sid, handle=handle), "release", GC_RELEASE_TIMEOUT
            )
        except HalError:
            pass  # the session's end releases it anyway

"""gRPC servicers: thin adapters between protobuf messages and the Driver.

Every HAL error is returned in-band (``status`` + ``message``); a servicer
never lets an exception escape as a transport error. Unexpected exceptions are
logged and reported as GENERAL_FAILURE so that the server survives them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from nnhal.core import wire
from nnhal.core.enums import ErrorStatus, ExecutionPreference
from nnhal.core.errors import HalError, InvalidArgument
from nnhal.proto import service_pb2 as spb
from nnhal.proto import service_pb2_grpc as sgrpc
from nnhal.proto import types_pb2 as pb
from nnhal.server.driver import Driver, Faults, Session
from nnhal.server.fences import FenceRegistry
from nnhal.server.memory import BoundPools
from nnhal.server.prepared_model import ExecutionResult

log = logging.getLogger(__name__)

M = TypeVar("M")


def deadline_ns(msg: pb.Deadline) -> int | None:
    """Re-base a 'time remaining' deadline on this server's monotonic clock."""
    if not msg.has_deadline:
        return None
    return time.monotonic_ns() + msg.remaining_ns


def is_local_peer(context: grpc.ServicerContext) -> bool:
    peer = context.peer() or ""
    return peer.startswith(("unix:", "ipv4:127.", "ipv6:[::1]", "ipv6:%5B::1%5D"))


def _status_fields(msg: Any, status: ErrorStatus, message: str) -> Any:
    msg.status = int(status) if status != ErrorStatus.DEAD_OBJECT else int(ErrorStatus.GENERAL_FAILURE)
    msg.message = message
    return msg


def guarded(make: Callable[[], M]) -> Callable[[Callable[..., M]], Callable[..., M]]:
    """Turn HalErrors (and bugs) of a unary handler into an in-band status."""

    def wrap(fn: Callable[..., M]) -> Callable[..., M]:
        def handler(self: Any, request: Any, context: grpc.ServicerContext) -> M:
            try:
                return fn(self, request, context)
            except HalError as err:
                return _status_fields(make(), err.error_status, err.message)  # type: ignore[no-any-return]
            except Exception as err:  # a driver bug must not kill the server or the caller
                log.exception("unexpected error in %s", fn.__name__)
                return _status_fields(make(), ErrorStatus.GENERAL_FAILURE, f"internal error: {err!r}")  # type: ignore[no-any-return]

        handler.__name__ = fn.__name__
        return handler

    return wrap


def result_to(result: ExecutionResult, bound: BoundPools | None, msg: spb.ExecuteResult) -> spb.ExecuteResult:
    msg.status = int(result.status)  # type: ignore[assignment]
    msg.message = result.message
    wire.output_shapes_to(result.output_shapes, msg.output_shapes)
    wire.timing_to(result.timing, msg.timing)
    if result.profile:
        for name, (count, total_ns) in sorted(result.profile.items(), key=lambda kv: -kv[1][1]):
            msg.profile.add(operation=name, count=count, total_us=total_ns // 1000)
    if bound is not None and result.status == ErrorStatus.NONE:
        for index, buf in bound.inline_outputs.items():
            msg.output_pools.add(pool_index=index, data=bytes(buf))
    return msg


class DeviceServicer(sgrpc.DeviceServicer):
    def __init__(self, driver: Driver, stopping: threading.Event) -> None:
        self.driver = driver
        self._stopping = stopping

    # -- session -----------------------------------------------------------
    def openSession(self, request: spb.OpenSessionRequest, context: grpc.ServicerContext) -> Iterator[spb.SessionEvent]:
        try:
            session = self.driver.open_session(request.client_name, context.peer())
        except HalError as err:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, err.message)
        ended = threading.Event()
        context.add_callback(ended.set)
        try:
            shm = self.driver.config.shared_memory
            yield spb.SessionEvent(
                session=session.id,
                device_name=self.driver.config.name,
                feature_level=int(self.driver.config.feature_level),
                shm_dir=str(shm.directory) if shm is not None and is_local_peer(context) else "",
                shm_prefix=shm.prefix if shm is not None else "",
            )
            # The stream stays open as the client's liveness signal; its end
            # (close, crash, keepalive expiry) releases the session's objects.
            while not ended.wait(1.0):
                if self._stopping.is_set():
                    break
        finally:
            self.driver.close_session(session.id)

    # -- static facts ---------------------------------------------------------
    def _session(self, sid: str) -> Session:
        return self.driver.session(sid)

    @guarded(spb.CapabilitiesResponse)
    def getCapabilities_1_3(
        self, request: spb.DeviceRequest, context: grpc.ServicerContext
    ) -> spb.CapabilitiesResponse:
        self._session(request.session)
        msg = spb.CapabilitiesResponse()
        wire.capabilities_to(self.driver.capabilities, msg.capabilities)
        return msg

    @guarded(spb.VersionStringResponse)
    def getVersionString(self, request: spb.DeviceRequest, context: grpc.ServicerContext) -> spb.VersionStringResponse:
        self._session(request.session)
        return spb.VersionStringResponse(version=self.driver.config.version_string)

    @guarded(spb.TypeResponse)
    def getType(self, request: spb.DeviceRequest, context: grpc.ServicerContext) -> spb.TypeResponse:
        self._session(request.session)
        return spb.TypeResponse(type=int(self.driver.config.device_type))  # type: ignore[arg-type]

    @guarded(spb.ExtensionsResponse)
    def getSupportedExtensions(
        self, request: spb.DeviceRequest, context: grpc.ServicerContext
    ) -> spb.ExtensionsResponse:
        self._session(request.session)
        msg = spb.ExtensionsResponse()
        for e in self.driver.extensions():
            wire.extension_to(e, msg.extensions.add())
        return msg

    @guarded(spb.CacheFilesResponse)
    def getNumberOfCacheFilesNeeded(
        self, request: spb.DeviceRequest, context: grpc.ServicerContext
    ) -> spb.CacheFilesResponse:
        self._session(request.session)
        model, data = self.driver.cache_files_needed()
        return spb.CacheFilesResponse(num_model_cache=model, num_data_cache=data)

    def getStatus(self, request: spb.DeviceRequest, context: grpc.ServicerContext) -> spb.StatusResponse:
        return spb.StatusResponse(status=int(self.driver.status()))  # type: ignore[arg-type]

    @guarded(spb.SupportedOperationsResponse)
    def getSupportedOperations_1_3(
        self, request: spb.SupportedOperationsRequest, context: grpc.ServicerContext
    ) -> spb.SupportedOperationsResponse:
        self._session(request.session)
        model = wire.model_from(request.model)
        supported, reasons = self.driver.supported_operations(model)
        return spb.SupportedOperationsResponse(supported=supported, reasons=reasons)

    # -- preparation ------------------------------------------------------------
    def _prepare_stream(
        self, context: grpc.ServicerContext, launch: Callable[[], Any], want_cache: bool
    ) -> Iterator[spb.PrepareModelEvent]:
        """Launch status, then exactly one notify, whatever happens."""
        try:
            job = launch()
        except HalError as err:
            yield spb.PrepareModelEvent(launch=spb.StatusMessage(status=int(err.error_status), message=err.message))  # type: ignore[arg-type]
            yield spb.PrepareModelEvent(
                notify=spb.PrepareModelNotify(status=int(err.error_status), message=err.message)  # type: ignore[arg-type]
            )
            return
        except Exception as err:
            log.exception("unexpected error launching a preparation")
            text = f"internal error: {err!r}"
            yield spb.PrepareModelEvent(launch=spb.StatusMessage(status=ErrorStatus.GENERAL_FAILURE, message=text))  # type: ignore[arg-type]
            yield spb.PrepareModelEvent(notify=spb.PrepareModelNotify(status=ErrorStatus.GENERAL_FAILURE, message=text))  # type: ignore[arg-type]
            return
        yield spb.PrepareModelEvent(launch=spb.StatusMessage(status=ErrorStatus.NONE))  # type: ignore[arg-type]
        notify = spb.PrepareModelNotify()
        try:
            pm, cache = job.run() if hasattr(job, "run") else (job, b"")
            notify.prepared_model.handle = pm.handle
            if want_cache and cache:
                notify.model_cache.add(data=cache)
        except HalError as err:
            _status_fields(notify, err.error_status, err.message)
        except Exception as err:
            log.exception("unexpected error during preparation")
            _status_fields(notify, ErrorStatus.GENERAL_FAILURE, f"internal error: {err!r}")
        # If the client vanished before reading this, its session's end releases the model.
        yield spb.PrepareModelEvent(notify=notify)

    def prepareModel_1_3(
        self, request: spb.PrepareModelRequest, context: grpc.ServicerContext
    ) -> Iterator[spb.PrepareModelEvent]:
        def launch() -> Any:
            session = self._session(request.session)
            model = wire.model_from(request.model)
            priority = wire.priority_from_wire(request.priority)
            if int(request.preference) not in {int(p) for p in ExecutionPreference}:
                raise InvalidArgument(f"execution preference {request.preference} is invalid")
            return self.driver.begin_prepare(
                session,
                model,
                ExecutionPreference(request.preference),
                priority,
                deadline_ns(request.deadline),
                bytes(request.token),
            )

        return self._prepare_stream(context, launch, request.want_cache)

    def prepareModelFromCache_1_3(
        self, request: spb.PrepareModelFromCacheRequest, context: grpc.ServicerContext
    ) -> Iterator[spb.PrepareModelEvent]:
        def launch() -> Any:
            session = self._session(request.session)
            n_model, n_data = self.driver.cache_files_needed()
            if len(request.model_cache) != n_model or len(request.data_cache) != n_data:
                raise InvalidArgument(
                    f"expected {n_model} model cache and {n_data} data cache files, got "
                    f"{len(request.model_cache)} and {len(request.data_cache)}"
                )
            return self.driver.prepare_from_cache(
                session, bytes(request.model_cache[0].data), bytes(request.token), deadline_ns(request.deadline)
            )

        return self._prepare_stream(context, launch, False)

    @guarded(spb.AllocateResponse)
    def allocate(self, request: spb.AllocateRequest, context: grpc.ServicerContext) -> spb.AllocateResponse:
        session = self._session(request.session)
        buffer, token = self.driver.allocate(
            session,
            wire.buffer_desc_from(request.desc),
            [r.handle for r in request.prepared_models],
            [wire.buffer_role_from(r) for r in request.input_roles],
            [wire.buffer_role_from(r) for r in request.output_roles],
        )
        return spb.AllocateResponse(buffer=buffer, token=token)

    def getStats(self, request: spb.DeviceRequest, context: grpc.ServicerContext) -> spb.StatsResponse:
        return spb.StatsResponse(**self.driver.stats(), limits=self.driver.config.limits())

    @guarded(spb.StatusMessage)
    def setFaults(self, request: spb.FaultRequest, context: grpc.ServicerContext) -> spb.StatusMessage:
        session = self._session(request.session)
        self.driver.set_faults(session, Faults(request.prepare_delay_ms, request.execute_delay_ms))
        return spb.StatusMessage()


class PreparedModelServicer(sgrpc.PreparedModelServicer):
    def __init__(self, driver: Driver, fences: FenceRegistry) -> None:
        self.driver = driver
        self.fences = fences

    def _launch(self, request: spb.ExecuteRequest, context: grpc.ServicerContext) -> Any:
        session = self.driver.session(request.session)
        job = self.driver.begin_execute(
            session,
            request.prepared_model,
            wire.request_from(request.request),
            request.measure == 1,
            deadline_ns(request.deadline),
            request.loop_timeout_ns,
            is_local_peer(context),
        )
        job.profile = request.profile
        return job

    def _run(self, request: spb.ExecuteRequest, context: grpc.ServicerContext) -> spb.ExecuteResult:
        msg = spb.ExecuteResult()
        try:
            job = self._launch(request, context)
        except HalError as err:
            return _status_fields(msg, err.error_status, err.message)  # type: ignore[no-any-return]
        try:
            result = job.run()
            return result_to(result, job.bound, msg)
        finally:
            job.bound.close()

    def executeSynchronously_1_3(self, request: spb.ExecuteRequest, context: grpc.ServicerContext) -> spb.ExecuteResult:
        try:
            return self._run(request, context)
        except Exception as err:
            log.exception("unexpected error in executeSynchronously_1_3")
            return _status_fields(spb.ExecuteResult(), ErrorStatus.GENERAL_FAILURE, f"internal error: {err!r}")  # type: ignore[no-any-return]

    def execute_1_3(self, request: spb.ExecuteRequest, context: grpc.ServicerContext) -> Iterator[spb.ExecuteEvent]:
        try:
            job = self._launch(request, context)
        except HalError as err:
            status = spb.StatusMessage(status=int(err.error_status), message=err.message)  # type: ignore[arg-type]
            yield spb.ExecuteEvent(launch=status)
            yield spb.ExecuteEvent(notify=_status_fields(spb.ExecuteResult(), err.error_status, err.message))
            return
        except Exception as err:
            log.exception("unexpected error launching an execution")
            text = f"internal error: {err!r}"
            yield spb.ExecuteEvent(launch=spb.StatusMessage(status=ErrorStatus.GENERAL_FAILURE, message=text))  # type: ignore[arg-type]
            yield spb.ExecuteEvent(notify=_status_fields(spb.ExecuteResult(), ErrorStatus.GENERAL_FAILURE, text))
            return
        try:
            yield spb.ExecuteEvent(launch=spb.StatusMessage(status=ErrorStatus.NONE))  # type: ignore[arg-type]
            try:
                result_msg = result_to(job.run(), job.bound, spb.ExecuteResult())
            except Exception as err:
                log.exception("unexpected error during execution")
                result_msg = _status_fields(
                    spb.ExecuteResult(), ErrorStatus.GENERAL_FAILURE, f"internal error: {err!r}"
                )
            yield spb.ExecuteEvent(notify=result_msg)
        finally:
            job.bound.close()

    def configureExecutionBurst(
        self, request_iterator: Iterator[spb.BurstRequest], context: grpc.ServicerContext
    ) -> Iterator[spb.BurstResponse]:
        """A burst: one stream, many executions, answered in order."""
        for req in request_iterator:
            yield spb.BurstResponse(result=self.executeSynchronously_1_3(req.execute, context))

    @guarded(spb.FencedExecuteResponse)
    def executeFenced(
        self, request: spb.FencedExecuteRequest, context: grpc.ServicerContext
    ) -> spb.FencedExecuteResponse:
        session = self.driver.session(request.session)
        fence, callback = self.fences.execute_fenced(
            self.driver,
            session,
            request.prepared_model,
            wire.request_from(request.request),
            list(request.wait_for),
            request.measure == 1,
            deadline_ns(request.deadline),
            request.loop_timeout_ns,
            request.timeout_after_fence_ns,
            is_local_peer(context),
        )
        return spb.FencedExecuteResponse(sync_fence=fence, callback=callback)

    @guarded(spb.StatusMessage)
    def release(self, request: spb.ReleaseRequest, context: grpc.ServicerContext) -> spb.StatusMessage:
        session = self.driver.session(request.session)
        self.driver.release_prepared(session, request.handle)
        return spb.StatusMessage()


class FencedExecutionCallbackServicer(sgrpc.FencedExecutionCallbackServicer):
    def __init__(self, driver: Driver, fences: FenceRegistry) -> None:
        self.driver = driver
        self.fences = fences

    @guarded(spb.FencedInfoResponse)
    def getExecutionInfo(self, request: spb.FencedInfoRequest, context: grpc.ServicerContext) -> spb.FencedInfoResponse:
        session = self.driver.session(request.session)
        remaining = context.time_remaining()
        timeout = None if remaining is None else max(0.0, remaining - 0.05)
        return self.fences.info(session, request.callback, request.wait, timeout)


class BufferServicer(sgrpc.BufferServicer):
    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    @guarded(spb.CopyToResponse)
    def copyTo(self, request: spb.CopyToRequest, context: grpc.ServicerContext) -> spb.CopyToResponse:
        session = self.driver.session(request.session)
        data = self.driver.buffer_copy_to(
            session, request.buffer, wire.pool_from(request.dst, "dst"), is_local_peer(context)
        )
        return spb.CopyToResponse(data=data)

    @guarded(spb.StatusMessage)
    def copyFrom(self, request: spb.CopyFromRequest, context: grpc.ServicerContext) -> spb.StatusMessage:
        session = self.driver.session(request.session)
        self.driver.buffer_copy_from(
            session,
            request.buffer,
            wire.pool_from(request.src, "src"),
            tuple(request.dimensions),
            is_local_peer(context),
        )
        return spb.StatusMessage()

    @guarded(spb.StatusMessage)
    def release(self, request: spb.ReleaseRequest, context: grpc.ServicerContext) -> spb.StatusMessage:
        session = self.driver.session(request.session)
        self.driver.release_buffer(session, request.handle)
        return spb.StatusMessage()


class EchoServicer(sgrpc.EchoServicer):
    """The benchmark anchor: returns the bytes it received."""

    def echo(self, request: spb.EchoMessage, context: grpc.ServicerContext) -> spb.EchoMessage:
        return spb.EchoMessage(data=request.data)

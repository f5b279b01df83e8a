"""The Device service: sessions, device facts, preparation and allocate.

``prepareModel_1_3`` / ``prepareModelFromCache_1_3`` are server streams: the
launch status (the HAL method's return value), then exactly one notify (the
callback), whatever happens; a launch error is followed by a notify with the
same status and no model.

The session stream (a coroutine on the server's event loop: an open session holds no
thread; lifecycle changes wake it through a ``LoopWaker``): its first event names the
session; while the server drains
one more event with ``draining`` set tells the client that the stream's coming
end is a drain, not a crash; the stream ends when the client ends it (a close,
its death, a keepalive expiry: the server then releases the session's objects)
or when the server stops. New sessions, preparations and allocations are
refused while the server drains (DEVICE_UNAVAILABLE). A refused session is the first
event's status for a protocol 2 client (``nnhal.core.wire_session``: the session cap, a
drain, an unknown device); a protocol 1 client gets the gRPC status it always got
(UNAVAILABLE while draining, which it reports as DEAD_OBJECT; RESOURCE_EXHAUSTED at the
cap). ``closeSession`` releases a session's objects at once and ends its stream.

A preparation holds a place among the long-lived calls (``executions.LongCalls``, kind
"preparation") from its launch to the end of its stream (``Executions.prepare``). ``getStats`` answers a client
with a verified certificate (mTLS) with its own identity's counts; ``setFaults`` sets
this session's delays and the device's injected faults (``nnhal.server.executions.faults``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from typing import Any

import grpc
from grpc import aio

from nnhal.core import methods, wire, wire_deadline, wire_device, wire_model, wire_session
from nnhal.core.enums import ErrorStatus, HalVersion
from nnhal.core.errors import DeviceUnavailable, HalError, InvalidArgument
from nnhal.core.host import memfd_identity
from nnhal.proto import service_pb2 as spb, service_pb2_grpc as sgrpc
from nnhal.server import fastpath
from nnhal.server.executions import (
    Arrival,
    CachedPreparation,
    Executions,
    Launch,
    Method,
    Notify,
    Preparation,
    Prepared,
)
from nnhal.server.lifecycle import DRAINING
from nnhal.server.rpc.common import cache_contents, events_to, hal_method
from nnhal.server.rpc.faults import fault_from
from nnhal.server.rpc.identity import peer_identity
from nnhal.server.session import Faults, Session, client_key_of

FAULTS_DISABLED = "fault injection is disabled on this server (start it with --enable-fault-injection)"


def prepared_to(prepared: Prepared) -> spb.PrepareModelNotify:
    """A preparation's notify: the prepared model's handle (and its model cache, when asked)."""
    notify = spb.PrepareModelNotify()
    notify.prepared_model.handle = prepared.handle
    if prepared.model_cache:
        notify.model_cache.add(data=prepared.model_cache)
    return notify


def prepare_events(
    events: Generator[Launch | Notify[Prepared], None, None], version: HalVersion | None = None
) -> Iterator[spb.PrepareModelEvent]:
    """A preparation's launch status, then exactly one notify carrying the prepared model's handle."""
    return events_to(events, spb.PrepareModelEvent, prepared_to, spb.PrepareModelNotify, version)


class LoopWaker:
    """Wakes a coroutine on ``loop`` from any thread: the ``Waker`` a session stream
    watches the lifecycle with."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()

    def set(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._event.set)
        except RuntimeError:  # the loop is closed: so is every stream on it
            pass

    async def wait(self) -> None:
        """Until set (since the last wait)."""
        await self._event.wait()
        self._event.clear()


class DeviceServicer(sgrpc.DeviceServicer):
    def __init__(self, executions: Executions, devices: Sequence[str] = (), fast_path: bool = False) -> None:
        """``devices``: the names of the server's devices, the default first (empty: this one);
        ``fast_path``: the server offers same-host fast bursts (both for the handshake)."""
        self.executions = executions
        self.driver = executions.driver
        self.metrics = executions.metrics
        self._lifecycle = executions.lifecycle
        self._long_calls = executions.long_calls
        self._devices = tuple(devices)
        self._fast_path = fast_path and fastpath.available()
        #: The wakers of the open session streams, by session id (closeSession ends a stream).
        self._streams: dict[str, LoopWaker] = {}

    # -- session -----------------------------------------------------------
    async def openSession(
        self, request: spb.OpenSessionRequest, context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[spb.SessionEvent]:
        """A coroutine on the server's loop (no thread held while the stream is open). The
        first event answers the handshake (``nnhal.core.wire_session``); a refusal is that
        event's status (protocol 2), or a gRPC status for a protocol 1 client."""
        try:
            version = wire_session.negotiate(request.protocol_version)
            if self._lifecycle.draining:
                raise DeviceUnavailable(DRAINING)
            session = self.driver.open_session(request.client_name, context.peer() or "", version)
        except HalError as err:
            self.metrics.rpc("openSession", err.error_status)
            if wire_session.version_of(request.protocol_version) < wire_session.DEFAULTS_VERSION:
                code = grpc.StatusCode.UNAVAILABLE if self._lifecycle.draining else grpc.StatusCode.RESOURCE_EXHAUSTED
                await context.abort(code, f"openSession: {err.message}")
            yield self._handshake(status=err.error_status, message=err.message)
            return
        self.metrics.rpc("openSession", ErrorStatus.NONE)
        # Set when the call ends, on closeSession and on every change of the server's state (from any thread).
        wake = LoopWaker(asyncio.get_running_loop())
        context.add_done_callback(lambda _context: wake.set())
        self._lifecycle.watch(wake)
        self._streams[session.id] = wake
        try:
            shm = self.driver.config.shared_memory
            first = self._handshake(session)
            first.session = session.id
            first.device_name = self.driver.config.name
            first.feature_level = int(self.driver.config.feature_level)
            first.shm_dir = str(shm.directory) if shm is not None and session.is_local else ""
            first.shm_prefix = shm.prefix if shm is not None else ""
            if shm is not None and shm.allow_memfd and session.is_local:
                first.shm_memfd = memfd_identity()
            yield first
            # The stream stays open as the client's liveness signal; its end (close, crash,
            # keepalive expiry: gRPC cancels this coroutine) releases the session's objects.
            told_draining = False
            while not context.done() and not self._lifecycle.stopping and not session.closed:
                if self._lifecycle.draining and not told_draining:
                    told_draining = True
                    yield spb.SessionEvent(session=session.id, draining=True)
                    self._lifecycle.told(wake)  # gRPC asks for the next event once this one is sent
                await wake.wait()
        finally:
            self._streams.pop(session.id, None)
            self._lifecycle.unwatch(wake)
            self.metrics.session_ended("server" if self._lifecycle.stopping else "client")
            self.driver.close_session(session.id)
            # The fairness record the scheduler keeps per client (dropped unless it has work left).
            self.driver.scheduler.forget(session.client_key)

    def _handshake(
        self, session: Session | None = None, status: ErrorStatus = ErrorStatus.NONE, message: str = ""
    ) -> spb.SessionEvent:
        """The first event's handshake: the session's version, the server's range and offers."""
        event = spb.SessionEvent(
            status=int(status),  # type: ignore[arg-type]
            message=message,
            protocol_version=session.protocol_version if session is not None else 0,
            min_protocol_version=wire_session.MIN_PROTOCOL_VERSION,
            max_protocol_version=wire_session.PROTOCOL_VERSION,
        )
        offers = event.capabilities
        offers.streamed_execution = True
        offers.close_session = True
        offers.devices.extend(self._devices or (self.driver.config.name,))
        offers.max_message_bytes = self.driver.config.message_cap(wire.MAX_MESSAGE_BYTES)
        offers.fast_path = bool(
            session is not None
            and self._fast_path
            and session.is_local
            and self.driver.config.shared_memory is not None
            and methods.serves(self.driver.config.feature_level, "configureExecutionBurst")
        )
        return event

    @hal_method(make=spb.StatusMessage)
    def closeSession(self, request: spb.CloseSessionRequest, context: grpc.ServicerContext) -> spb.StatusMessage:
        """Release the session's objects now and end its stream (with OK). INVALID_ARGUMENT
        for an unknown or closed session."""
        session = self._session(request.session)
        self.driver.close_session(session.id)
        wake = self._streams.get(session.id)
        if wake is not None:
            wake.set()
        return spb.StatusMessage()

    def _session(self, sid: str) -> Session:
        return self.driver.session(sid)

    # -- static facts ---------------------------------------------------------
    @hal_method(make=spb.CapabilitiesResponse)
    def getCapabilities_1_3(
        self, request: spb.DeviceRequest, context: grpc.ServicerContext
    ) -> spb.CapabilitiesResponse:
        self._session(request.session)
        msg = spb.CapabilitiesResponse()
        wire_device.capabilities_to(self.driver.capabilities, msg.capabilities)
        return msg

    @hal_method(make=spb.VersionStringResponse)
    def getVersionString(self, request: spb.DeviceRequest, context: grpc.ServicerContext) -> spb.VersionStringResponse:
        self._session(request.session)
        return spb.VersionStringResponse(version=self.driver.config.version_string)

    @hal_method(make=spb.TypeResponse)
    def getType(self, request: spb.DeviceRequest, context: grpc.ServicerContext) -> spb.TypeResponse:
        self._session(request.session)
        return spb.TypeResponse(type=int(self.driver.config.device_type))  # type: ignore[arg-type]

    @hal_method(make=spb.ExtensionsResponse)
    def getSupportedExtensions(
        self, request: spb.DeviceRequest, context: grpc.ServicerContext
    ) -> spb.ExtensionsResponse:
        self._session(request.session)
        msg = spb.ExtensionsResponse()
        for e in self.driver.extensions():
            wire_device.extension_to(e, msg.extensions.add())
        return msg

    @hal_method(make=spb.CacheFilesResponse)
    def getNumberOfCacheFilesNeeded(
        self, request: spb.DeviceRequest, context: grpc.ServicerContext
    ) -> spb.CacheFilesResponse:
        self._session(request.session)
        model, data = self.driver.cache_files_needed()
        return spb.CacheFilesResponse(num_model_cache=model, num_data_cache=data)

    def getStatus(self, request: spb.DeviceRequest, context: grpc.ServicerContext) -> spb.StatusResponse:
        return spb.StatusResponse(status=int(self.driver.status()))  # type: ignore[arg-type]

    @hal_method(make=spb.SupportedOperationsResponse)
    def getSupportedOperations_1_3(
        self, request: spb.SupportedOperationsRequest, context: grpc.ServicerContext
    ) -> spb.SupportedOperationsResponse:
        session = self._session(request.session)
        supported, reasons = self.driver.supported_operations(session, wire_model.model_from(request.model))
        return spb.SupportedOperationsResponse(supported=supported, reasons=reasons)

    # -- preparation ------------------------------------------------------------
    @hal_method("prepareModel_1_3", what="a preparation", timer="prepare")
    def prepareModel_1_3(
        self, request: spb.PrepareModelRequest, context: grpc.ServicerContext, m: Method, arrival: Arrival | None
    ) -> Iterator[spb.PrepareModelEvent]:
        def build() -> Preparation:
            protocol = self._session(request.session).protocol_version
            return Preparation(
                request.session,
                wire_model.model_from(request.model),
                wire_session.preference_of(request, protocol),
                wire_session.priority_of(request, protocol),
                wire_deadline.deadline_from(request.deadline),
                bytes(request.token),
                request.want_cache,
            )

        return prepare_events(self.executions.prepare(m, build, context, arrival))

    @hal_method("prepareModelFromCache_1_3", what="a preparation", timer="prepare")
    def prepareModelFromCache_1_3(
        self,
        request: spb.PrepareModelFromCacheRequest,
        context: grpc.ServicerContext,
        m: Method,
        arrival: Arrival | None,
    ) -> Iterator[spb.PrepareModelEvent]:
        def build() -> CachedPreparation:
            session = self._session(request.session)
            shm = self.driver.config.shared_memory
            return CachedPreparation(
                request.session,
                cache_contents(request.model_cache, session, shm, "model cache file"),
                cache_contents(request.data_cache, session, shm, "data cache file"),
                bytes(request.token),
                wire_deadline.deadline_from(request.deadline),
            )

        return prepare_events(self.executions.prepare(m, build, context, arrival))

    # -- memory domains -----------------------------------------------------------
    @hal_method(make=spb.AllocateResponse)
    def allocate(self, request: spb.AllocateRequest, context: grpc.ServicerContext) -> spb.AllocateResponse:
        session = self._session(request.session)
        self.executions.admit("allocate")
        buffer, token = self.driver.allocate(
            session,
            wire_device.buffer_desc_from(request.desc),
            [r.handle for r in request.prepared_models],
            [wire_device.buffer_role_from(r) for r in request.input_roles],
            [wire_device.buffer_role_from(r) for r in request.output_roles],
        )
        return spb.AllocateResponse(buffer=buffer, token=token)

    # -- nnhal extensions -----------------------------------------------------------
    def getStats(self, request: spb.DeviceRequest, context: grpc.ServicerContext) -> spb.StatsResponse:
        """Server-wide counts; to a client with a verified certificate (mTLS) only those of its
        own identity (``identity`` says which): operators read server-wide ones from /metrics."""
        identity = peer_identity(context)
        limits = self.driver.config.limits()
        if identity is None:
            counts: dict[str, Any] = {**self.driver.stats(), "long_calls": self._long_calls.in_progress}
            on_backend, on_fallback = self.driver.placement()
            return spb.StatsResponse(
                **counts,
                limits=limits,
                prepared_models_by_priority=self.driver.priorities(),
                executions_by_transport=self.metrics.executions_by_transport(),
                operations_on_backend=on_backend,
                operations_on_fallback=on_fallback,
            )
        key = client_key_of(identity)
        # Bursts and streamed executions of an mTLS client are its identity's too (``stream_client``).
        mine = self._long_calls.held_by(key)
        counts = {**self.driver.client_stats(key), "long_calls": mine}
        by_priority = self.driver.priorities(key)
        return spb.StatsResponse(**counts, identity=identity, limits=limits, prepared_models_by_priority=by_priority)

    @hal_method(make=spb.StatusMessage)
    def setFaults(self, request: spb.FaultRequest, context: grpc.ServicerContext) -> spb.StatusMessage:
        """This session's delays (a request without ``faults`` sets them, as it always did) and
        the device's injected faults (``nnhal.server.executions.faults``); ``clear`` removes both first.
        INVALID_ARGUMENT when the server runs without --enable-fault-injection, or for a
        fault it cannot inject (nothing is changed then)."""
        session = self._session(request.session)
        if not self.driver.config.fault_injection:
            raise InvalidArgument(FAULTS_DISABLED)
        faults = [fault_from(f, session.protocol_version) for f in request.faults]
        delays = Faults(request.prepare_delay_ms, request.execute_delay_ms)
        if request.clear:
            self.driver.set_faults(session, Faults())
            self.executions.faults.clear()
        if not faults or delays != Faults():
            self.driver.set_faults(session, delays)
        self.executions.faults.add(faults)
        return spb.StatusMessage()

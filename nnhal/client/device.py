"""The device proxy: an IDevice on the other side of a gRPC channel.

``Device.connect(address)`` opens the channel and the session stream; every
object prepared through the device belongs to that session and is released
by the server when the session ends. Methods raise HalError subclasses; a dead
server surfaces as DeadObject, immediately for every later call.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

import grpc

from nnhal.client.buffer import Buffer
from nnhal.client.callbacks import Callback
from nnhal.client.death import DeathMonitor
from nnhal.client.prepared_model import PreparedModel
from nnhal.client.remote import (
    DEADLINE_MARGIN,
    DEFAULT_CALL_TIMEOUT,
    Stubs,
    channel_options,
    map_rpc_error,
    target_of,
)
from nnhal.core import wire
from nnhal.core.enums import DeviceStatus, DeviceType, ErrorStatus, ExecutionPreference, Priority
from nnhal.core.errors import DeadObject, GeneralFailure, HalError
from nnhal.core.types import BufferDesc, BufferRole, Capabilities, Extension, Model
from nnhal.proto import service_pb2 as spb
from nnhal.proto import types_pb2 as pb

log = logging.getLogger(__name__)

PrepareCallback = Callback[PreparedModel]


def deadline_msg(msg: pb.Deadline, timeout: float | None, deadline_at: float | None) -> float | None:
    """Fill a wire Deadline from a relative timeout or an absolute time.monotonic() value.

    Returns the gRPC timeout to use (HAL deadline + margin, or the default)."""
    remaining: float | None = timeout
    if deadline_at is not None:
        remaining = (
            deadline_at - time.monotonic() if remaining is None else min(remaining, deadline_at - time.monotonic())
        )
    if remaining is None:
        return None
    msg.has_deadline = True
    msg.remaining_ns = max(0, int(remaining * 1e9))
    return max(0.0, remaining) + DEADLINE_MARGIN


def _check(msg: Any, what: str) -> None:
    if msg.status != 0:
        raise HalError.of(wire.error_status_from(msg.status), f"{what}: {msg.message}" if msg.message else what)


class Device:
    """A remote NN HAL device. Thread-safe. Use as a context manager or call ``close``."""

    def __init__(self, address: str, client_name: str, connect_timeout: float, keepalive_ms: int | None) -> None:
        self.address = address
        opts = channel_options() if keepalive_ms is None else channel_options(keepalive_ms, keepalive_ms)
        self._channel = grpc.insecure_channel(target_of(address), options=opts)
        self.stubs = Stubs(self._channel)
        self.monitor = DeathMonitor(self._channel, f"nnhal server at {address}")
        self._closed = False
        self._prepared: weakref.WeakSet[PreparedModel] = weakref.WeakSet()  # GC still releases them
        self._lock = threading.Lock()
        self.session = ""
        self.name = ""
        self.feature_level = 0
        #: The server's shared-memory directory and name prefix ("" when not offered).
        self.shm_dir = ""
        self.shm_prefix = ""
        self._session_ready = threading.Event()
        self._session_error: HalError | None = None
        self._session_call: Any = None
        self._thread = threading.Thread(
            target=self._session_loop, args=(client_name, connect_timeout), name="nnhal-session", daemon=True
        )
        self._thread.start()
        if not self._session_ready.wait(connect_timeout + 1.0):
            self.close()
            raise DeadObject(f"no nnhal server answered at {address} within {connect_timeout} s")
        if self._session_error is not None:
            self.close()
            raise self._session_error

    @classmethod
    def connect(
        cls,
        address: str,
        *,
        client_name: str = "",
        timeout: float = 10.0,
        keepalive_ms: int | None = None,
    ) -> Device:
        """Connect to the server at ``address`` (``host:port`` or ``unix:PATH``) and open a session.

        Raises DeadObject if no server answers within ``timeout`` seconds."""
        return cls(address, client_name or f"pid-{os.getpid()}", timeout, keepalive_ms)

    # -- session stream ----------------------------------------------------
    def _session_loop(self, client_name: str, connect_timeout: float) -> None:
        # The session stream lives as long as the client: its deadline is far
        # away but finite, as every call has one.
        call = self.stubs.device.openSession(
            spb.OpenSessionRequest(client_name=client_name), wait_for_ready=True, timeout=365 * 24 * 3600.0
        )
        self._session_call = call
        timer = threading.Timer(connect_timeout, lambda: None if self._session_ready.is_set() else call.cancel())
        timer.daemon = True
        timer.start()
        try:
            for event in call:
                if not self.session:
                    self.session = event.session
                    self.name = event.device_name
                    self.feature_level = event.feature_level
                    self.shm_dir = event.shm_dir
                    self.shm_prefix = event.shm_prefix
                    self._session_ready.set()
            reason = "the server ended the session"
        except grpc.RpcError as err:
            if not self._session_ready.is_set():
                self._session_error = map_rpc_error(err, what="openSession")
                if err.code() == grpc.StatusCode.CANCELLED:
                    self._session_error = DeadObject(f"no nnhal server answered at {self.address}")
            reason = f"the session stream broke ({err.code().name})"
        finally:
            timer.cancel()
            self._session_ready.set()
        if not self._closed:
            self.monitor.declare_dead(reason)

    # -- plumbing -------------------------------------------------------------
    def _unary(self, method: Any, request: Any, what: str, timeout: float | None = None) -> Any:
        self.monitor.check()
        if self._closed:
            raise GeneralFailure(f"{what}: the device proxy is closed")
        try:
            return method(request, timeout=timeout or DEFAULT_CALL_TIMEOUT)
        except grpc.RpcError as err:
            mapped = map_rpc_error(err, had_deadline=timeout is not None, what=what)
            if isinstance(mapped, DeadObject):
                self.monitor.declare_dead(mapped.message)
            raise mapped from err

    def _req(self) -> spb.DeviceRequest:
        return spb.DeviceRequest(session=self.session)

    # -- IDevice ---------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        msg = self._unary(self.stubs.device.getCapabilities_1_3, self._req(), "getCapabilities_1_3")
        _check(msg, "getCapabilities_1_3")
        return wire.capabilities_from(msg.capabilities)

    def version_string(self) -> str:
        msg = self._unary(self.stubs.device.getVersionString, self._req(), "getVersionString")
        _check(msg, "getVersionString")
        return str(msg.version)

    def type(self) -> DeviceType:
        msg = self._unary(self.stubs.device.getType, self._req(), "getType")
        _check(msg, "getType")
        return wire.device_type_from(msg.type)

    def supported_extensions(self) -> tuple[Extension, ...]:
        msg = self._unary(self.stubs.device.getSupportedExtensions, self._req(), "getSupportedExtensions")
        _check(msg, "getSupportedExtensions")
        return tuple(wire.extension_from(e) for e in msg.extensions)

    def number_of_cache_files_needed(self) -> tuple[int, int]:
        msg = self._unary(self.stubs.device.getNumberOfCacheFilesNeeded, self._req(), "getNumberOfCacheFilesNeeded")
        _check(msg, "getNumberOfCacheFilesNeeded")
        return int(msg.num_model_cache), int(msg.num_data_cache)

    def status(self) -> DeviceStatus:
        msg = self._unary(self.stubs.device.getStatus, self._req(), "getStatus")
        return wire.device_status_from(msg.status)

    def supported_operations(self, model: Model) -> list[bool]:
        return [ok for ok, _ in self.supported_operations_with_reasons(model)]

    def supported_operations_with_reasons(self, model: Model) -> list[tuple[bool, str]]:
        req = spb.SupportedOperationsRequest(session=self.session)
        wire.model_to(model, req.model)
        msg = self._unary(self.stubs.device.getSupportedOperations_1_3, req, "getSupportedOperations_1_3")
        _check(msg, "getSupportedOperations_1_3")
        return list(zip(msg.supported, msg.reasons))

    def stats(self) -> dict[str, int]:
        """Server-wide object counts (nnhal extension): sessions, prepared_models, ..."""
        msg = self._unary(self.stubs.device.getStats, self._req(), "getStats")
        return {f.name: int(getattr(msg, f.name)) for f in msg.DESCRIPTOR.fields if f.name != "limits"}

    def limits(self) -> dict[str, int]:
        """The server's configured resource limits (0 = unlimited)."""
        msg = self._unary(self.stubs.device.getStats, self._req(), "getStats")
        return {k: int(v) for k, v in msg.limits.items()}

    def set_faults(self, prepare_delay_ms: int = 0, execute_delay_ms: int = 0) -> None:
        """Test-only: ask a server started with --enable-fault-injection to slow this session."""
        req = spb.FaultRequest(
            session=self.session, prepare_delay_ms=prepare_delay_ms, execute_delay_ms=execute_delay_ms
        )
        _check(self._unary(self.stubs.device.setFaults, req, "setFaults"), "setFaults")

    # -- preparation --------------------------------------------------------------
    def prepare_model(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority | int = Priority.MEDIUM,
        timeout: float | None = None,
        deadline_at: float | None = None,
        cache_token: bytes | None = None,
    ) -> PrepareCallback:
        """prepareModel_1_3: returns at once; the callback delivers the PreparedModel (or
        the error) exactly once, DEAD_OBJECT included if the server dies meanwhile.

        Raises at launch only for a dead server; launch errors arrive in the callback."""
        req = spb.PrepareModelRequest(session=self.session, preference=int(preference), priority=int(priority))  # type: ignore[arg-type]
        wire.model_to(model, req.model)
        if cache_token is not None:
            req.token = cache_token
            req.want_cache = True
        grpc_timeout = deadline_msg(req.deadline, timeout, deadline_at)
        return self._prepare_call(self.stubs.device.prepareModel_1_3, req, grpc_timeout, model, "prepareModel_1_3")

    def prepare_model_from_cache(
        self,
        model_cache: bytes,
        token: bytes,
        model: Model | None = None,
        *,
        timeout: float | None = None,
        deadline_at: float | None = None,
    ) -> PrepareCallback:
        """prepareModelFromCache_1_3 with the model cache a previous prepare returned.

        ``model`` (optional) lets the proxy size outputs without asking the server."""
        req = spb.PrepareModelFromCacheRequest(session=self.session, token=token)
        req.model_cache.add(data=model_cache)
        grpc_timeout = deadline_msg(req.deadline, timeout, deadline_at)
        return self._prepare_call(
            self.stubs.device.prepareModelFromCache_1_3, req, grpc_timeout, model, "prepareModelFromCache_1_3"
        )

    def prepare_model_sync(self, model: Model, **kwargs: Any) -> PreparedModel:
        """prepare_model and wait; raises the HalError the preparation ended with."""
        cb = self.prepare_model(model, **kwargs)
        cb.wait(DEFAULT_CALL_TIMEOUT)
        return cb.get(0)

    def _prepare_call(
        self, method: Any, req: Any, grpc_timeout: float | None, model: Model | None, what: str
    ) -> PrepareCallback:
        cb: PrepareCallback = Callback()
        self.monitor.check()
        self.monitor.register(cb)
        call = method(req, timeout=grpc_timeout or DEFAULT_CALL_TIMEOUT)

        def consume() -> None:
            try:
                events: Iterator[spb.PrepareModelEvent] = iter(call)
                launch = next(events)
                if launch.WhichOneof("event") != "launch":
                    raise GeneralFailure(f"{what}: protocol error: the first message was not the launch status")
                notify_event = next(events)
                for _ in events:  # drain: the server ends the stream after the notify
                    pass
                n = notify_event.notify
                status = wire.error_status_from(n.status)
                if status == ErrorStatus.NONE:
                    pm = PreparedModel(self, n.prepared_model.handle, model)
                    if n.model_cache:
                        pm.model_cache = bytes(n.model_cache[0].data)
                    with self._lock:
                        self._prepared.add(pm)
                    if not cb.notify(status, pm):
                        pm.release()
                else:
                    cb.notify(status, None, n.message)
            except grpc.RpcError as err:
                mapped = map_rpc_error(err, had_deadline=grpc_timeout is not None, what=what)
                if isinstance(mapped, DeadObject):
                    self.monitor.declare_dead(mapped.message)
                cb.notify(mapped.error_status, None, mapped.message)
            except StopIteration:
                cb.notify(ErrorStatus.GENERAL_FAILURE, None, f"{what}: the stream ended without a notify")
            except HalError as err:
                cb.notify(err.error_status, None, err.message)

        threading.Thread(target=consume, name="nnhal-prepare", daemon=True).start()
        return cb

    # -- memory domains -----------------------------------------------------------
    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: list[PreparedModel],
        input_roles: list[BufferRole],
        output_roles: list[BufferRole],
    ) -> Buffer:
        """IDevice::allocate: a driver-managed buffer usable in the given roles."""
        req = spb.AllocateRequest(session=self.session)
        req.desc.dimensions.extend(desc.dimensions)
        for pm in prepared_models:
            req.prepared_models.add(handle=pm.handle)
        for r in input_roles:
            wire.buffer_role_to(r, req.input_roles.add())
        for r in output_roles:
            wire.buffer_role_to(r, req.output_roles.add())
        msg = self._unary(self.stubs.device.allocate, req, "allocate")
        _check(msg, "allocate")
        return Buffer(self, str(msg.buffer), int(msg.token))

    def buffer_call(self, method: str, request: Any) -> Any:
        """One IBuffer RPC (``copyTo`` / ``copyFrom`` / ``release``), status checked."""
        msg = self._unary(getattr(self.stubs.buffer, method), request, method)
        _check(msg, method)
        return msg

    def release_buffer(self, handle: str) -> None:
        if self._closed or self.monitor.dead:
            return  # the session's end released it
        self.buffer_call("release", spb.ReleaseRequest(session=self.session, handle=handle))

    # -- lifetime ---------------------------------------------------------------
    def _forget(self, pm: PreparedModel) -> None:
        with self._lock:
            self._prepared.discard(pm)

    def close(self) -> None:
        """End the session: the server releases every object it created."""
        if self._closed:
            return
        self._closed = True
        self.monitor.stop()
        if self._session_call is not None:
            self._session_call.cancel()
        self._channel.close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass

"""RemoteSession: one channel and session to an nnhal server, and the one call path.

The session owns the channel, its stubs, the session stream (session id, device
name, feature level and the shared-memory directory and prefix, from the
stream's first event) and the death monitor. Its public methods take and return
canonical types (:mod:`nnhal.core.types`), converted with :mod:`nnhal.core.wire`.

Every RPC — unary calls, the launch / notify / end streams of ``prepareModel*``
and ``execute_1_3``, the burst stream and the session stream — goes through
``invoke``: it catches ``grpc.RpcError``, maps it with
:func:`~nnhal.client.remote.transport.map_rpc_error`, declares the session dead
on DEAD_OBJECT (the monitor then releases every waiter, DESIGN §4) and raises
the HAL error. Calls on a session known dead fail with DEAD_OBJECT at once.

Request ids (DESIGN §12): every RPC carries a fresh ``x-request-id`` (metadata), which
the server puts on its log lines for the call and sends back. A HalError a call raises
carries it (``request_id_of(err)``), and ``last_request_id`` is the id of the last call
the current thread made (a burst's executions share their stream's), so a failure can be
matched with the server's log.

A drain is not a crash: a server that starts draining (SIGTERM) sends an event
with ``draining`` set on the session stream, and the end of that server (its
stream's end, its connection closing) is then reported as :data:`DRAINING` —
in the DEAD_OBJECT messages and the death monitor's ``reason`` — instead of a
death. Until the server is gone, launched work still completes and new work is
refused by the server with DEVICE_UNAVAILABLE.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import grpc

from nnhal.client.callbacks import Callback
from nnhal.client.faults import Fault
from nnhal.client.remote.devices import for_device
from nnhal.client.remote.messages import (
    BurstStream,
    ExecutionOptions,
    PreparedRef,
    drain,
    fault_request,
    fill_execution,
    notify_of,
    raise_for_status,
)
from nnhal.client.remote.monitor import SessionMonitor
from nnhal.client.remote.transport import (
    BURST_STREAM_TIMEOUT,
    DEFAULT_CALL_TIMEOUT,
    GC_RELEASE_TIMEOUT,
    REQUEST_ID_KEY,
    SESSION_STREAM_TIMEOUT,
    Stubs,
    TlsConfig,
    channel_options,
    grpc_timeout,
    map_rpc_error,
    new_request_id,
    open_channel,
    remaining_time,
    tag_request_id,
)
from nnhal.core import wire
from nnhal.core.enums import DeviceStatus, DeviceType, ErrorStatus, ExecutionPreference, Priority
from nnhal.core.errors import DeadObject, GeneralFailure, HalError, InvalidArgument
from nnhal.core.types import (
    BufferDesc,
    BufferRole,
    Capabilities,
    ExecutionResult,
    Extension,
    FencedExecutionInfo,
    MemoryPool,
    Model,
    Request,
)
from nnhal.proto import service_pb2 as spb

T = TypeVar("T")

#: StatsResponse fields that are not counts.
_NOT_COUNTS = ("limits", "identity")


class RemoteSession:
    """One channel and session to an nnhal server. Thread-safe. ``close`` ends the session:
    the server then releases every object the session created.

    Raises DeadObject if no server answers within ``connect_timeout`` seconds, or the
    HAL error the server refused the session with (e.g. RESOURCE_EXHAUSTED_TRANSIENT)."""

    def __init__(
        self,
        address: str,
        client_name: str,
        connect_timeout: float,
        keepalive_ms: int | None,
        tls: TlsConfig | None = None,
        device: str | None = None,
    ) -> None:
        self.address = address
        opts = channel_options() if keepalive_ms is None else channel_options(keepalive_ms, keepalive_ms)
        self._channel = open_channel(address, opts, tls)
        # Every call names the device when one was asked for (a server hosting several).
        self._stubs = Stubs(for_device(self._channel, device))
        self._monitor = SessionMonitor(self._channel, f"nnhal server at {address}")
        self._closed = False
        self._session_id = ""
        self.device_name = ""
        self.feature_level = 0
        #: The server's shared-memory directory and name prefix ("" when not offered).
        self.shm_dir = ""
        self.shm_prefix = ""
        self._ready = threading.Event()
        self._gave_up = False
        self._session_error: HalError | None = None
        self._session_call: Any = None
        self._ids = threading.local()
        self._thread = threading.Thread(
            target=self._session_loop, args=(client_name, connect_timeout), name="nnhal-session", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(connect_timeout + 1.0):
            self.close()
            raise DeadObject(f"no nnhal server answered at {address} within {connect_timeout} s")
        if self._session_error is not None:
            self.close()
            raise self._session_error
        if device and self.device_name != device:  # a one-device server routes every call to it
            self.close()
            raise InvalidArgument(f"the server at {address} has no device named {device!r} (only {self.device_name!r})")

    # -- raw access (tests that send hand-built or invalid messages) ---------------------
    @property
    def session_id(self) -> str:
        """The server's name for this session; every request carries it."""
        return self._session_id

    @property
    def stubs(self) -> Stubs:
        """The generated stubs of this channel. Calls made with them bypass the error mapping."""
        return self._stubs

    def buffer_call(self, method: str, request: Any) -> Any:
        """One IBuffer RPC (``copyTo`` / ``copyFrom`` / ``release``) with a hand-built request,
        through the error mapping, in-band status checked (raises its HalError)."""
        return self._checked(getattr(self._stubs.buffer, method), request, method)

    @property
    def last_request_id(self) -> str:
        """The request id of the last call this thread made ("" before any)."""
        return str(getattr(self._ids, "last", ""))

    def _metadata(self, request_id: str | None = None) -> tuple[tuple[str, str], ...]:
        """The metadata of a new call: a fresh request id (or ``request_id``), now this thread's last."""
        rid = request_id or new_request_id()
        self._ids.last = rid
        return ((REQUEST_ID_KEY, rid),)

    # -- the one call path --------------------------------------------------------------
    def invoke(self, fn: Callable[[], T], what: str, had_deadline: bool = False, request_id: str = "") -> T:
        """``fn()``, its transport failure raised as the HAL error (a death declared)."""
        try:
            return fn()
        except grpc.RpcError as err:
            mapped = map_rpc_error(err, had_deadline=had_deadline, what=what)
            if isinstance(mapped, DeadObject):
                self._monitor.declare_dead(mapped.message)
            raise tag_request_id(mapped, request_id) from err
        except HalError as err:
            tag_request_id(err, request_id)
            raise

    def check(self, what: str = "call") -> None:
        """Raise DEAD_OBJECT if the server is known dead, GENERAL_FAILURE once closed."""
        self._monitor.check()
        if self._closed:
            raise GeneralFailure(f"{what}: the device proxy is closed")

    def _unary(self, rpc: Any, request: Any, what: str, timeout: float | None = None) -> Any:
        self.check(what)
        md = self._metadata()
        limit = timeout or DEFAULT_CALL_TIMEOUT
        return self.invoke(lambda: rpc(request, timeout=limit, metadata=md), what, timeout is not None, md[0][1])

    def _checked(self, rpc: Any, request: Any, what: str, timeout: float | None = None, prefix: bool = True) -> Any:
        msg = self._unary(rpc, request, what, timeout)
        try:
            raise_for_status(msg, what if prefix else "")
        except HalError as err:
            tag_request_id(err, self.last_request_id)
            raise
        return msg

    def _stream(
        self,
        rpc: Any,
        request: Any,
        what: str,
        timeout: float | None,
        deliver: Callable[[Any, Callback[T]], None],
        failure: Callable[[HalError], T | None],
        thread_name: str,
    ) -> Callback[T]:
        """Start a launch / notify / end RPC; ``deliver`` turns its notify into the callback's
        result on a helper thread. A failure reaches the callback with ``failure(err)``."""
        cb: Callback[T] = Callback()
        self.check(what)
        self._monitor.register(cb)
        md = self._metadata()
        rid = md[0][1]
        call = self.invoke(
            lambda: rpc(request, timeout=timeout or DEFAULT_CALL_TIMEOUT, metadata=md), what, timeout is not None, rid
        )

        def consume() -> None:
            try:
                notify = self.invoke(lambda: notify_of(call, what), what, timeout is not None, rid)
                deliver(notify, cb)
            except HalError as err:
                cb.notify(err.error_status, failure(err), err.message)

        threading.Thread(target=consume, name=thread_name, daemon=True).start()
        return cb

    # -- session stream -------------------------------------------------------------------
    def _session_loop(self, client_name: str, connect_timeout: float) -> None:
        call = self._stubs.device.openSession(
            spb.OpenSessionRequest(client_name=client_name),
            wait_for_ready=True,
            timeout=SESSION_STREAM_TIMEOUT,
            metadata=self._metadata(),
        )
        self._session_call = call
        timer = threading.Timer(connect_timeout, self._give_up, args=(call,))
        timer.daemon = True
        timer.start()
        try:
            self.invoke(lambda: self._read_session(call), "openSession", had_deadline=False)
            reason = "the server ended the session"
        except HalError as err:
            if not self._ready.is_set():
                self._session_error = (
                    DeadObject(f"no nnhal server answered at {self.address}") if self._gave_up else err
                )
            reason = f"the session stream broke ({err.message})"
        finally:
            timer.cancel()
            self._ready.set()
        if not self._closed:
            self._monitor.declare_dead(reason)

    def _give_up(self, call: Any) -> None:
        if not self._ready.is_set():
            self._gave_up = True
            call.cancel()

    def _read_session(self, call: Iterable[Any]) -> None:
        for event in call:
            if not self._session_id:
                self.device_name = event.device_name
                self.feature_level = int(event.feature_level)
                self.shm_dir = event.shm_dir
                self.shm_prefix = event.shm_prefix
                self._session_id = event.session
                self._ready.set()
            if event.draining:
                self._monitor.mark_draining()

    # -- IDevice ----------------------------------------------------------------------------
    def _device_query(self, rpc_name: str) -> Any:
        rpc = getattr(self._stubs.device, rpc_name)
        return self._checked(rpc, spb.DeviceRequest(session=self._session_id), rpc_name)

    def capabilities(self) -> Capabilities:
        return wire.capabilities_from(self._device_query("getCapabilities_1_3").capabilities)

    def version_string(self) -> str:
        return str(self._device_query("getVersionString").version)

    def device_type(self) -> DeviceType:
        return wire.device_type_from(self._device_query("getType").type)

    def supported_extensions(self) -> tuple[Extension, ...]:
        return tuple(wire.extension_from(e) for e in self._device_query("getSupportedExtensions").extensions)

    def number_of_cache_files_needed(self) -> tuple[int, int]:
        msg = self._device_query("getNumberOfCacheFilesNeeded")
        return int(msg.num_model_cache), int(msg.num_data_cache)

    def status(self) -> DeviceStatus:
        msg = self._unary(self._stubs.device.getStatus, spb.DeviceRequest(session=self._session_id), "getStatus")
        return wire.device_status_from(msg.status)

    def supported_operations(self, model: Model) -> list[tuple[bool, str]]:
        req = spb.SupportedOperationsRequest(session=self._session_id)
        wire.model_to(model, req.model)
        msg = self._checked(self._stubs.device.getSupportedOperations_1_3, req, "getSupportedOperations_1_3")
        return list(zip(msg.supported, msg.reasons))

    def stats(self) -> tuple[dict[str, int], dict[str, int]]:
        """Server-wide object counts (sessions, prepared_models, ...) and configured limits."""
        msg = self._unary(self._stubs.device.getStats, spb.DeviceRequest(session=self._session_id), "getStats")
        counts = {f.name: int(getattr(msg, f.name)) for f in msg.DESCRIPTOR.fields if f.name not in _NOT_COUNTS}
        return counts, {k: int(v) for k, v in msg.limits.items()}

    def set_faults(self, prepare_delay_ms: int, execute_delay_ms: int) -> None:
        req = spb.FaultRequest(
            session=self._session_id, prepare_delay_ms=prepare_delay_ms, execute_delay_ms=execute_delay_ms
        )
        self._checked(self._stubs.device.setFaults, req, "setFaults")

    def inject_faults(self, faults: Sequence[Fault], clear: bool = False) -> None:
        """Add server-wide faults (``nnhal.client.faults``); ``clear`` removes every fault and this
        session's delays first. INVALID_ARGUMENT when the server refuses them."""
        req = fault_request(self._session_id, faults, clear)
        self._checked(self._stubs.device.setFaults, req, "setFaults")

    def prepare_model(
        self,
        model: Model,
        preference: ExecutionPreference,
        priority: Priority | int,
        timeout: float | None,
        deadline_at: float | None,
        cache_token: bytes | None,
    ) -> Callback[PreparedRef]:
        """prepareModel_1_3: the callback delivers the prepared model's reference exactly once."""
        req = spb.PrepareModelRequest(session=self._session_id, preference=int(preference), priority=int(priority))  # type: ignore[arg-type]
        wire.model_to(model, req.model)
        if cache_token is not None:
            req.token = cache_token
            req.want_cache = True
        return self._prepare(self._stubs.device.prepareModel_1_3, req, timeout, deadline_at, "prepareModel_1_3")

    def prepare_model_from_cache(
        self, model_cache: bytes, token: bytes, timeout: float | None, deadline_at: float | None
    ) -> Callback[PreparedRef]:
        """prepareModelFromCache_1_3 with the model cache a previous preparation returned."""
        req = spb.PrepareModelFromCacheRequest(session=self._session_id, token=token)
        req.model_cache.add(data=model_cache)
        rpc = self._stubs.device.prepareModelFromCache_1_3
        return self._prepare(rpc, req, timeout, deadline_at, "prepareModelFromCache_1_3")

    def _prepare(
        self, rpc: Any, req: Any, timeout: float | None, deadline_at: float | None, what: str
    ) -> Callback[PreparedRef]:
        remaining = remaining_time(timeout, deadline_at)
        wire.deadline_to(remaining, req.deadline)

        def deliver(notify: Any, cb: Callback[PreparedRef]) -> None:
            status, message = wire.status_from(notify)
            if status != ErrorStatus.NONE:
                cb.notify(status, None, message)
                return
            cache = bytes(notify.model_cache[0].data) if notify.model_cache else b""
            ref = PreparedRef(notify.prepared_model.handle, cache)
            if not cb.notify(status, ref):  # the waiter was already released (death): nobody owns it
                self.discard_prepared_model(ref.handle)

        return self._stream(rpc, req, what, grpc_timeout(remaining), deliver, lambda _err: None, "nnhal-prepare")

    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: Sequence[str],
        input_roles: Sequence[BufferRole],
        output_roles: Sequence[BufferRole],
    ) -> tuple[str, int]:
        """IDevice::allocate: the new buffer's handle and token."""
        req = spb.AllocateRequest(session=self._session_id)
        req.desc.dimensions.extend(desc.dimensions)
        for handle in prepared_models:
            req.prepared_models.add(handle=handle)
        for r in input_roles:
            wire.buffer_role_to(r, req.input_roles.add())
        for r in output_roles:
            wire.buffer_role_to(r, req.output_roles.add())
        msg = self._checked(self._stubs.device.allocate, req, "allocate")
        return str(msg.buffer), int(msg.token)

    # -- IPreparedModel -----------------------------------------------------------------------
    def _execute_message(
        self, handle: str, request: Request, options: ExecutionOptions
    ) -> tuple[spb.ExecuteRequest, float | None]:
        msg = spb.ExecuteRequest(session=self._session_id, profile=options.profile)
        return msg, fill_execution(msg, handle, request, options)

    def execute(self, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult:
        """executeSynchronously_1_3. Transport failures raise; HAL errors are in the result."""
        msg, timeout = self._execute_message(handle, request, options)
        rpc = self._stubs.prepared_model.executeSynchronously_1_3
        return wire.execution_result_from(self._unary(rpc, msg, "executeSynchronously_1_3", timeout))

    def execute_async(self, handle: str, request: Request, options: ExecutionOptions) -> Callback[ExecutionResult]:
        """execute_1_3: the callback delivers the result exactly once (a transport failure
        as a result carrying its status; a death with no value)."""
        msg, timeout = self._execute_message(handle, request, options)

        def deliver(notify: Any, cb: Callback[ExecutionResult]) -> None:
            result = wire.execution_result_from(notify)
            cb.notify(result.status, result, result.message)

        def failure(err: HalError) -> ExecutionResult:
            return ExecutionResult(err.error_status, err.message)

        rpc = self._stubs.prepared_model.execute_1_3
        return self._stream(rpc, msg, "execute_1_3", timeout, deliver, failure, "nnhal-execute")

    def execute_fenced(
        self,
        handle: str,
        request: Request,
        wait_for: Sequence[str],
        options: ExecutionOptions,
        timeout_after_fence_ns: int,
    ) -> tuple[str, str]:
        """executeFenced: the sync fence and the fenced-execution callback's names."""
        msg = spb.FencedExecuteRequest(session=self._session_id, timeout_after_fence_ns=timeout_after_fence_ns)
        msg.wait_for.extend(wait_for)
        timeout = fill_execution(msg, handle, request, options)
        result = self._unary(self._stubs.prepared_model.executeFenced, msg, "executeFenced", timeout)
        raise_for_status(result)
        return str(result.sync_fence), str(result.callback)

    def fenced_info(self, callback: str, wait: bool, timeout: float) -> FencedExecutionInfo:
        """IFencedExecutionCallback::getExecutionInfo (with ``wait``: once the fence signalled)."""
        req = spb.FencedInfoRequest(session=self._session_id, callback=callback, wait=wait)
        return wire.fenced_info_from(self._unary(self._stubs.fenced.getExecutionInfo, req, "getExecutionInfo", timeout))

    def release_prepared_model(self, handle: str) -> None:
        """Release a prepared model now; raises its HalError (DEAD_OBJECT for a dead server)."""
        req = spb.ReleaseRequest(session=self._session_id, handle=handle)
        self._checked(self._stubs.prepared_model.release, req, "release", prefix=False)

    def discard_prepared_model(self, handle: str) -> None:
        """Best-effort release (garbage collection): nothing to do once the session is gone."""
        if self._closed or self._monitor.dead:
            return
        req = spb.ReleaseRequest(session=self._session_id, handle=handle)
        try:
            self._unary(self._stubs.prepared_model.release, req, "release", GC_RELEASE_TIMEOUT)
        except HalError:
            pass  # the session's end releases it anyway

    # -- bursts -------------------------------------------------------------------------------
    def open_burst(self) -> BurstStream:
        """configureExecutionBurst: a stream for ``burst_execute`` until ``close_burst``."""
        self.check("configureExecutionBurst")
        requests: queue.Queue[spb.BurstRequest | None] = queue.Queue()
        md = self._metadata()
        responses = self._stubs.prepared_model.configureExecutionBurst(
            iter(requests.get, None), timeout=BURST_STREAM_TIMEOUT, metadata=md
        )
        return BurstStream(requests, responses, md[0][1])

    def burst_execute(
        self, stream: BurstStream, handle: str, request: Request, options: ExecutionOptions
    ) -> ExecutionResult:
        """One execution on the burst stream; transport failures come back in the result."""
        msg, _ = self._execute_message(handle, request, options)
        self._ids.last = stream.request_id
        with stream.lock:
            self._monitor.check()
            stream.requests.put(spb.BurstRequest(execute=msg))
            try:
                response = self.invoke(lambda: next(stream.responses, None), "burst", had_deadline=False)
            except HalError as err:
                return ExecutionResult(err.error_status, err.message)
        if response is None:  # the server ended the stream: a refusal past its cap, or a drain
            return ExecutionResult(
                ErrorStatus.GENERAL_FAILURE,
                "the burst stream ended (refused or closed by the server); open a new burst",
            )
        return wire.execution_result_from(response.result)

    def close_burst(self, stream: BurstStream) -> None:
        stream.requests.put(None)
        try:
            self.invoke(lambda: drain(stream.responses), "burst", had_deadline=False)
        except HalError:
            pass  # a stream that broke holds nothing to release

    # -- IBuffer ----------------------------------------------------------------------------------
    def buffer_copy_from(self, handle: str, src: MemoryPool, dimensions: Sequence[int]) -> None:
        req = spb.CopyFromRequest(session=self._session_id, buffer=handle)
        wire.pool_to(src, req.src)
        req.dimensions.extend(dimensions)
        self.buffer_call("copyFrom", req)

    def buffer_copy_to(self, handle: str, dst: MemoryPool) -> bytes:
        """IBuffer::copyTo; an inline ``dst`` comes back as the returned bytes."""
        req = spb.CopyToRequest(session=self._session_id, buffer=handle)
        wire.pool_to(dst, req.dst)
        return bytes(self.buffer_call("copyTo", req).data)

    def release_buffer(self, handle: str) -> None:
        if self._closed or self._monitor.dead:
            return  # the session's end released it
        self.buffer_call("release", spb.ReleaseRequest(session=self._session_id, handle=handle))

    # -- lifetime -----------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def draining(self) -> bool:
        """True once the server announced it is draining (shutting down)."""
        return self._monitor.draining

    @property
    def dead(self) -> bool:
        """True once the server is known dead (every later call: DEAD_OBJECT at once)."""
        return self._monitor.dead

    def close(self) -> None:
        """End the session: the server releases every object it created. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._monitor.closing()  # before the cancel: the session stream's end is no death
        if self._session_call is not None:
            self._session_call.cancel()
        self._monitor.stop_and_close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass

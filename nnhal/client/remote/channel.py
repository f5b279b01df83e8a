"""SessionChannel: one channel and session to an nnhal server, and the one call path.

The channel owns the channel, its stubs, the session stream (session id, device
name, feature level and the shared-memory directory and prefix, from the
stream's first event) and the death monitor; :class:`~nnhal.client.remote.session.RemoteSession`
adds the HAL methods on top of it.

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
refused by the server with DEVICE_UNAVAILABLE. A waiter then gets the status its own
stream delivers (the server sends one before it goes), even when the session stream's
end is read first: after a drain the monitor releases waiters only after a grace
(:data:`~nnhal.client.remote.monitor.DRAIN_NOTIFY_GRACE_S`).

A session collected at interpreter shutdown leaves its channel to the process's end
(:func:`~nnhal.client.death.close_channel`): closing then would hang the exit.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from nnhal.client import steps
from nnhal.client.callbacks import Callback
from nnhal.client.faults import current_fault_scope
from nnhal.client.remote import calls
from nnhal.client.remote.devices import for_device
from nnhal.client.remote.messages import (
    notify_of,
    raise_for_status,
)
from nnhal.client.remote.monitor import SessionMonitor
from nnhal.client.remote.samehost import SameHostQueue, scope_of
from nnhal.client.remote.transport import (
    DEFAULT_CALL_TIMEOUT,
    SESSION_STREAM_TIMEOUT,
    Stubs,
    TlsConfig,
    channel_options,
    map_rpc_error,
    new_request_id,
    open_channel,
    tag_request_id,
)
from nnhal.core import telemetry, wire_session
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, GeneralFailure, HalError, InvalidArgument
from nnhal.core.fault_scope import METADATA_KEY as FAULT_SCOPE_KEY
from nnhal.core.protocol import REQUEST_ID_METADATA
from nnhal.proto import service_pb2 as spb

if TYPE_CHECKING:
    from nnhal.client.recorder import ClientRecorder

T = TypeVar("T")


class SessionChannel:
    """One channel and session to an nnhal server. Thread-safe. ``close`` ends the session:
    the server then releases every object the session created.

    Raises DeadObject if no server answers within ``connect_timeout`` seconds, or the
    HAL error the server refused the session with (e.g. RESOURCE_EXHAUSTED_TRANSIENT)."""

    #: The same-host execution queue (None: every call takes gRPC); set by the session's first event.
    _queue: SameHostQueue | None = None

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
        #: The client's recorder (``Device.connect(…, record=PATH)``); None: not recording.
        self.recorder: ClientRecorder | None = None
        self.feature_level = 0
        self.protocol_version = 0
        #: The server's shared-memory directory and name prefix ("" when not offered).
        self.shm_dir = ""
        self.shm_prefix = ""
        #: The server's ``memfd_identity`` ("" when it opens no client memfds).
        self.shm_memfd = ""
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
        return self.checked(getattr(self._stubs.buffer, method), request, method)

    @property
    def same_host(self) -> SameHostQueue | None:
        """The session's same-host execution queue (None: its calls take gRPC)."""
        return self._queue

    @property
    def last_request_id(self) -> str:
        """The request id of the last call this thread made ("" before any)."""
        return str(getattr(self._ids, "last", ""))

    def call_ids(self, request_id: str | None = None) -> tuple[str, str]:
        """A new call's request id — fresh (or ``request_id``), now this thread's last — and the
        fault scope it is made in ("" when none: ``client.faults.fault_scope``): what its
        metadata carries (:meth:`_metadata`), or a same-host packet's tag."""
        rid = request_id or new_request_id()
        self._ids.last = rid
        return rid, current_fault_scope() or ""

    def _metadata(self, request_id: str | None = None) -> tuple[tuple[str, str], ...]:
        """The metadata of a new call (:meth:`call_ids`): its request id first; then its fault
        scope, if any."""
        rid, scope = self.call_ids(request_id)
        return ((REQUEST_ID_METADATA, rid), (FAULT_SCOPE_KEY, scope)) if scope else ((REQUEST_ID_METADATA, rid),)

    # -- the one call path --------------------------------------------------------------
    def invoke(self, fn: Callable[[], T], what: str, had_deadline: bool = False, request_id: str = "") -> T:
        """``fn()``, its transport failure raised as the HAL error (a death declared)."""
        try:
            return fn()
        except grpc.RpcError as err:
            raise self.failed(err, what, had_deadline, request_id) from err
        except HalError as err:
            tag_request_id(err, request_id)
            raise

    def failed(self, err: grpc.RpcError, what: str, had_deadline: bool, request_id: str) -> HalError:
        """The HAL error a call's transport failure ``err`` is raised as (from ``err``), tagged
        with ``request_id``; a death declared (:meth:`invoke`'s, or a caller's catching it
        itself)."""
        mapped = map_rpc_error(err, had_deadline=had_deadline, what=what)
        if isinstance(mapped, DeadObject):
            self._monitor.declare_dead(mapped.message)
        return tag_request_id(mapped, request_id)

    def check(self, what: str = "call") -> None:
        """Raise DEAD_OBJECT if the server is known dead, GENERAL_FAILURE once closed."""
        self._monitor.check()
        if self._closed:
            raise GeneralFailure(f"{what}: the device proxy is closed")

    def unary(self, rpc: Any, request: Any, what: str, timeout: float | None = None) -> Any:
        """One unary RPC through :meth:`invoke` (``timeout`` None: the default call bound); the
        call path of this session's protocol adapters (the HAL calls, the HIDL and AIDL forms).
        An execution form goes through the same-host queue when the session has one
        (:mod:`nnhal.client.remote.samehost`)."""
        self.check(what)
        md = self._metadata()
        limit = timeout or DEFAULT_CALL_TIMEOUT
        queue = self._queue
        # Partials, not lambdas: a lambda's variables would be cells made on every call.
        if queue is not None and queue.carries(rpc):
            carried = self.invoke(
                partial(queue.call, rpc, request, what, timeout, md[0][1], scope_of(md)),
                what,
                timeout is not None,
                md[0][1],
            )
            if carried is not None:
                return carried[0]
        # :meth:`invoke`'s steps, without a partial of the call made for it.
        try:
            return rpc(request, timeout=limit, metadata=md)
        except grpc.RpcError as err:
            raise self.failed(err, what, timeout is not None, md[0][1]) from err
        except HalError as err:
            tag_request_id(err, md[0][1])
            raise

    def run(self, call: calls.Call[T]) -> T:
        """Drive a HAL call (:mod:`nnhal.client.remote.calls`) on this session's one call path."""
        return steps.drive(call, self._perform)

    def _perform(self, step: calls.Step) -> Any:
        """A unary step (a session with other transports overrides this for the others)."""
        assert isinstance(step, calls.Unary), step
        rpc = getattr(getattr(self._stubs, step.service), step.method)
        if step.checked:
            return self.checked(rpc, step.request, step.label, step.timeout, step.prefix)
        return self.unary(rpc, step.request, step.label, step.timeout)

    def checked(self, rpc: Any, request: Any, what: str, timeout: float | None = None, prefix: bool = True) -> Any:
        """:meth:`unary`, then its in-band status raised as the HalError (tagged with the request id)."""
        msg = self.unary(rpc, request, what, timeout)
        try:
            raise_for_status(msg, what if prefix else "")
        except HalError as err:
            tag_request_id(err, self.last_request_id)
            raise
        return msg

    def stream(
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
        queue = self._queue
        carried = queue is not None and queue.carries(rpc)

        def start() -> Any:
            return self.invoke(
                lambda: rpc(request, timeout=timeout or DEFAULT_CALL_TIMEOUT, metadata=md),
                what,
                timeout is not None,
                rid,
            )

        call = None if carried else start()

        def consume() -> None:
            try:
                events = None
                if carried and queue is not None:
                    events = self.invoke(
                        lambda: queue.call(rpc, request, what, timeout, rid, scope_of(md)),
                        what,
                        timeout is not None,
                        rid,
                    )
                stream = events if events is not None else call if call is not None else start()
                notify = self.invoke(lambda: notify_of(stream, what), what, timeout is not None, rid)
                deliver(notify, cb)
            except HalError as err:
                cb.notify(err.error_status, failure(err), err.message)
            except Exception as err:  # a malformed notify: the waiter is still released, once
                cb.notify(ErrorStatus.GENERAL_FAILURE, None, f"{what}: the notify could not be read: {err!r}")

        threading.Thread(target=consume, name=thread_name, daemon=True).start()
        return cb

    # -- session stream -------------------------------------------------------------------
    def _session_loop(self, client_name: str, connect_timeout: float) -> None:
        call = self._stubs.device.openSession(
            spb.OpenSessionRequest(client_name=client_name, protocol_version=wire_session.PROTOCOL_VERSION),
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
                refusal = wire_session.refusal_of(event)
                if refusal is not None:  # the stream ends next: the session loop reports the refusal
                    raise refusal
                # The protocol version the session speaks (1: a server older than the handshake).
                self.protocol_version = wire_session.version_of(event.protocol_version)
                self.device_name = event.device_name
                self.feature_level = int(event.feature_level)
                self.shm_dir = event.shm_dir
                self.shm_prefix = event.shm_prefix
                self.shm_memfd = event.shm_memfd
                # Traced calls keep gRPC: the queue carries no trace context across the processes.
                if event.shm_dir and event.capabilities.fast_path and SameHostQueue.ENABLED and not telemetry.enabled():
                    self._queue = SameHostQueue(self)
                self._session_id = event.session
                self._ready.set()
            if event.draining:
                self._monitor.mark_draining()

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
        if self._queue is not None:
            self._queue.close()
        if self._session_call is not None:
            self._session_call.cancel()
        self._monitor.stop_and_close()

    def __del__(self) -> None:
        if sys.is_finalizing():  # the process is going (see close_channel): closing now would hang
            return
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release
            pass

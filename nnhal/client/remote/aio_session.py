"""AioSession: one ``grpc.aio`` channel and session to an nnhal server, and the one call path.

The asyncio driver of the HAL calls :class:`nnhal.client.remote.RemoteSession` drives on
blocking stubs: the calls themselves (request, answer, canonical result) are
:mod:`nnhal.client.remote.calls`', run by :meth:`AioSession.run`; the launch / notify
streams (preparations, ``execute_1_3``) and the burst stream (:mod:`.aio_burst_stream`) are
the transport's own. The asyncio proxies (:mod:`nnhal.client.aio`) speak canonical types
to this class only. The same contracts as the sync session:

- The session stream (``openSession``) is opened with ``wait_for_ready``; its first event
  names the session, the device and its feature level. No answer within the connect
  timeout is DEAD_OBJECT; a refusal is the HAL error the server sent.
- Every RPC carries a fresh ``x-request-id`` (and ``nnhal-device`` when a device was
  named) and goes through :meth:`AioSession.call`, which maps a transport failure with
  :func:`~nnhal.client.remote.transport.map_rpc_error` and declares the session dead on
  DEAD_OBJECT.
- Death (DESIGN §4): the session stream ending or breaking, or the channel leaving READY
  (a killed server within milliseconds, a frozen one through keepalive within
  ``DEATH_DETECTION_BOUND_S``) ends the session once; every call awaiting an answer then
  resolves with DEAD_OBJECT at once (each call races its RPC against the session's end),
  and later calls fail with DEAD_OBJECT without touching the network. A server that
  announced a drain is reported as :data:`~nnhal.client.remote.DRAINING`, and its end
  leaves each awaiting call up to :data:`~nnhal.client.remote.monitor.DRAIN_NOTIFY_GRACE_S`
  to read the status its own stream delivers (the server sends one before it goes:
  DEVICE_UNAVAILABLE, or the result) before it resolves with DEAD_OBJECT — the sync
  client's rule (:mod:`nnhal.client.remote.monitor`).
- Cancelling a task that awaits a call cancels its RPC: the server ends the job and gives
  back what it held (``grpc.aio`` cancels a call whose read is cancelled). A preparation is
  the exception (the HAL cannot cancel one): it runs to its end and the model it makes is
  released (:meth:`spawn`).
- ``close`` ends the session (the server releases what it created); calls still awaiting
  an answer resolve with GENERAL_FAILURE, later ones too.

Every coroutine here runs on the event loop that opened the session.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import grpc
import grpc.aio

from nnhal.client import steps
from nnhal.client.faults import current_fault_scope
from nnhal.client.outcome import result_of
from nnhal.client.remote import DRAINING, calls, hidl, monitor as drain_rules
from nnhal.client.remote.aio_burst_stream import AioBurstStream
from nnhal.client.remote.aio_samehost import AioSameHostQueue
from nnhal.client.remote.encoded import Answer, Framed
from nnhal.client.remote.messages import (
    ExecutionOptions,
    PreparedRef,
    check_launch,
    execute_request_bytes,
    notify_of,
    prepared_of,
    raise_for_status,
)
from nnhal.client.remote.samehost import SameHostQueue
from nnhal.client.remote.transport import (
    BURST_STREAM_TIMEOUT,
    DEFAULT_CALL_TIMEOUT,
    SESSION_STREAM_TIMEOUT,
    Metadata,
    Stubs,
    TlsConfig,
    channel_options,
    grpc_timeout,
    map_rpc_error,
    new_request_id,
    remaining_time,
    tag_request_id,
    target_of,
)
from nnhal.core import fastanswer, telemetry, wire_session
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, GeneralFailure, HalError, InvalidArgument
from nnhal.core.fault_scope import METADATA_KEY as FAULT_SCOPE_KEY
from nnhal.core.protocol import DEVICE_METADATA, REQUEST_ID_METADATA
from nnhal.core.types import ExecutionResult, RequestArgument
from nnhal.proto import service_pb2 as spb

T = TypeVar("T")

_SYNC = "executeSynchronously_1_3"


def open_aio_channel(address: str, options: list[tuple[str, int]], tls: TlsConfig | None) -> grpc.aio.Channel:
    """An asyncio channel to ``address``: TLS with ``tls`` on TCP, plaintext otherwise (and on
    unix sockets) — the choices of :func:`nnhal.client.remote.transport.open_channel`."""
    target = target_of(address)
    if tls is None or target.startswith("unix:"):
        return grpc.aio.insecure_channel(target, options=options)
    all_options: list[tuple[str, int | str]] = [*options, *tls.options()]
    return grpc.aio.secure_channel(target, tls.credentials(), options=all_options)


async def read_notify(stream: Any, what: str) -> Any:
    """The notify message of a launch / notify / end stream (DESIGN §2); the asyncio form of
    :func:`nnhal.client.remote.messages.notify_of`."""
    launch = await stream.read()
    if launch is grpc.aio.EOF:
        raise GeneralFailure(f"{what}: the stream ended without a launch status")
    check_launch(launch, what)
    event = await stream.read()
    if event is grpc.aio.EOF:
        raise GeneralFailure(f"{what}: the stream ended without a notify")
    return event.notify  # the server ends the stream after it; the call needs no more reading


class AioSession:
    """One asyncio channel and session. Open with :meth:`open`, end with :meth:`close`."""

    def __init__(self, address: str, channel: grpc.aio.Channel, device: str | None) -> None:
        self.address = address
        self._channel = channel
        self.stubs = Stubs(channel)  # type: ignore[arg-type]  # the generated stubs accept either channel
        self._device_md: Metadata = ((DEVICE_METADATA, device),) if device else ()
        self.session_id = ""
        self.device_name = ""
        self.feature_level = 0
        self.protocol_version = 0
        self.last_request_id = ""
        self._draining = False
        self._closed = False
        #: Set (once) when the session ends: ``_end_error`` is what awaiting calls raise.
        self._ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._end_error: HalError | None = None
        self._session_call: Any = None
        self._tasks: list[asyncio.Task[None]] = []
        #: The same-host execution queue (None: every call takes gRPC); set by the session's first event.
        self._queue: AioSameHostQueue | None = None
        #: Whether the server offers this session the same-host fast path (its first event).
        self.fast_path = False
        #: Best-effort clean-ups started by :meth:`spawn`, held until they end.
        self._spawned: set[asyncio.Task[Any]] = set()

    @classmethod
    async def open(
        cls,
        address: str,
        client_name: str,
        connect_timeout: float,
        keepalive_ms: int | None,
        tls: TlsConfig | None,
        device: str | None,
    ) -> AioSession:
        opts = channel_options() if keepalive_ms is None else channel_options(keepalive_ms, keepalive_ms)
        self = cls(address, open_aio_channel(address, opts, tls), device)
        try:
            await self._start(client_name, connect_timeout)
        except BaseException:
            await self._shutdown()
            raise
        if device and self.device_name != device:  # a one-device server routes every call to it
            await self.close()
            raise InvalidArgument(f"the server at {address} has no device named {device!r} (only {self.device_name!r})")
        return self

    async def _start(self, client_name: str, connect_timeout: float) -> None:
        call = self.stubs.device.openSession(
            spb.OpenSessionRequest(client_name=client_name, protocol_version=wire_session.PROTOCOL_VERSION),
            wait_for_ready=True,
            timeout=SESSION_STREAM_TIMEOUT,
            metadata=self.metadata(),
        )
        self._session_call = call
        try:
            first = await asyncio.wait_for(call.read(), connect_timeout)
        except asyncio.TimeoutError:
            raise DeadObject(f"no nnhal server answered at {self.address} within {connect_timeout} s") from None
        except grpc.RpcError as err:
            raise map_rpc_error(err, what="openSession") from err
        if first is grpc.aio.EOF:
            raise DeadObject(f"the nnhal server at {self.address} ended the session at once")
        refusal = wire_session.refusal_of(first)
        if refusal is not None:
            raise refusal
        # The protocol version the session speaks (1: a server older than the handshake).
        self.protocol_version = wire_session.version_of(first.protocol_version)
        self.session_id = first.session
        self.device_name = first.device_name
        self.feature_level = int(first.feature_level)
        self._draining = bool(first.draining)
        self.fast_path = bool(first.shm_dir and first.capabilities.fast_path)
        # Traced calls keep gRPC, as on the sync client: the queue carries no trace context.
        if self.fast_path and SameHostQueue.ENABLED and not telemetry.enabled():
            self._queue = AioSameHostQueue(self)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read_session(call)), loop.create_task(self._watch_channel())]

    # -- death -------------------------------------------------------------------------------
    async def _read_session(self, call: Any) -> None:
        try:
            while (event := await call.read()) is not grpc.aio.EOF:
                if event.draining:
                    self._draining = True
            reason = "the server ended the session"
        except grpc.RpcError as err:
            reason = f"the session stream broke ({map_rpc_error(err, what='openSession').message})"
        except asyncio.CancelledError:
            return
        self.declare_dead(reason)

    async def _watch_channel(self) -> None:
        """A killed server shows as the channel leaving READY within milliseconds; a frozen one
        when keepalive gives up."""
        state = self._channel.get_state()
        try:
            while True:
                if state != grpc.ChannelConnectivity.READY:
                    self.declare_dead(f"the connection to the server was lost ({state.name})")
                    return
                await self._channel.wait_for_state_change(state)
                state = self._channel.get_state()
        except asyncio.CancelledError:
            return

    def declare_dead(self, reason: str) -> None:
        """End the session with DEAD_OBJECT (once; nothing after ``close``)."""
        if self._ended.done():
            return
        if self._draining:
            reason = f"{DRAINING} ({reason})"
        self._end(DeadObject(f"nnhal server at {self.address}: {reason}"))

    def _end(self, error: HalError) -> None:
        self._end_error = error
        self._ended.set_result(None)

    @property
    def dead(self) -> bool:
        return isinstance(self._end_error, DeadObject)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def draining(self) -> bool:
        return self._draining

    def check(self, what: str = "call") -> None:
        """Raise DEAD_OBJECT if the server is known dead, GENERAL_FAILURE once closed."""
        if self._end_error is not None:
            raise type(self._end_error)(f"{what}: {self._end_error.message}")

    # -- the one call path ---------------------------------------------------------------------
    def call_ids(self) -> tuple[str, str]:
        """A new call's fresh request id, now the session's last, and the fault scope it is made
        in ("" when none: ``client.faults.fault_scope``): what its metadata carries
        (:meth:`metadata`), or a same-host packet's tag."""
        rid = self.last_request_id = new_request_id()
        return rid, current_fault_scope() or ""

    def metadata(self) -> Metadata:
        """The metadata of a new call (:meth:`call_ids`): its request id, the device's name if
        one was asked for, and its fault scope, if any."""
        rid, scope = self.call_ids()
        extra = ((FAULT_SCOPE_KEY, scope),) if scope else ()
        return ((REQUEST_ID_METADATA, rid), *self._device_md, *extra)

    async def call(
        self, what: str, had_deadline: bool, fn: Callable[[Metadata], Awaitable[T]], md: Metadata | None = None
    ) -> T:
        """``await fn(metadata)``, raced against the session's end; its transport failure raised
        as the HAL error (a death declared), tagged with the call's request id. ``md``: the
        metadata of a stream the call continues (a burst), else a new call's."""
        self.check(what)
        md = md or self.metadata()
        rid = md[0][1]
        task: asyncio.Future[T] = asyncio.ensure_future(fn(md))
        try:
            await asyncio.wait((task, self._ended), return_when=asyncio.FIRST_COMPLETED)
            if not task.done() and self._draining and self.dead:
                # A draining server notified its launched jobs before it went; the session
                # stream's end may just have been read first (module docstring).
                await asyncio.wait((task,), timeout=drain_rules.DRAIN_NOTIFY_GRACE_S)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not task.done():  # the session ended first: release this waiter now
            task.cancel()
            assert self._end_error is not None
            raise tag_request_id(type(self._end_error)(f"{what}: {self._end_error.message}"), rid)
        try:
            return task.result()
        except grpc.RpcError as err:
            mapped = map_rpc_error(err, had_deadline=had_deadline, what=what)
            if isinstance(mapped, DeadObject):
                self.declare_dead(mapped.message)
            raise tag_request_id(mapped, rid) from err
        except HalError as err:
            raise tag_request_id(err, rid) from None
        except asyncio.CancelledError:  # grpc cancelled the call under us (channel closed)
            raise tag_request_id(GeneralFailure(f"{what}: the call was cancelled"), rid) from None

    def failure(self, err: grpc.RpcError | HalError, what: str, had_deadline: bool, rid: str) -> HalError:
        """What a call awaited outside :meth:`call` (the same-host queue's planned calls) raises
        for ``err``: the session's end error when the session ended meanwhile (what the race
        of :meth:`call` gives), else ``err`` mapped as :meth:`call` maps it (a death declared);
        tagged with the call's request id."""
        end = self._end_error
        if end is not None:
            return tag_request_id(type(end)(f"{what}: {end.message}"), rid)
        if isinstance(err, HalError):
            return tag_request_id(err, rid)
        mapped = map_rpc_error(err, had_deadline=had_deadline, what=what)
        if isinstance(mapped, DeadObject):
            self.declare_dead(mapped.message)
        return tag_request_id(mapped, rid)

    @property
    def same_host(self) -> AioSameHostQueue | None:
        """The session's same-host execution queue (None: its calls take gRPC)."""
        return self._queue

    async def unary(self, rpc: Any, request: Any, what: str, timeout: float | None = None) -> Any:
        """One unary RPC through :meth:`call` (``timeout`` None: the default call bound). An
        execution form goes through the same-host queue when the session has one
        (:mod:`nnhal.client.remote.aio_samehost`)."""
        queue = self._queue
        if queue is not None and queue.carries(rpc):
            carried = await queue.call(rpc, request, what, timeout)
            if carried is not None:
                return carried[0]
        limit = DEFAULT_CALL_TIMEOUT if timeout is None else timeout
        return await self.call(what, timeout is not None, lambda md: rpc(request, timeout=limit, metadata=md))

    async def checked(
        self, rpc: Any, request: Any, what: str, prefix: bool = True, timeout: float | None = None
    ) -> Any:
        """:meth:`unary`, then its in-band status raised as the HalError (tagged with the request id)."""
        msg = await self.unary(rpc, request, what, timeout)
        try:
            raise_for_status(msg, what if prefix else "")
        except HalError as err:
            raise tag_request_id(err, self.last_request_id) from None
        return msg

    async def notify(self, rpc: Any, request: Any, what: str, timeout: float | None) -> Any:
        """A launch / notify / end RPC (DESIGN §2) through :meth:`call`: its notify message
        (through the same-host queue when it carries the form)."""
        queue = self._queue
        if queue is not None and queue.carries(rpc):
            events = await queue.call(rpc, request, what, timeout)
            if events is not None:
                return notify_of(events, what)
        limit = DEFAULT_CALL_TIMEOUT if timeout is None else timeout

        async def run(md: Metadata) -> Any:
            return await read_notify(rpc(request, timeout=limit, metadata=md), what)

        return await self.call(what, timeout is not None, run)

    # -- the HAL calls (nnhal.client.remote.calls, driven on this transport) ---------------------
    async def run(self, call: calls.Call[T]) -> T:
        """Drive a HAL call (:mod:`nnhal.client.remote.calls`) on this session's one call path."""
        return await steps.drive_async(call, self._perform)

    async def _perform(self, step: calls.Step) -> Any:
        if isinstance(step, calls.Unary):
            rpc = getattr(getattr(self.stubs, step.service), step.method)
            if step.checked:
                return await self.checked(rpc, step.request, step.label, step.prefix, step.timeout)
            return await self.unary(rpc, step.request, step.label, step.timeout)
        if isinstance(step, calls.Execute):
            queue = self._queue
            if queue is not None:
                carried = await queue.execute(step.handle, step.request, step.options)
                if carried is not None:
                    return carried
            return await self.run(calls.execute(step.session, step.handle, step.request, step.options))
        return await self.launch(step)

    async def execute_encoded(
        self,
        handle: str,
        inputs: tuple[RequestArgument, ...],
        outputs: tuple[RequestArgument, ...],
        pools: Sequence[Any],
        options: ExecutionOptions,
        framed: Framed | None = None,
    ) -> Any:  # ExecutionResult | None; with ``framed``, Answer | None
        """executeSynchronously_1_3 of the request of these arguments and pools, its message
        written as bytes and its answer read from them (:mod:`.encoded`), for a layout the
        caller runs again and again — the sync session's ``execute_encoded``, ``framed`` (with
        ``pools`` the parts of its first pool's data, the answer read apart) included.
        Transport failures raise; HAL errors are in the result. None — nothing sent — when it
        takes another way (the same-host queue, a pool that is not inline): the caller then runs
        :func:`~nnhal.client.remote.calls.execute`."""
        if self._queue is not None:
            return None
        if framed is not None:
            remaining = remaining_time(options.timeout, options.deadline_at)
            raw = framed.write(pools, options.measure, remaining, options.loop_timeout_ns, options.profile)
            timeout = grpc_timeout(remaining)
        else:
            written = execute_request_bytes(self.session_id, handle, inputs, outputs, pools, options)
            if written is None:
                return None
            raw, timeout = written
        answer: Answer | None = await self.unary(self.stubs.execute_encoded, raw, _SYNC, timeout)
        if answer is None:  # grpc.aio hands back None for an answer its deserializer failed to read
            raise tag_request_id(GeneralFailure(f"{_SYNC}: protocol error: an unreadable answer"), self.last_request_id)
        return answer if framed is not None else fastanswer.whole(answer)

    async def launch(self, step: calls.Notify) -> Any:
        """A launch / notify RPC of any form (:class:`~nnhal.client.remote.calls.Notify`): its
        notify message, or the launch's / the transport's HalError raised."""
        rpc = getattr(getattr(self.stubs, step.service), step.method)
        return await self.notify(rpc, step.request, step.label, step.timeout)

    async def prepare(self, step: calls.Notify) -> PreparedRef:
        """A preparation of any form (a launch, then exactly one notify): the prepared model's
        reference, or the HalError the preparation ended with.

        The prepare RPC runs to its notify even when the caller is cancelled (a HAL
        preparation cannot be cancelled): the model it then makes, which nobody owns, is
        released — the sync client's discard of a prepared model whose waiter was released."""
        rpc_task = asyncio.ensure_future(self.launch(step))
        try:
            notify = await asyncio.shield(rpc_task)
        except asyncio.CancelledError:
            rpc_task.add_done_callback(self._discard)
            raise
        status, message, ref = prepared_of(notify)
        if status != ErrorStatus.NONE or ref is None:
            raise tag_request_id(HalError.of(status, message), self.last_request_id)
        return ref

    def _discard(self, rpc_task: asyncio.Future[Any]) -> None:
        if rpc_task.cancelled() or rpc_task.exception() is not None:
            return  # no model was made, or the session ended (and released it)
        _, _, ref = prepared_of(rpc_task.result())
        if ref is not None:
            self.spawn(self.run(calls.release_prepared_model(self.session_id, ref.handle)))

    async def execute_launched(self, step: calls.Notify) -> ExecutionResult:
        """An asynchronous execution of any form; every failure comes back as a result carrying its status."""
        return await self.run(result_of(_read_result(step)))

    def open_burst(self) -> AioBurstStream:
        """configureExecutionBurst: a stream for one burst; DEAD_OBJECT at once for a server known dead."""
        self.check("configureExecutionBurst")
        md = self.metadata()
        # Requests written as serialized BurstRequests, answers read as ExecutionResults
        # (``messages.burst_request``, ``encoded.burst_answered``), as the sync session's.
        call = self.stubs.burst_encoded(timeout=BURST_STREAM_TIMEOUT, metadata=md)
        return AioBurstStream(self, call, md)

    def spawn(self, cleanup: Coroutine[Any, Any, Any]) -> None:
        """Run ``cleanup`` (a release nobody awaits) in the background; its HalError is dropped
        (the session's end releases everything anyway); ``close`` cancels what is left."""

        async def quietly() -> None:
            try:
                await cleanup
            except HalError:
                pass

        task = asyncio.get_running_loop().create_task(quietly(), name="nnhal-cleanup")
        self._spawned.add(task)
        task.add_done_callback(self._spawned.discard)

    # -- lifetime -------------------------------------------------------------------------------
    async def close(self) -> None:
        """End the session: the server releases every object it created. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if not self._ended.done():
            self._end(GeneralFailure("the device proxy is closed"))
        await self._shutdown()

    async def _shutdown(self) -> None:
        if self._queue is not None:
            self._queue.close()
            self._queue = None  # it holds this session: no cycle left for the collector
        tasks = [*self._tasks, *self._spawned]
        for task in tasks:
            task.cancel()
        if self._session_call is not None:
            self._session_call.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # Done tasks keep their coroutines, whose frames hold this session: drop them so the
        # channel goes with its last reference. grpc.aio stops its poller, which is bound to
        # this event loop, only when its last channel is collected; one left for the garbage
        # collector would disturb the next loop of the process.
        self._tasks, self._session_call = [], None
        self._spawned.clear()
        await self._channel.close()


def _read_result(step: calls.Notify) -> calls.Call[ExecutionResult]:
    return hidl.result_of((yield step))

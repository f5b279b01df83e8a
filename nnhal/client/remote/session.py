"""RemoteSession: the HAL methods of one session to an nnhal server.

:class:`~nnhal.client.remote.channel.SessionChannel` holds the channel, the session
stream, the death monitor and the one call path (``invoke``: transport failures as HAL
errors, a death declared on DEAD_OBJECT; request ids; drains). RemoteSession adds the
IDevice, IPreparedModel, burst and IBuffer calls: its public methods take and return
canonical types (:mod:`nnhal.core.types`), converted with the ``nnhal.core.wire*`` modules.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import grpc

from nnhal.client.callbacks import Callback
from nnhal.client.faults import Fault
from nnhal.client.outcome import failed_result
from nnhal.client.remote import calls, encoded, hidl
from nnhal.client.remote.channel import SessionChannel
from nnhal.client.remote.messages import (
    BurstStream,
    ExecutionOptions,
    PreparedRef,
    burst_request,
    drain,
    execute_request,
    execute_request_bytes,
    prepared_of,
)
from nnhal.client.remote.transport import (
    BURST_STREAM_TIMEOUT,
    DEFAULT_CALL_TIMEOUT,
    GC_RELEASE_TIMEOUT,
    grpc_timeout,
    remaining_time,
)
from nnhal.core import fastanswer, wire_result, wire_stream
from nnhal.core.enums import DeviceStatus, DeviceType, ErrorStatus
from nnhal.core.errors import GeneralFailure, HalError, InvalidArgument
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
    RequestArgument,
)
from nnhal.proto import service_pb2 as spb

_SYNC = "executeSynchronously_1_3"

T = TypeVar("T")


def _deliver_notify(notify: Any, cb: Callback[Any]) -> None:
    cb.notify(ErrorStatus.NONE, notify)


class RemoteSession(SessionChannel):
    """One channel and session to an nnhal server. Thread-safe. ``close`` ends the session:
    the server then releases every object the session created.

    Raises DeadObject if no server answers within ``connect_timeout`` seconds, or the
    HAL error the server refused the session with (e.g. RESOURCE_EXHAUSTED_TRANSIENT)."""

    # -- IDevice (the calls of nnhal.client.remote.calls, on this transport) ----------------
    def capabilities(self) -> Capabilities:
        return self.run(calls.capabilities(self._session_id))

    def version_string(self) -> str:
        return self.run(calls.version_string(self._session_id))

    def device_type(self) -> DeviceType:
        return self.run(calls.device_type(self._session_id))

    def supported_extensions(self) -> tuple[Extension, ...]:
        return self.run(calls.supported_extensions(self._session_id))

    def number_of_cache_files_needed(self) -> tuple[int, int]:
        return self.run(calls.number_of_cache_files_needed(self._session_id))

    def status(self) -> DeviceStatus:
        return self.run(calls.status(self._session_id))

    def supported_operations(self, model: Model) -> list[tuple[bool, str]]:
        return self.run(calls.supported_operations(self._session_id, model))

    def stats(self) -> tuple[dict[str, int], dict[str, int]]:
        """Server-wide object counts (sessions, prepared_models, ...) and configured limits."""
        return self.run(calls.stats(self._session_id))

    def set_faults(self, prepare_delay_ms: int, execute_delay_ms: int) -> None:
        self.run(calls.set_faults(self._session_id, prepare_delay_ms, execute_delay_ms))

    def inject_faults(self, faults: Sequence[Fault], clear: bool = False) -> None:
        """Add server-wide faults (``nnhal.client.faults``); ``clear`` removes every fault and this
        session's delays first. INVALID_ARGUMENT when the server refuses them."""
        self.run(calls.inject_faults(self._session_id, faults, clear))

    def launch(
        self,
        step: calls.Notify,
        deliver: Callable[[Any, Callback[T]], None],
        failure: Callable[[HalError], T | None],
        thread_name: str,
    ) -> Callback[T]:
        """Start the launch / notify RPC of an asynchronous HAL call (any form) on this
        session's one call path (:meth:`stream`): ``deliver`` turns its notify into the
        callback's result, a failure reaches the callback with ``failure(err)``."""
        rpc = getattr(getattr(self._stubs, step.service), step.method)
        return self.stream(rpc, step.request, step.label, step.timeout, deliver, failure, thread_name)

    def launch_prepare(self, step: calls.Notify) -> Callback[PreparedRef]:
        """A preparation of any form: the callback delivers the prepared model's reference
        exactly once (a model whose waiter was already released is discarded)."""

        def deliver(notify: Any, cb: Callback[PreparedRef]) -> None:
            status, message, ref = prepared_of(notify)
            if ref is None:
                cb.notify(status, None, message)
            elif not cb.notify(status, ref):  # the waiter was already released (death): nobody owns it
                self.discard_prepared_model(ref.handle)

        return self.launch(step, deliver, lambda _err: None, "nnhal-prepare")

    def launch_execute(self, step: calls.Notify) -> Callback[ExecutionResult]:
        """An asynchronous execution of any form: the callback delivers the result exactly
        once (a transport failure as a result carrying its status; a death with no value)."""

        def deliver(notify: Any, cb: Callback[ExecutionResult]) -> None:
            result = hidl.result_of(notify)
            cb.notify(result.status, result, result.message)

        return self.launch(step, deliver, failed_result, "nnhal-execute")

    def _perform(self, step: calls.Step) -> Any:
        """A step of a call: a unary RPC, an execution (:meth:`execute`'s route), or a launch
        whose notify is waited for here (bounded by the default call timeout)."""
        if isinstance(step, calls.Execute):
            return self.execute(step.handle, step.request, step.options)
        if isinstance(step, calls.Notify):
            cb: Callback[Any] = self.launch(step, _deliver_notify, lambda _e: None, "nnhal-call")
            if not cb.wait(DEFAULT_CALL_TIMEOUT):
                raise GeneralFailure(f"{step.label}: no result within {DEFAULT_CALL_TIMEOUT} s")
            if cb.value is None:
                raise HalError.of(cb.status, cb.message)
            return cb.value
        return super()._perform(step)

    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: Sequence[str],
        input_roles: Sequence[BufferRole],
        output_roles: Sequence[BufferRole],
    ) -> tuple[str, int]:
        """IDevice::allocate: the new buffer's handle and token."""
        return self.run(calls.allocate(self._session_id, desc, prepared_models, input_roles, output_roles))

    # -- IPreparedModel -----------------------------------------------------------------------
    def _execute_message(
        self, handle: str, request: Request, options: ExecutionOptions
    ) -> tuple[spb.ExecuteRequest, float | None]:
        return execute_request(self._session_id, handle, request, options)

    def execute(self, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult:
        """executeSynchronously_1_3. Transport failures raise; HAL errors are in the result.

        A request with a large inline pool (``wire_stream.worth_streaming``) travels as an
        ``executeStreamed`` instead, its pools in chunks (``streamed.proto``), unless the
        server has no such service (then, from the first refusal on, in one message); its
        large output pools come back as read-only memoryviews. On the same host it takes the
        session's queue (:mod:`.samehost`) when it can."""
        queue = self._queue
        if queue is not None:
            carried = queue.execute(handle, request, options)
            if carried is not None:
                return carried
        if self._streams and wire_stream.worth_streaming(request):
            result = self._execute_streamed(handle, request, options)
            if result is not None:
                return result
        # ``calls.execute``'s one step, made here without driving a generator for it.
        msg, timeout = self._execute_message(handle, request, options)
        answer = self.unary(self._stubs.prepared_model.executeSynchronously_1_3, msg, _SYNC, timeout)
        return wire_result.execution_result_from(answer)

    def execute_encoded(
        self,
        handle: str,
        inputs: tuple[RequestArgument, ...],
        outputs: tuple[RequestArgument, ...],
        pools: Sequence[Any],
        options: ExecutionOptions,
        sizes: tuple[tuple[int, int], ...] | None = None,
    ) -> ExecutionResult | None:
        """:meth:`execute` of the request of these arguments and pools, its message written
        as bytes (:mod:`.encoded`) for a layout the caller runs again and again; None — nothing
        sent — when it takes another way there (the same-host queue, a streamed execution, a
        pool that is not inline): the caller then calls :meth:`execute`. ``sizes``: each pool's
        (data bytes, declared size) when the caller knows them — every pool inline, none worth
        streaming (``wire_stream.pools_worth_streaming``): a numpy plan's, found once — not
        found again. A numpy plan's layout, whose message frame is kept, takes
        :meth:`execute_framed` instead (the answer read apart)."""
        if self._queue is not None:
            return None
        if sizes is None and wire_stream.pools_worth_streaming(pools):
            return None
        written = execute_request_bytes(self._session_id, handle, inputs, outputs, pools, options, False, sizes)
        if written is None:
            return None
        return fastanswer.whole(self.unary(self._stubs.execute_encoded, written[0], _SYNC, written[1]))

    def execute_framed(
        self,
        framed: encoded.Framed,
        parts: Sequence[Any],
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
        profile: bool = False,
    ) -> Any:
        """:meth:`execute_encoded` of a numpy plan's layout (``framed``: its frame, ``parts``: its
        first pool's data), its options given as they are (no options made for the call): the
        answer as the layout reads it (``encoded.Framed.read``: what its ``made`` made of an
        answer alike the kept one, else read apart), or None (nothing sent) when the session has
        a same-host queue. A numpy plan's planned call (``PreparedModel._sender``), through
        :meth:`unary`, the session's one call path."""
        if self._queue is not None:
            return None
        remaining = remaining_time(timeout, deadline_at)
        raw = framed.write(parts, measure, remaining, loop_timeout_ns, profile)
        rpc = framed.rpc
        if rpc is None:  # the layout's first call: its call, reading with the layout's reader
            rpc = framed.rpc = self._stubs.execute_reading(framed.read)
        return self.unary(rpc, raw, _SYNC, grpc_timeout(remaining))

    #: False once the server answered that it has no StreamedExecution service (an older server).
    _streams = True

    def _execute_streamed(self, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult | None:
        """executeStreamed; None when the server does not offer it."""
        what = "executeStreamed"
        head_request, chunked = wire_stream.split_request(request)
        head, timeout = self._execute_message(handle, head_request, options)
        self.check(what)
        md = self._metadata()
        rpc = self._stubs.streamed.executeStreamed

        def call() -> ExecutionResult | None:
            messages = wire_stream.request_messages(head, chunked)
            try:
                return wire_stream.read_result(
                    rpc(messages, timeout=timeout or DEFAULT_CALL_TIMEOUT, metadata=md), request
                )
            except grpc.RpcError as err:
                if err.code() == grpc.StatusCode.UNIMPLEMENTED:  # type: ignore[attr-defined]
                    self._streams = False
                    return None
                raise
            except InvalidArgument as err:  # the server's answer broke the stream's rules
                raise GeneralFailure(f"{what}: protocol error: {err.message}") from err

        return self.invoke(call, what, timeout is not None, md[0][1])

    def execute_fenced(
        self,
        handle: str,
        request: Request,
        wait_for: Sequence[str],
        options: ExecutionOptions,
        timeout_after_fence_ns: int,
    ) -> tuple[str, str]:
        """executeFenced: the sync fence and the fenced-execution callback's names."""
        return self.run(
            calls.execute_fenced(self._session_id, handle, request, wait_for, options, timeout_after_fence_ns)
        )

    def fenced_info(self, callback: str, wait: bool, timeout: float) -> FencedExecutionInfo:
        """IFencedExecutionCallback::getExecutionInfo (with ``wait``: once the fence signalled)."""
        return self.run(calls.fenced_info(self._session_id, callback, wait, timeout))

    def release_prepared_model(self, handle: str) -> None:
        """Release a prepared model now; raises its HalError (DEAD_OBJECT for a dead server)."""
        self.run(calls.release_prepared_model(self._session_id, handle))

    def discard_prepared_model(self, handle: str) -> None:
        """Best-effort release of a prepared model (garbage collection, one nobody owns)."""
        self.discard(calls.release_prepared_model(self._session_id, handle, GC_RELEASE_TIMEOUT))

    def discard(self, release: calls.Call[None]) -> None:
        """Best-effort ``release`` (garbage collection): nothing to do once the session is
        gone; its HalError dropped (the session's end releases the object anyway)."""
        if self._closed or self._monitor.dead:
            release.close()
            return
        try:
            self.run(release)
        except HalError:
            pass

    # -- bursts -------------------------------------------------------------------------------
    def open_burst(self) -> BurstStream:
        """configureExecutionBurst: a stream for ``burst_answered`` until ``close_burst``."""
        self.check("configureExecutionBurst")
        requests: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        md = self._metadata()
        # The requests go as serialized BurstRequests (``burst_answered`` writes them); the
        # answers come read apart (``encoded.burst_answered``).
        responses = self._stubs.burst_encoded(iter(requests.get, None), timeout=BURST_STREAM_TIMEOUT, metadata=md)
        return BurstStream(requests, responses, md[0][1])

    def burst_answered(
        self, stream: BurstStream, handle: str, request: Request, options: ExecutionOptions
    ) -> encoded.Answer:
        """One execution on the burst stream, its answer read apart (``encoded.Answer``: no
        result made for an answer like one read before; ``fastanswer.whole`` makes it whole);
        transport failures come back in it."""
        return self.burst_sent(stream, burst_request(self.burst_requests(stream, handle), request, options))

    def burst_requests(self, stream: BurstStream, handle: str) -> encoded.Requests:
        """How ``stream``'s requests of prepared model ``handle`` are written (its
        ``encoded.Requests``, made at its first execution and kept: a burst's one writer)."""
        written = stream.written
        if written is None or written.handle is not handle:  # the stream's, mostly: by identity
            written = stream.written = encoded.Requests.of(written, self._session_id, handle)
        return written

    def burst_sent(self, stream: BurstStream, data: bytes) -> encoded.Answer:
        """The exchange of one execution's serialized BurstRequest ``data`` on the burst stream
        (:meth:`burst_answered`'s; a burst that writes its requests itself calls it with them):
        its answer read apart, transport failures in it."""
        self._ids.last = stream.request_id
        with stream.lock:
            self._monitor.check()
            stream.requests.put(data)
            # ``invoke``'s steps, without a partial of the read made for it.
            try:
                response = next(stream.responses, None)
            except grpc.RpcError as err:
                return fastanswer.apart_of(failed_result(self.failed(err, "burst", False, "")))
            except HalError as err:
                return fastanswer.apart_of(failed_result(err))
        if response is None:  # the server ended the stream: a refusal past its cap, or a drain
            return fastanswer.apart_of(
                ExecutionResult(
                    ErrorStatus.GENERAL_FAILURE,
                    "the burst stream ended (refused or closed by the server); open a new burst",
                )
            )
        answer: encoded.Answer = response  # read by the stream's deserializer (``encoded.burst_answered``)
        return answer

    def close_burst(self, stream: BurstStream) -> None:
        stream.requests.put(None)
        try:
            self.invoke(lambda: drain(stream.responses), "burst", had_deadline=False)
        except HalError:
            pass  # a stream that broke holds nothing to release

    # -- IBuffer ----------------------------------------------------------------------------------
    def buffer_copy_from(self, handle: str, src: MemoryPool, dimensions: Sequence[int]) -> None:
        self.run(calls.buffer_copy_from(self._session_id, handle, src, dimensions))

    def buffer_copy_to(self, handle: str, dst: MemoryPool) -> bytes:
        """IBuffer::copyTo; an inline ``dst`` comes back as the returned bytes."""
        return self.run(calls.buffer_copy_to(self._session_id, handle, dst))

    def release_buffer(self, handle: str) -> None:
        if self._closed or self._monitor.dead:
            return  # the session's end released it
        self.run(calls.release_buffer(self._session_id, handle))

"""The prepared-model proxy: executions of a model prepared on a remote device.

Two levels:
- ``execute`` / ``execute_async`` take numpy arrays and return numpy arrays;
  inputs travel in one inline pool, outputs come back in another.
- ``execute_request`` takes a canonical Request (any pools) and returns the raw
  outcome (status, output shapes, timing, returned inline pools).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import grpc
import numpy as np

from nnhal.client.callbacks import Callback
from nnhal.client.remote import DEFAULT_CALL_TIMEOUT, map_rpc_error
from nnhal.core import wire
from nnhal.core.enums import ErrorStatus, MeasureTiming
from nnhal.core.errors import DeadObject, GeneralFailure, HalError, InvalidArgument
from nnhal.core.operand_types import DTYPE, INFO
from nnhal.core.types import Model, Operand, OutputShape, Request, Timing
from nnhal.proto import service_pb2 as spb

if TYPE_CHECKING:
    from nnhal.client.device import Device


@dataclass
class ExecutionOutcome:
    status: ErrorStatus
    message: str = ""
    output_shapes: tuple[OutputShape, ...] = ()
    timing: Timing = field(default_factory=Timing)
    #: Returned contents of inline pools that hold outputs, by pool index.
    output_pools: dict[int, bytes] = field(default_factory=dict)
    #: Decoded outputs (``execute`` / ``execute_async`` only).
    outputs: list[np.ndarray] = field(default_factory=list)
    #: (operation type, count, total microseconds), slowest first, when profiled.
    profile: list[tuple[str, int, int]] = field(default_factory=list)

    def raise_for_status(self) -> None:
        if self.status != ErrorStatus.NONE:
            err = HalError.of(self.status, self.message)
            err.output_shapes = self.output_shapes  # type: ignore[attr-defined]
            raise err


ExecutionCallback = Callback[ExecutionOutcome]
_ALIGN = 64


def _outcome(msg: spb.ExecuteResult) -> ExecutionOutcome:
    return ExecutionOutcome(
        status=wire.error_status_from(msg.status),
        message=msg.message,
        output_shapes=wire.output_shapes_from(msg.output_shapes),
        timing=wire.timing_from(msg.timing),
        output_pools={p.pool_index: p.data for p in msg.output_pools},
        profile=[(p.operation, p.count, p.total_us) for p in msg.profile],
    )


class PreparedModel:
    """A remote IPreparedModel. Thread-safe. Release explicitly, with ``with``, or on GC."""

    def __init__(self, device: Device, handle: str, model: Model | None) -> None:
        self._device = device
        self.handle = handle
        self.model = model
        self.model_cache = b""
        self._released = False
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, PreparedModel._release_remote, weakref.ref(device), handle)

    # -- release ---------------------------------------------------------------
    @staticmethod
    def _release_remote(device_ref: Any, handle: str) -> None:
        device = device_ref()
        if device is None or device.monitor.dead or device._closed:
            return
        try:
            device.stubs.prepared_model.release(spb.ReleaseRequest(session=device.session, handle=handle), timeout=5.0)
        except grpc.RpcError:
            pass  # the session's end releases it anyway

    def release(self) -> None:
        """Release the server's object now (idempotent). Later executions: INVALID_ARGUMENT."""
        with self._lock:
            if self._released:
                return
            self._released = True
        self._finalizer.detach()
        self._device._forget(self)
        self._device.monitor.check()
        msg = self._device._unary(
            self._device.stubs.prepared_model.release,
            spb.ReleaseRequest(session=self._device.session, handle=self.handle),
            "release",
        )
        if msg.status != 0:
            raise HalError.of(wire.error_status_from(msg.status), msg.message)

    def __enter__(self) -> PreparedModel:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.release()
        except DeadObject:
            pass

    # -- requests --------------------------------------------------------------
    def _exec_msg(
        self,
        request: Request | spb.ExecuteRequest,
        measure: bool,
        timeout: float | None,
        deadline_at: float | None,
        loop_timeout_ns: int,
    ) -> tuple[spb.ExecuteRequest, float | None]:
        from nnhal.client.device import deadline_msg

        if isinstance(request, spb.ExecuteRequest):
            msg = request
        else:
            msg = spb.ExecuteRequest()
            wire.request_to(request, msg.request)
        msg.session = self._device.session
        msg.prepared_model = self.handle
        if measure:
            msg.measure = int(MeasureTiming.YES)  # type: ignore[assignment]
        msg.loop_timeout_ns = loop_timeout_ns
        return msg, deadline_msg(msg.deadline, timeout, deadline_at)

    def execute_request(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> ExecutionOutcome:
        """executeSynchronously_1_3 of a canonical Request; the status is in the outcome."""
        msg, grpc_timeout = self._exec_msg(request, measure, timeout, deadline_at, loop_timeout_ns)
        try:
            result = self._device._unary(
                self._device.stubs.prepared_model.executeSynchronously_1_3,
                msg,
                "executeSynchronously_1_3",
                grpc_timeout,
            )
        except HalError as err:
            return ExecutionOutcome(err.error_status, err.message)
        return _outcome(result)

    def execute_request_async(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> ExecutionCallback:
        """execute_1_3: returns at once; the callback delivers the outcome exactly once."""
        msg, grpc_timeout = self._exec_msg(request, measure, timeout, deadline_at, loop_timeout_ns)
        return self._async(msg, grpc_timeout, None)

    def _async(self, msg: spb.ExecuteRequest, grpc_timeout: float | None, decode: Any) -> ExecutionCallback:
        device = self._device
        cb: ExecutionCallback = Callback()
        device.monitor.check()
        device.monitor.register(cb)
        call = device.stubs.prepared_model.execute_1_3(msg, timeout=grpc_timeout or DEFAULT_CALL_TIMEOUT)

        def consume() -> None:
            try:
                events = iter(call)
                first = next(events)
                if first.WhichOneof("event") != "launch":
                    raise GeneralFailure("execute_1_3: protocol error: the first message was not the launch status")
                outcome = _outcome(next(events).notify)
                for _ in events:  # drain: the server ends the stream after the notify
                    pass
                if decode is not None and outcome.status == ErrorStatus.NONE:
                    outcome.outputs = decode(outcome)
                cb.notify(outcome.status, outcome, outcome.message)
            except grpc.RpcError as err:
                mapped = map_rpc_error(err, had_deadline=grpc_timeout is not None, what="execute_1_3")
                if isinstance(mapped, DeadObject):
                    device.monitor.declare_dead(mapped.message)
                cb.notify(mapped.error_status, ExecutionOutcome(mapped.error_status, mapped.message), mapped.message)
            except StopIteration:
                cb.notify(ErrorStatus.GENERAL_FAILURE, None, "execute_1_3: the stream ended without a notify")
            except HalError as err:
                cb.notify(err.error_status, None, err.message)

        threading.Thread(target=consume, name="nnhal-execute", daemon=True).start()
        return cb

    # -- numpy convenience ----------------------------------------------------
    def _io_operands(self) -> tuple[list[Operand], list[Operand]]:
        if self.model is None:
            raise InvalidArgument("this prepared model was made from a cache without its Model; use execute_request")
        main = self.model.main
        return [main.operands[i] for i in main.input_indexes], [main.operands[i] for i in main.output_indexes]

    def _numpy_request(
        self, inputs: Sequence[np.ndarray | None], output_sizes: Sequence[int] | None
    ) -> tuple[spb.ExecuteRequest, list[tuple[int, Operand]]]:
        in_ops, out_ops = self._io_operands()
        if len(inputs) != len(in_ops):
            raise InvalidArgument(f"the model has {len(in_ops)} inputs, {len(inputs)} given")
        msg = spb.ExecuteRequest()
        req = msg.request
        chunks: list[bytes] = []
        offset = 0
        for k, (value, op) in enumerate(zip(inputs, in_ops)):
            arg = req.inputs.add()
            if value is None:
                arg.has_no_value = True
                continue
            arr = np.ascontiguousarray(value, dtype=DTYPE[op.type])
            if INFO[op.type].is_tensor:
                if op.dimensions and len(op.dimensions) != arr.ndim:
                    raise InvalidArgument(f"input {k} has rank {arr.ndim}, the model says {len(op.dimensions)}")
                arg.dimensions.extend(arr.shape)
            data = arr.tobytes()
            pad = (-offset) % _ALIGN
            if pad:
                chunks.append(b"\0" * pad)
                offset += pad
            arg.location.pool_index = 0
            arg.location.offset = offset
            arg.location.length = len(data)
            chunks.append(data)
            offset += len(data)
        req.pools.add().inline.data = b"".join(chunks)
        layout: list[tuple[int, Operand]] = []
        out_offset = 0
        for k, op in enumerate(out_ops):
            if output_sizes is not None:
                size = output_sizes[k]
            elif not INFO[op.type].is_tensor:
                size = INFO[op.type].byte_size
            elif op.dimensions and 0 not in op.dimensions:
                size = INFO[op.type].byte_size * int(np.prod(op.dimensions))
            else:
                size = 1 << 16  # unknown shape: a first guess, grown on OUTPUT_INSUFFICIENT_SIZE
            arg = req.outputs.add()
            out_offset += (-out_offset) % _ALIGN
            arg.location.pool_index = 1
            arg.location.offset = out_offset
            arg.location.length = size
            layout.append((out_offset, op))
            out_offset += size
        req.pools.add().inline.size = max(out_offset, 1)
        return msg, layout

    @staticmethod
    def _decode(outcome: ExecutionOutcome, layout: list[tuple[int, Operand]]) -> list[np.ndarray]:
        data = outcome.output_pools.get(1, b"")
        outs: list[np.ndarray] = []
        for (offset, op), shape in zip(
            layout, outcome.output_shapes or [OutputShape(op.dimensions, True) for _, op in layout]
        ):
            dims = tuple(shape.dimensions)
            count = int(np.prod(dims)) if INFO[op.type].is_tensor else 1
            arr = np.frombuffer(data, dtype=DTYPE[op.type], count=count, offset=offset)
            outs.append(arr.reshape(dims) if INFO[op.type].is_tensor else arr.reshape(()))
        return outs

    def execute(
        self,
        inputs: Sequence[np.ndarray | None],
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
        profile: bool = False,
    ) -> ExecutionOutcome:
        """Synchronous execution on numpy arrays; raises the HalError it ends with.

        Outputs of unknown shape are retried once with the sizes the driver reported.
        ``profile`` asks the driver for time per operation type (``outcome.profile``)."""
        sizes: list[int] | None = None
        for _attempt in range(2):
            msg, layout = self._numpy_request(inputs, sizes)
            msg, grpc_timeout = self._exec_msg(msg, measure, timeout, deadline_at, loop_timeout_ns)
            msg.profile = profile
            result = self._device._unary(
                self._device.stubs.prepared_model.executeSynchronously_1_3,
                msg,
                "executeSynchronously_1_3",
                grpc_timeout,
            )
            outcome = _outcome(result)
            if outcome.status == ErrorStatus.OUTPUT_INSUFFICIENT_SIZE and outcome.output_shapes and sizes is None:
                sizes = [
                    max(1, INFO[op.type].byte_size * int(np.prod(s.dimensions)))
                    for (_, op), s in zip(layout, outcome.output_shapes)
                ]
                continue
            outcome.raise_for_status()
            outcome.outputs = self._decode(outcome, layout)
            return outcome
        outcome.raise_for_status()
        return outcome

    def execute_async(
        self,
        inputs: Sequence[np.ndarray | None],
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> ExecutionCallback:
        """execute_1_3 on numpy arrays: the callback's value has ``outputs``."""
        msg, layout = self._numpy_request(inputs, None)
        msg, grpc_timeout = self._exec_msg(msg, measure, timeout, deadline_at, loop_timeout_ns)
        return self._async(msg, grpc_timeout, lambda o: self._decode(o, layout))

    # -- fenced execution and bursts ---------------------------------------------
    def execute_fenced(
        self,
        request: Request,
        *,
        wait_for: Sequence[FencedExecution] = (),
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
        timeout_after_fence_ns: int = 0,
    ) -> FencedExecution:
        """executeFenced: starts once the ``wait_for`` executions have signalled.

        Raises the launch error (e.g. INVALID_ARGUMENT for unspecified output shapes)."""
        from nnhal.client.device import deadline_msg

        device = self._device
        msg = spb.FencedExecuteRequest(session=device.session, prepared_model=self.handle)
        wire.request_to(request, msg.request)
        msg.wait_for.extend(f.sync_fence for f in wait_for)
        if measure:
            msg.measure = int(MeasureTiming.YES)  # type: ignore[assignment]
        msg.loop_timeout_ns = loop_timeout_ns
        msg.timeout_after_fence_ns = timeout_after_fence_ns
        grpc_timeout = deadline_msg(msg.deadline, timeout, deadline_at)
        result = device._unary(device.stubs.prepared_model.executeFenced, msg, "executeFenced", grpc_timeout)
        if result.status != 0:
            raise HalError.of(wire.error_status_from(result.status), result.message)
        return FencedExecution(device, result.sync_fence, result.callback)

    def burst(self) -> Burst:
        """configureExecutionBurst: one stream carrying many executions."""
        return Burst(self)


class FencedExecution:
    """A sync fence plus its IFencedExecutionCallback."""

    def __init__(self, device: Device, sync_fence: str, callback: str) -> None:
        self._device = device
        self.sync_fence = sync_fence
        self.callback = callback

    def get_execution_info(self, wait: bool = True, timeout: float = DEFAULT_CALL_TIMEOUT) -> ExecutionOutcome:
        """getExecutionInfo: status, timings (launched, fenced) and returned inline pools.

        With ``wait`` the call blocks until the fence signals (bounded by ``timeout``)."""
        device = self._device
        req = spb.FencedInfoRequest(session=device.session, callback=self.callback, wait=wait)
        msg = device._unary(device.stubs.fenced.getExecutionInfo, req, "getExecutionInfo", timeout)
        outcome = ExecutionOutcome(
            status=wire.error_status_from(msg.status),
            message=msg.message,
            timing=wire.timing_from(msg.timing_fenced),
            output_pools={p.pool_index: p.data for p in msg.output_pools},
        )
        outcome.timing_launched = wire.timing_from(msg.timing_launched)  # type: ignore[attr-defined]
        outcome.signalled = bool(msg.signalled)  # type: ignore[attr-defined]
        return outcome


class Burst:
    """An execution burst: requests and results travel on one bidirectional stream,
    in order. Thread-safe (one execution at a time). Close it, or use ``with``."""

    def __init__(self, pm: PreparedModel) -> None:
        import queue

        self._pm = pm
        self._requests: queue.Queue[spb.BurstRequest | None] = queue.Queue()
        self._lock = threading.Lock()
        device = pm._device
        device.monitor.check()
        self._responses = device.stubs.prepared_model.configureExecutionBurst(
            iter(self._requests.get, None), timeout=DEFAULT_CALL_TIMEOUT * 6
        )

    def execute(self, request: Request, *, measure: bool = False, timeout: float | None = None) -> ExecutionOutcome:
        msg, _ = self._pm._exec_msg(request, measure, timeout, None, 0)
        with self._lock:
            self._pm._device.monitor.check()
            self._requests.put(spb.BurstRequest(execute=msg))
            try:
                response = next(self._responses)
            except grpc.RpcError as err:
                mapped = map_rpc_error(err, what="burst")
                if isinstance(mapped, DeadObject):
                    self._pm._device.monitor.declare_dead(mapped.message)
                return ExecutionOutcome(mapped.error_status, mapped.message)
        return _outcome(response.result)

    def close(self) -> None:
        self._requests.put(None)
        try:
            for _ in self._responses:
                pass
        except grpc.RpcError:
            pass

    def __enter__(self) -> Burst:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

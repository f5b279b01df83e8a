"""A prepared model: the executable graph plus request binding and result shaping.

``execute`` takes a canonical Request, binds its pools, runs the graph, writes
outputs in place and returns the canonical ExecutionResult (the one place where
inline output pools and the profile are put into a result). Thread-safe:
concurrent executions share only the read-only graph; the fastest-run estimate
is updated under the model's own (leaf) lock.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import replace

import numpy as np

from nnhal.core.enums import ErrorStatus, OperandType, Priority
from nnhal.core.errors import HalError, InvalidArgument, OutputInsufficientSize
from nnhal.core.operand_types import DTYPE, INFO
from nnhal.core.types import ExecutionResult, Model, Operand, OperationProfile, OutputShape, Request, Timing
from nnhal.server.backend import ExecutableGraph
from nnhal.server.executor.graph import ExecutionControl
from nnhal.server.memory import BoundPools

_NO_TIMING = Timing()


def execution_result(
    status: ErrorStatus,
    message: str,
    shapes: tuple[OutputShape, ...] = (),
    timing: Timing = _NO_TIMING,
    control: ExecutionControl | None = None,
    pools: BoundPools | None = None,
) -> ExecutionResult:
    """The canonical result: inline output pools only with success (by pool index, from
    ``pools``), the profile (when ``control`` collected one) slowest operation type first."""
    outputs = {} if pools is None or status != ErrorStatus.NONE else pools.inline_results()
    profile: tuple[OperationProfile, ...] = ()
    if control is not None and control.profile:
        ranked = sorted(control.profile.items(), key=lambda kv: -kv[1][1])
        profile = tuple(OperationProfile(name, count, total_ns // 1000) for name, (count, total_ns) in ranked)
    return ExecutionResult(status, message, shapes, timing, outputs, profile)


class PreparedModel:
    def __init__(
        self,
        model: Model,
        graph: ExecutableGraph,
        priority: Priority,
        bound: BoundPools,
        byte_cost: int,
    ) -> None:
        self.model = model
        self.graph = graph
        self.priority = priority
        self._bound = bound  # model pools stay mapped while the model lives
        self.byte_cost = byte_cost
        #: Shortest complete run seen (ns): work that cannot fit a deadline is refused at launch.
        self.fastest_ns: int | None = None
        self._fastest_lock = threading.Lock()
        main = model.main
        self._inputs = [main.operands[i] for i in main.input_indexes]
        self._outputs = [main.operands[i] for i in main.output_indexes]
        self._input_meta = [(op, DTYPE[op.type], INFO[op.type].is_tensor) for op in self._inputs]
        self._fixed_outputs = all(
            not INFO[o.type].is_tensor or (o.dimensions and 0 not in o.dimensions) for o in self._outputs
        )

    def release(self) -> None:
        self._bound.close()

    @property
    def input_operands(self) -> list[Operand]:
        return self._inputs

    @property
    def output_operands(self) -> list[Operand]:
        return self._outputs

    def output_pool_indexes(self, request: Request) -> set[int]:
        return {a.location.pool_index for a in request.outputs if not a.has_no_value}

    def execute(
        self,
        request: Request,
        pools: BoundPools,
        control: ExecutionControl,
        measure: bool,
    ) -> ExecutionResult:
        """Run ``request``; HalErrors become the result's status. The profile ``control``
        collects goes into the result whatever the status."""
        t0 = time.perf_counter_ns()
        try:
            pools.check_shared()
            inputs = self._bind_inputs(request, pools)
            overrides = self._output_overrides(request)
            t1 = time.perf_counter_ns()
            outputs = self.graph.run(inputs, control, overrides)
            t2 = time.perf_counter_ns()
            if control.graph is not None or control.operations_run:
                self._ran(t2 - t1)
            shapes = self._write_outputs(request, pools, outputs)
        except OutputInsufficientSize as err:
            self._invalidate(pools)
            return execution_result(err.error_status, err.message, getattr(err, "shapes", ()), control=control)
        except HalError as err:
            self._invalidate(pools)
            return execution_result(err.error_status, err.message, control=control)
        timing = Timing()
        if measure:
            t3 = time.perf_counter_ns()
            timing = Timing((t2 - t1) // 1000, (t3 - t0) // 1000)
        return execution_result(ErrorStatus.NONE, "", shapes, timing, control, pools)

    def _ran(self, elapsed_ns: int) -> None:
        """Keep the launch-time estimate for deadlines: the shortest complete run."""
        with self._fastest_lock:
            if self.fastest_ns is None or elapsed_ns < self.fastest_ns:
                self.fastest_ns = elapsed_ns

    @staticmethod
    def _invalidate(pools: BoundPools) -> None:
        """A failed execution leaves the driver-managed buffers it writes uninitialized."""
        for buf in pools.token_outputs.values():
            buf.invalidate()

    def _bind_inputs(self, request: Request, pools: BoundPools) -> list[np.ndarray | None]:
        inputs: list[np.ndarray | None] = []
        buffers = pools.buffers
        for (operand, dtype, is_tensor), arg in zip(self._input_meta, request.inputs):
            if arg.has_no_value:
                inputs.append(None)
                continue
            loc = arg.location
            if is_tensor:
                dims = arg.dimensions or operand.dimensions
                arr = np.frombuffer(buffers[loc.pool_index], dtype=dtype, count=math.prod(dims), offset=loc.offset)
                inputs.append(arr.reshape(dims))
            else:
                inputs.append(
                    np.frombuffer(buffers[loc.pool_index], dtype=dtype, count=1, offset=loc.offset).reshape(())
                )
        return inputs

    def _output_overrides(self, request: Request) -> list[Operand] | None:
        if all(not a.dimensions for a in request.outputs):
            return None
        return [
            replace(op, dimensions=arg.dimensions) if arg.dimensions else op
            for op, arg in zip(self._outputs, request.outputs)
        ]

    @staticmethod
    def _whole_pool_outputs(request: Request, pools: BoundPools, outputs: list[np.ndarray]) -> set[int]:
        """Outputs that alone fill a small inline output pool no input or other output uses (their
        bytes become the pool; a large pool's lazily zeroed buffer is written once instead, as its
        own bytes would be a fresh allocation faulted in page by page)."""
        users: dict[int, int] = {}
        for a in (*request.inputs, *request.outputs):
            if not a.has_no_value:
                users[a.location.pool_index] = users.get(a.location.pool_index, 0) + 1
        whole = set()
        for k, (arg, value) in enumerate(zip(request.outputs, outputs)):
            i = arg.location.pool_index
            if (
                not arg.has_no_value
                and isinstance(pools.inline_outputs.get(i), bytearray)  # a large pool is written in place
                and users.get(i) == 1
                and arg.location.offset == 0
                and value.nbytes == len(pools.inline_outputs[i])
                and value.dtype != np.bool_
            ):
                whole.add(k)
        return whole

    def _write_outputs(self, request: Request, pools: BoundPools, outputs: list[np.ndarray]) -> tuple[OutputShape, ...]:
        shapes: list[OutputShape] = []
        insufficient = False
        for k, (operand, arg, value) in enumerate(zip(self._outputs, request.outputs, outputs)):
            dims = tuple(int(d) for d in value.shape) if INFO[operand.type].is_tensor else ()
            need = value.nbytes
            ok = arg.has_no_value or need <= arg.location.length or k in pools.token_outputs
            insufficient |= not ok
            shapes.append(OutputShape(dims, ok))
        if insufficient:
            err = OutputInsufficientSize(
                "output buffer too small: "
                + ", ".join(
                    f"output {k} needs {v.nbytes} bytes, has {a.location.length}"
                    for k, (a, v, s) in enumerate(zip(request.outputs, outputs, shapes))
                    if not s.is_sufficient
                )
            )
            err.shapes = tuple(shapes)  # type: ignore[attr-defined]
            raise err
        pools.check_shared()
        whole = self._whole_pool_outputs(request, pools, outputs)
        for k, (arg, value, operand) in enumerate(zip(request.outputs, outputs, self._outputs)):
            if k in pools.token_outputs:  # zero-sized results too: they initialize the buffer
                pools.token_outputs[k].store(value.tobytes(), tuple(int(d) for d in value.shape))  # C order
                continue
            if arg.has_no_value or value.nbytes == 0:
                continue
            if k in whole:
                # The output fills an inline pool of its own: its bytes become the pool,
                # with no staging copy (the pool's zeroed pages were never touched).
                pools.inline_outputs[arg.location.pool_index] = np.ascontiguousarray(value).tobytes()
                continue
            buf = pools.buffers[arg.location.pool_index]
            dst = np.frombuffer(buf, dtype=np.uint8, count=value.nbytes, offset=arg.location.offset)
            if dst.flags.writeable is False:
                raise InvalidArgument(f"output pool {arg.location.pool_index} is not writable")
            if operand.type in (OperandType.TENSOR_BOOL8, OperandType.BOOL):
                value = value.astype(np.uint8)
            dst[:] = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
        return tuple(shapes)

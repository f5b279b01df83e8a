"""A model prepared for execution: constants decoded once, steps ordered once.

``PreparedGraph`` is built at prepare time from a validated model and the bytes
of its pools; ``run`` executes it on input arrays and returns output arrays.
The graph never sees gRPC or request pools: the driver binds those.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from contextvars import ContextVar
from itertools import repeat
from operator import setitem
from typing import Any

import numpy as np

from nnhal.core.enums import (
    OperandLifeTime,
)
from nnhal.core.errors import ResourceExhaustedTransient
from nnhal.core.types import Model, Operand, Subgraph
from nnhal.core.validation import MAX_RANK
from nnhal.server.executor import allocation
from nnhal.server.executor.arena import Arena
from nnhal.server.executor.constants import Buffer, constant_value
from nnhal.server.executor.context import ExecutionContext
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.executor.errors import OP_FAILED, fail
from nnhal.server.executor.fusion import PlannedOperation, fold_activations
from nnhal.server.executor.registry import Call
from nnhal.server.executor.step_plan import plan_steps
from nnhal.server.executor.subgraph import (
    PreparedSubgraph,
    run_segments,
)

#: A tensor's dtype and shape (``backend.TensorSpec``, which is that type: the executor does not
#: import the backends' module).
_Spec = tuple[np.dtype[Any], tuple[int, ...]]


def _numpy_error_state() -> tuple[ContextVar[object] | None, object]:
    """numpy's context variable of floating-point error handling and its value under
    ``np.errstate(all="ignore")``, or (None, None) when this numpy keeps it elsewhere. Setting
    the variable is what entering ``np.errstate`` does, without building the state each time."""
    try:
        var = getattr(importlib.import_module("numpy._core._ufunc_config"), "_extobj_contextvar", None)
    except ImportError:
        return None, None
    if not isinstance(var, ContextVar):
        return None, None
    with np.errstate(all="ignore"):
        return var, var.get()


_FP_STATE, _FP_IGNORE = _numpy_error_state()


#: A result copied out of its arena buffer (``_run_straight``: ``map``, no Python step per result).
_COPY = np.ndarray.copy
#: ``[:]`` for every element (``StraightLane.run``'s byte copies, ``map``ped: one C loop over the
#: tensors, faster than a Python loop for as few as two).
_WHOLE = repeat(slice(None))


def _exhausted() -> ResourceExhaustedTransient:
    """What a run raises when an allocation no reservation foresaw failed (a MemoryError)."""
    return ResourceExhaustedTransient("the server ran out of memory during the execution")


def _copy_out(value: np.ndarray) -> np.ndarray:
    """A copy of ``value``, reserved first."""
    allocation.reserve(value.nbytes)
    return value.copy()


class PreparedGraph:
    """An executable model. Thread-safe: ``run`` keeps all state per call.

    Prepared once: constants decoded, standalone activations folded into their producers
    where exact (executor.fusion), operations bound to their prepared state and, where the
    family offers one, to a kernel specialised for their constant parameters and static
    shapes (registry.Binder), which runs without re-checking what prepare proved."""

    #: Operations read their inputs (and an output another operation takes) in place
    #: (``ExecutableGraph.copies_io``).
    copies_io = False
    #: ``run`` ignores ``into`` (``ExecutableGraph.writes_into``): its results are its own arrays.
    writes_into = False

    def __init__(self, model: Model, pools: Sequence[Buffer]) -> None:
        self.model = model
        self.relaxed = model.relax_computation_float32_to_float16
        self._pools = pools
        self.main = self._prepare(model.main, arena=True)
        #: The operations a straight run of the main subgraph counts (``_program``).
        self._straight_ops = len(self.main.steps)
        # Referenced subgraphs run per loop iteration and hand their results to control flow:
        # they allocate afresh.
        self.referenced = [self._prepare(sg, arena=False) for sg in model.referenced]

    # -- preparation ------------------------------------------------------
    def _constant(self, operand: Operand) -> np.ndarray | None:
        if operand.lifetime == OperandLifeTime.SUBGRAPH:
            # Control flow reads a subgraph reference as the referenced subgraph's index.
            return np.array(operand.location.offset, dtype=np.uint32)
        return constant_value(self.model, self._pools, operand)

    def _prepare(self, sg: Subgraph, arena: bool) -> PreparedSubgraph:
        constants, operations, operands = self._plan(sg)
        return plan_steps(sg, constants, operations, operands, self.relaxed, self.model.referenced, arena)

    def _plan(self, sg: Subgraph) -> tuple[list[np.ndarray | None], list[PlannedOperation], list[Operand]]:
        """The subgraph's constants and operations after the exact rewrites of executor.fusion."""
        constants = [self._constant(op) for op in sg.operands]
        operations, operands, constants = fold_activations(sg, constants)
        return constants, operations, operands

    # -- execution --------------------------------------------------------
    def run(
        self,
        inputs: Sequence[np.ndarray | None],
        control: ExecutionControl | None = None,
        output_operands: Sequence[Operand] | None = None,
        into: Sequence[np.ndarray | None] | None = None,
    ) -> list[np.ndarray]:
        """Execute the main subgraph. ``output_operands`` overrides the declared
        output operands (a request may specify dims the model left unknown); ``into`` is not
        used (``ExecutableGraph.run``)."""
        if control is None:
            control = ExecutionControl()
        if self.main.straight and output_operands is None and control.profile is None and control.timeline is None:
            results = self._run_straight(inputs, control)
            if results is not None:
                return results
        control.graph = self
        control.start()
        accounting = control.reserve is not None
        outer = allocation.make_current(control) if accounting else None
        try:
            # Floating-point overflow, NaN and division by zero are results of the reference
            # (inf, NaN), never errors or warnings: decided once per run, not per operation.
            with np.errstate(all="ignore"):
                main = self.main
                pool = main.pool
                if pool is None or output_operands is not None:
                    return self._run(main, inputs, control, output_operands, 0)
                if accounting:
                    # The arena is this execution's while it runs: counted whole, before it exists
                    # (and kept afterwards, for the next: ``hold_kept``).
                    control.hold_kept(pool.nbytes)
                arena = pool.checkout()
                try:
                    if not arena.load(inputs):
                        # An input not of the shape and dtype its buffer has: the arena's fixed
                        # calls would not read it.
                        return self._run(main, inputs, control, None, 0)
                    results = self._run(main, inputs, control, None, 0, arena)
                    if not main.may_view and not main.io_outputs:
                        return results
                    # A result may be an output's buffer or a view of an intermediate (an
                    # operation that returns its input reshaped): the next execution would
                    # overwrite it.
                    return [_copy_out(value) if arena.owns(value) else value for value in results]
                finally:
                    pool.checkin(arena)
        except MemoryError:
            # The last line of defence: an allocation no reservation foresaw failed.
            raise _exhausted() from None
        finally:
            if accounting:
                allocation.make_current(outer)
            control.release_all()

    def _run_straight(self, inputs: Sequence[np.ndarray | None], control: ExecutionControl) -> list[np.ndarray] | None:
        """Run the main subgraph as its arena's straight program (``compile_static``), without
        profiling: inputs copied into their buffers, the fixed calls in order with a checkpoint
        before each segment, the results copied out of their buffers. None (nothing ran, nothing
        held) when an input does not fit its buffer.

        Under memory accounting the arena and the copies of the results are held before the
        arena is taken (the fixed calls allocate nothing), and given back when the run ends."""
        main = self.main
        pool = main.pool
        assert pool is not None
        accounting = control.reserve is not None
        if accounting:
            control.kept += pool.nbytes  # of them, the arena's (``ExecutionControl.hold_kept``)
            control.hold(main.straight_bytes)
        ran = False
        try:
            arena = pool.checkout()
            try:
                segments = arena.straight
                if segments is None or not arena.load(inputs):
                    if accounting:
                        control.drop(main.straight_bytes, pool.nbytes)  # the general path holds its own
                    return None
                ran = True
                self._program(segments, control)
                return list(map(_COPY, arena.results))
            finally:
                pool.checkin(arena)
        except MemoryError:
            raise _exhausted() from None
        finally:
            if accounting and ran:
                control.release_all()

    def _program(self, segments: tuple[tuple[Call, ...], ...], control: ExecutionControl) -> None:
        """The main subgraph's straight program on an arena (its ``segments``), loaded: the run
        started, each segment after its checkpoint (``run_segments``). Overflow, NaN and
        division by zero are results, never errors (as in ``run``): numpy's error state set as
        np.errstate sets it, from a value made once."""
        control.graph = self
        if _FP_STATE is None:
            control.start()
            with np.errstate(all="ignore"):
                run_segments(segments, control)
        else:
            token = _FP_STATE.set(_FP_IGNORE)
            try:
                if len(segments) == 1:  # its one checkpoint is the start's (``start_once``)
                    control.start_once()
                    for call in segments[0]:
                        call()
                else:
                    control.start()
                    run_segments(segments, control)
            finally:
                _FP_STATE.reset(token)
        control.operations_run += self._straight_ops

    def lane(self, inputs: Sequence[_Spec], outputs: Sequence[_Spec]) -> StraightLane | None:
        """``backend.LaneGraph.lane``: the straight program's lane when the main subgraph runs as
        one (``compile_static``: every step a fixed call; no control flow), every model input
        has a buffer, and each input and output is of its buffer's exact dtype and shape."""
        main = self.main
        pool = main.pool
        if pool is None:
            return None
        arena = pool.checkout()  # made on first use: whether the program is straight is known then
        try:
            if arena.straight is None or arena.io_bytes is None:
                return None
            buffers = (*arena.inputs, *arena.results)
            if len(inputs) != len(arena.inputs) or len(outputs) != len(arena.results):
                return None
            for buffer, (dtype, shape) in zip(buffers, (*inputs, *outputs)):
                if buffer is None or buffer.dtype != dtype or buffer.shape != tuple(shape):
                    return None
        finally:
            pool.checkin(arena)
        return StraightLane(self)

    def run_subgraph(self, index: int, inputs: Sequence[np.ndarray], control: ExecutionControl) -> list[np.ndarray]:
        if not 0 <= index < len(self.referenced):
            fail(f"no referenced subgraph {index}")
        return self._run(self.referenced[index], inputs, control, None, index + 1)

    @staticmethod
    def _run_bound(
        prepared: PreparedSubgraph,
        values: list[np.ndarray | None],
        control: ExecutionControl,
        arena: Arena,
        accounting: bool,
    ) -> int:
        """Run the leading steps that have bound kernels (``prepared.bound``) into ``arena``, up to
        the first whose kernel declines its inputs; return how many ran (the caller runs the rest).
        The arena's static steps (``compile_static``) run as their fixed calls.

        Under memory accounting what those steps hold at most (``prepared.bound_peak``: their
        outputs outside the arena and their scratch, as ``_run`` counts them) is held for the
        whole prefix, and what a kernel reserves beyond it ends with that kernel."""
        clock = time.monotonic_ns
        base = 0
        if accounting:
            control.hold(prepared.bound_peak)
            base = control.held
        ran = 0
        for step, buffers, calls in zip(prepared.bound_steps, arena.outputs, arena.program):
            # control.checkpoint(), inlined: most boundaries have nothing to do.
            now = clock()
            if now >= control.next_ns:
                control.due(now)
            if calls is not None:
                # A static step (``compile_static``): its outputs are already its values.
                for call in calls:
                    call()
                ran += 1
                continue
            outs = step.fast(step.take(values), buffers)  # type: ignore[misc]
            if outs is None:
                break
            if step.single is not None:
                out = outs[0]
                values[step.single] = out
                buffer = buffers[0]
                if buffer is not None and out is not buffer:
                    # Static steps read this buffer: a kernel that answered in a new array
                    # (against its contract) still leaves the value there.
                    np.copyto(buffer, out)
            else:
                for i, result, buffer in zip(step.outputs, outs, buffers):
                    values[i] = result
                    if buffer is not None and result is not buffer:
                        np.copyto(buffer, result)
            for i in step.release:
                values[i] = None
            if accounting and control.held != base:
                control.held = base
            ran += 1
        control.operations_run += ran
        return ran

    def _run(
        self,
        prepared: PreparedSubgraph,
        inputs: Sequence[np.ndarray | None],
        control: ExecutionControl,
        output_operands: Sequence[Operand] | None,
        number: int,
        arena: Arena | None = None,
    ) -> list[np.ndarray]:
        """Run ``prepared`` (subgraph ``number``: 0 the main one, i + 1 referenced subgraph i),
        its bound kernels writing into ``arena``'s slots when given (only for runs that take the
        bound kernels: no output overrides).

        Under memory accounting (``control.reserve``) each intermediate is counted while it
        lives, except those in ``arena`` (counted whole by ``run``)."""
        sg = prepared.subgraph
        accounting = control.reserve is not None
        run_base = control.held
        start_values = prepared.constants if arena is None or arena.values is None else arena.values
        values: list[np.ndarray | None] = list(start_values)
        for idx, value in zip(sg.input_indexes, inputs):
            values[idx] = value
        overrides: dict[int, Operand] = {}
        if output_operands is not None:
            overrides = dict(zip(sg.output_indexes, output_operands))
        # Bound kernels skip the context: runs with outputs the request reshapes take the general
        # kernels.
        fast_ok = not overrides
        # Under accounting: the bytes counted for each live intermediate the run allocated.
        counted: dict[int, int] = {}
        profile = control.profile
        clock = time.monotonic_ns
        outputs = prepared.no_outputs if arena is None else arena.outputs
        steps = prepared.steps
        start = 0
        if arena is not None and fast_ok and profile is None:
            start = self._run_bound(prepared, values, control, arena, accounting)
        for k in range(start, len(steps)):
            step = steps[k]
            # control.checkpoint(), inlined: most boundaries have nothing to do.
            now = clock()
            if now >= control.next_ns:
                control.due(now)
            args = [values[i] for i in step.inputs]
            fast = step.fast
            if fast is not None and fast_ok:
                if accounting:
                    step_base = control.held
                    fresh = step.fresh_alone if arena is None else step.fresh_in_arena
                    fresh_bytes = step.fresh_alone_bytes if arena is None else step.fresh_in_arena_bytes
                    # Its outputs outside the arena (a bound kernel writes those with a buffer
                    # into it) and its scratch, before it allocates them.
                    control.hold(fresh_bytes + step.scratch)
                if profile is None:
                    outs = fast(args, outputs[k])
                else:
                    t0 = time.perf_counter_ns()
                    outs = fast(args, outputs[k])
                    control.note(step.operation_type.name, number, k, t0, time.perf_counter_ns())
                if outs is not None:
                    if step.single is not None:
                        values[step.single] = outs[0]
                    else:
                        for i, result in zip(step.outputs, outs):
                            values[i] = result
                    if accounting:
                        control.held = step_base + fresh_bytes
                        if fresh_bytes:
                            for i, nbytes in zip(step.outputs, fresh):
                                counted[i] = nbytes
                        for i in step.release:
                            control.held -= counted.pop(i, 0)
                    for i in step.release:
                        values[i] = None
                    control.operations_run += 1
                    continue
                if accounting:
                    control.held = step_base
            for n, value in enumerate(args):
                # Shapes computed at run time (a RESHAPE to a request's shape) can pass the
                # ranks validation saw: refuse them before a kernel meets what numpy cannot do
                # (a bound kernel declines any shape but the one it was bound to).
                if value is not None and value.ndim > MAX_RANK:
                    fail(
                        f"{step.operation_type.name} input {n} has rank {value.ndim}, "
                        f"beyond the maximum rank {MAX_RANK} this driver supports"
                    )
            out_ops = step.out_operands
            if overrides:
                out_ops = tuple(overrides.get(i, op) for i, op in zip(step.outputs, out_ops))
            ctx = ExecutionContext(
                step.operation_type,
                args,
                step.in_operands,
                out_ops,
                step.state,
                self.relaxed,
                control,
            )
            if accounting:
                step_base = control.held
                # The outputs when their shapes are fixed, and the kernel's scratch (numpy
                # temporaries are typically one copy or cast of the largest operand).
                scratch = max((v.nbytes for v in ctx.inputs if v is not None), default=0)
                control.hold(step.out_bytes + scratch)
            if control.profile is None:
                step.spec.execute(ctx)
            else:
                t0 = time.perf_counter_ns()
                step.spec.execute(ctx)
                control.note(step.operation_type.name, number, k, t0, time.perf_counter_ns())
            for i, out in zip(step.outputs, ctx.outputs):
                if out is None:
                    fail(f"{step.operation_type.name} did not produce all its outputs", OP_FAILED)
                values[i] = out
            if accounting:
                # Scratch and the kernel's own reservations end with it; its outputs stay.
                control.held = step_base
                control.hold(sum(o.nbytes for o in ctx.outputs if o is not None))
                for i, out in zip(step.outputs, ctx.outputs):
                    if out is not None:
                        counted[i] = out.nbytes
                for i in step.release:
                    control.held -= counted.pop(i, 0)
            for i in step.release:
                values[i] = None
            control.operations_run += 1
        results: list[np.ndarray] = []
        for i in sg.output_indexes:
            value = values[i]
            if value is None:
                fail(f"output operand {i} was never written", OP_FAILED)
            results.append(value)
        if accounting:
            # What a subgraph returns is counted by the operation (or run) that receives it.
            control.held = run_base
        return results


class StraightLane:
    """``backend.Lane`` of a ``PreparedGraph`` whose main subgraph is a straight program
    (``PreparedGraph.lane``): a run as ``PreparedGraph._run_straight``'s — each input's bytes
    copied once into its arena buffer, the program's segments each after its checkpoint, under
    the same floating-point state (NaN and overflow as the reference's) and memory accounting
    — and each result's bytes copied once into its place, where ``_run_straight`` copies the
    result out as an array for the caller to write. Nothing is checked per call: the
    dtypes and shapes were matched when it was made."""

    __slots__ = ("_checkin", "_checkout", "_hold", "_program")

    library = "the reference executor"

    def __init__(self, graph: PreparedGraph) -> None:
        self._program = graph._program
        pool = graph.main.pool
        assert pool is not None
        #: The arena pool's two steps, resolved once (its ``checkin`` is one C call).
        self._checkout = pool.checkout
        self._checkin = pool.checkin
        #: What a run holds under memory accounting: its arena (no result copied out of it).
        self._hold = pool.nbytes

    def __call__(self, inputs: Sequence[memoryview], into: Sequence[memoryview]) -> Sequence[memoryview]:
        """The lane run with no execution's limits (``backend.Lane``)."""
        self.run(inputs, into, ExecutionControl())
        return into

    def run(self, inputs: Sequence[memoryview], into: Sequence[memoryview], control: ExecutionControl) -> object:
        accounting = control.reserve is not None
        try:
            if accounting:  # the arena held before it is taken (a failed hold: nothing to give back)
                control.hold_kept(self._hold)  # and kept for the next run, not freed
            arena = self._checkout()
            try:
                ins, outs = arena.io_bytes  # type: ignore[misc]
                # Each input's bytes into its buffer, then each result's into its place: ``any``
                # drives the ``map`` (``setitem`` returns None) with no Python step per tensor.
                any(map(setitem, ins, _WHOLE, inputs))
                self._program(arena.straight, control)  # type: ignore[arg-type]
                any(map(setitem, into, _WHOLE, outs))  # type: ignore[arg-type]
            finally:
                self._checkin(arena)
        except MemoryError:
            raise _exhausted() from None
        finally:
            if accounting:
                control.release_all()
        return into

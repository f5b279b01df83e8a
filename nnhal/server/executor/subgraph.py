"""A subgraph prepared for execution (``PreparedSubgraph``): its steps in order, each bound to
its kernel, which operands get arena buffers, and the static program an arena runs. Built by
:class:`nnhal.server.executor.graph.PreparedGraph`, which runs it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

from nnhal.core.enums import OperandLifeTime, OperationType
from nnhal.core.operand_types import DTYPE, INFO, byte_size, has_unknown_dims
from nnhal.core.types import Operand, Subgraph
from nnhal.server.executor.arena import Arena, ArenaPool
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.executor.registry import Call, FastKernel, OperationSpec, StaticKernel, lookup

#: A straight program (``PreparedGraph._run_straight``) checks the clock before its first step
#: and then at the first step boundary past this many elements of work (each step counts the
#: elements of its operands) since the last check.
STRAIGHT_SEGMENT = 1 << 18


#: Model inputs and outputs of at most this many bytes (and a fixed shape) get arena buffers:
#: an input is copied in, an output copied out, and the steps between run as fixed calls.
ARENA_IO_BYTES = 64 << 10


def fresh_outputs(operation_type: OperationType) -> bool:
    """Whether the operation's kernels never return a view of an input: those of the families
    with bound kernels, unless registered with ``views`` (see registry.Binder)."""
    spec = lookup(operation_type)
    return spec is not None and spec.bind is not None and not spec.views


def arena_operand(operand: Operand) -> bool:
    """Whether an intermediate operand can have an arena slot: a non-empty tensor of a fixed
    shape and a numpy dtype."""
    return (
        operand.lifetime == OperandLifeTime.TEMPORARY_VARIABLE
        and operand.type in DTYPE
        and INFO[operand.type].is_tensor
        and not has_unknown_dims(operand.type, operand.dimensions)
        and all(d > 0 for d in operand.dimensions)
    )


def io_operand(operand: Operand) -> bool:
    """Whether a model input or output can have an arena buffer: a non-empty tensor of a fixed
    shape and a numpy dtype, of at most :data:`ARENA_IO_BYTES`."""
    return (
        operand.type in DTYPE
        and INFO[operand.type].is_tensor
        and not has_unknown_dims(operand.type, operand.dimensions)
        and all(d > 0 for d in operand.dimensions)
        and byte_size(operand.type, operand.dimensions) <= ARENA_IO_BYTES
    )


def static_bytes(operand: Operand) -> int:
    """The bytes of a tensor or scalar of fixed shape (0 when its shape is not fixed)."""
    if operand.type.name in ("OEM", "TENSOR_OEM_BYTE") or has_unknown_dims(operand.type, operand.dimensions):
        return 0
    return byte_size(operand.type, operand.dimensions)


@dataclass(slots=True)
class Step:
    spec: OperationSpec
    operation_type: OperationType
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    in_operands: tuple[Operand, ...]
    out_operands: tuple[Operand, ...]
    state: Any
    #: Temporaries whose last consumer is this step: freed after it.
    release: tuple[int, ...]
    #: Bytes of the outputs when the model fixes every output's shape, else 0 (the
    #: kernel reserves what it allocates once it knows the shapes).
    out_bytes: int
    #: The kernel bound at prepare to this step's constants and static shapes (see
    #: registry.Binder), tried before the general kernel; None when the family has none.
    fast: FastKernel | None = None
    #: Per output, its slot in the subgraph's arena (executor.arena), or None.
    out_slots: tuple[int | None, ...] = ()
    #: Under memory accounting, per output the bytes ``fast`` allocates for it: in a run with an
    #: arena (an output with a slot is written into it, counted with the arena) and without one;
    #: and their sums.
    fresh_in_arena: tuple[int, ...] = ()
    fresh_alone: tuple[int, ...] = ()
    fresh_in_arena_bytes: int = 0
    fresh_alone_bytes: int = 0
    #: Under memory accounting, the scratch reserved around ``fast``: the largest input, as the
    #: general path reckons it (a bound kernel reserves larger scratch itself).
    scratch: int = 0
    #: The output operand of a step with one output, else None.
    single: int | None = None
    #: The step's input values picked out of a run's values, in operation order (a sequence).
    take: Callable[[list[np.ndarray | None]], Sequence[np.ndarray | None]] | None = None
    #: ``fast`` as fixed calls on fixed arrays (registry.StaticKernel), or None; read when an
    #: arena is made (``compile_static``).
    emit: StaticKernel | None = None


def taker(inputs: tuple[int, ...]) -> Callable[[list[np.ndarray | None]], Sequence[np.ndarray | None]]:
    """What picks the values of ``inputs`` out of a run's values as a sequence: one C call
    where there are several (a list comprehension costs several times that per step)."""
    if len(inputs) == 1:
        (only,) = inputs
        return lambda values: (values[only],)
    return itemgetter(*inputs)


def bound_peak(steps: Sequence[Step]) -> int:
    """The most that ``steps``, run by their bound kernels into an arena, hold at once as
    ``PreparedGraph._run`` counts it: each step's outputs outside the arena and its scratch,
    then its outputs while they live."""
    live: dict[int, int] = {}
    held = peak = 0
    for step in steps:
        peak = max(peak, held + step.fresh_in_arena_bytes + step.scratch)
        held += step.fresh_in_arena_bytes
        for i, nbytes in zip(step.outputs, step.fresh_in_arena):
            if nbytes:
                live[i] = nbytes
        for i in step.release:
            held -= live.pop(i, 0)
    return peak


def compile_static(prepared: PreparedSubgraph, arena: Arena) -> None:
    """Give ``arena`` its static program: per leading bound step (``prepared.bound``), its fixed
    calls when it has them (else None), and the values a run of it starts from.

    A step is static when its kernel emits fixed calls (Step.emit), every output has a buffer in
    the arena, and every input is a constant or an output of an earlier step of the prefix that
    has a buffer: a bound kernel writes such an output into its buffer (``_run_bound`` makes
    sure of it), so the same arrays hold the step's inputs and outputs in every execution on
    this arena, and its calls do what its bound kernel would do there. The prefix's outputs with
    buffers are those buffers, so a run's values start with them (for the steps that read them
    with their bound or general kernels). The model inputs with buffers (``Arena.load`` fills
    them) count as such outputs.

    When every step is static and every model output is a buffer, the arena also gets the whole
    program in segments (``Arena.straight``) and the buffers of its results; the subgraph's
    ``straight`` says whether its arenas have one."""
    constants = prepared.constants
    values: list[np.ndarray | None] = list(constants)
    fixed: set[int] = set()
    sg = prepared.subgraph
    for i, view in zip(sg.input_indexes, arena.inputs):
        if view is not None:
            values[i] = view
            fixed.add(i)
    program: list[tuple[Call, ...] | None] = []
    for step, buffers in zip(prepared.bound_steps, arena.outputs):
        calls = None
        if (
            step.emit is not None
            and all(b is not None for b in buffers)
            and all(i in fixed or constants[i] is not None for i in step.inputs)
        ):
            calls = step.emit([values[i] for i in step.inputs], buffers)  # type: ignore[arg-type]
        for i, b in zip(step.outputs, buffers):
            if b is not None:
                values[i] = b
                fixed.add(i)
        program.append(calls)
    arena.program = program
    arena.values = values
    straight = (
        len(program) == len(prepared.steps)
        and all(calls is not None for calls in program)
        and all(i in fixed for i in sg.output_indexes)
    )
    if straight:
        segments: list[tuple[Call, ...]] = []
        segment: list[Call] = []
        work = 0
        for step, calls in zip(prepared.steps, program):
            assert calls is not None
            cost = sum(int(v.size) for i in (*step.inputs, *step.outputs) if (v := values[i]) is not None)
            if segment and work + cost > STRAIGHT_SEGMENT:
                segments.append(tuple(segment))
                segment, work = [], 0
            segment.extend(calls)
            work += cost
        segments.append(tuple(segment))
        arena.straight = tuple(segments)
        arena.results = tuple(values[i] for i in sg.output_indexes)  # type: ignore[misc]
        if all(view is not None for view in arena.inputs):
            arena.io_bytes = (
                tuple(_bytes_of(view) for view in arena.inputs),  # type: ignore[arg-type]
                tuple(map(_bytes_of, arena.results)),
            )
        prepared.straight_bytes = arena.block.nbytes + sum(r.nbytes for r in arena.results)
    prepared.straight = straight


def _bytes_of(array: np.ndarray) -> memoryview:
    """A writable byte view of ``array``'s memory (an arena buffer: contiguous)."""
    return array.reshape(-1).view(np.uint8).data


def run_segments(segments: tuple[tuple[Call, ...], ...], control: ExecutionControl) -> None:
    """Each segment's calls, after a checkpoint (``ExecutionControl.checkpoint``, inlined)."""
    clock = time.monotonic_ns
    for segment in segments:
        now = clock()
        if now >= control.next_ns:
            control.due(now)
        for call in segment:
            call()


class PreparedSubgraph:
    def __init__(
        self,
        subgraph: Subgraph,
        constants: list[np.ndarray | None],
        steps: list[Step],
        pool: ArenaPool | None = None,
        io_outputs: bool = False,
    ) -> None:
        self.subgraph = subgraph
        self.constants = constants
        self.steps = steps
        #: Per step, the output buffers handed to its bound kernel in a run without an arena: none.
        self.no_outputs = [(None,) * len(step.outputs) for step in steps]
        #: Whether a result may be a view of an arena slot: some operation may return a view of
        #: its input (a bound kernel registered with ``views``, or a general kernel).
        self.may_view = any(step.spec.views or not fresh_outputs(step.operation_type) for step in steps)
        #: How many leading steps have bound kernels, and what they hold at most under memory
        #: accounting in a run with an arena (see ``PreparedGraph._run_bound``).
        self.bound = next((k for k, step in enumerate(steps) if step.fast is None), len(steps))
        self.bound_peak = bound_peak(steps[: self.bound])
        #: The steps of that prefix (the same Step objects).
        self.bound_steps = steps[: self.bound]
        #: The arenas of the bound kernels' intermediate outputs; None when there are none.
        self.pool = pool
        #: Whether some model output has an arena buffer (a result to copy out).
        self.io_outputs = io_outputs
        #: Whether the arenas run the whole subgraph as one straight program (known once the
        #: first arena is made: None before).
        self.straight: bool | None = None
        #: What a straight run holds under memory accounting: its arena and its results' copies.
        self.straight_bytes = 0

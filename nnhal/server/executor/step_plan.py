"""How a subgraph's operations become the steps a run takes (:func:`plan_steps`): each
operation bound to its prepared state and, where its family offers one, to a kernel
specialised for its constant parameters and static shapes; the arena's slots placed for
the intermediates that live between steps; and what each step holds and gives back.

Planned once per subgraph at prepare time (``graph.PreparedGraph``); a run only follows
the steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import NoReturn

import numpy as np

from nnhal.core.enums import OperandLifeTime, OperationType
from nnhal.core.operand_types import DTYPE
from nnhal.core.types import Operand, Subgraph
from nnhal.server.executor.arena import ArenaLayout, ArenaPool
from nnhal.server.executor.context import ValidationContext
from nnhal.server.executor.errors import fail
from nnhal.server.executor.fusion import PlannedOperation
from nnhal.server.executor.registry import lookup
from nnhal.server.executor.subgraph import (
    PreparedSubgraph,
    Step,
    arena_operand,
    compile_static,
    fresh_outputs,
    io_operand,
    static_bytes,
    taker,
)


def unsupported(operation_type: OperationType) -> NoReturn:
    """INVALID_ARGUMENT for an operation no family registered."""
    fail(f"operation {operation_type.name} is not supported by this driver")


def plan_steps(
    sg: Subgraph,
    constants: list[np.ndarray | None],
    operations: Sequence[PlannedOperation],
    operands: Sequence[Operand],
    relaxed: bool,
    referenced: Sequence[Subgraph],
    arena: bool,
) -> PreparedSubgraph:
    """``sg`` prepared from its constants and its operations after the exact rewrites of
    ``executor.fusion``; with ``arena``, its bound kernels write into slots of an arena
    (the main subgraph); without, every run allocates afresh (referenced subgraphs, whose
    results control flow keeps)."""
    last_use: dict[int, int] = {}
    for n, operation in enumerate(operations):
        for i in operation.inputs:
            last_use[i] = n
    model_inputs, model_outputs = set(sg.input_indexes), set(sg.output_indexes)
    keep = model_inputs | model_outputs
    steps: list[Step] = []
    layout = ArenaLayout()
    placed: dict[int, int] = {}  # operand -> its placement while it lives
    # Small model inputs that an operation with fixed calls reads get a buffer for the whole
    # execution (the caller's array is copied in): that operation can then be static.
    input_slots: list[int | None] = [None] * len(sg.input_indexes)
    if arena:
        readers = {
            i
            for operation in operations
            if (spec := lookup(operation.type)) is not None and spec.emit is not None
            for i in operation.inputs
        }
        for n, i in enumerate(sg.input_indexes):
            o = operands[i]
            if i in readers and i not in model_outputs and i not in sg.input_indexes[:n] and io_operand(o):
                input_slots[n] = layout.place(tuple(o.dimensions), np.dtype(DTYPE[o.type]))
    io_outputs = False
    # Operands some operation without a bound kernel reads: a general kernel may return a
    # view of them, so their slots are never reused within an execution.
    pinned = {i for operation in operations if not fresh_outputs(operation.type) for i in operation.inputs}
    for n, operation in enumerate(operations):
        spec = lookup(operation.type)
        if spec is None:
            unsupported(operation.type)
        in_ops = tuple(operands[i] for i in operation.inputs)
        out_ops = tuple(operands[i] for i in operation.outputs)
        state = None
        fast = None
        emit = None
        if spec.prepare is not None or spec.bind is not None:
            vctx = ValidationContext(
                operation.type,
                in_ops,
                out_ops,
                lambda k, _ins=operation.inputs: constants[_ins[k]],  # type: ignore[misc]
                relaxed,
                referenced,
                operation.inputs,
            )
            if spec.prepare is not None:
                state = spec.prepare(vctx)
            if spec.bind is not None:
                fast = spec.bind(vctx, state)
            if fast is not None and spec.emit is not None and arena:
                emit = spec.emit(vctx, state)
        release = tuple(
            i
            for i in set(operation.inputs)
            if last_use.get(i) == n and i not in keep and operands[i].lifetime == OperandLifeTime.TEMPORARY_VARIABLE
        )
        sizes = tuple(static_bytes(o) for o in out_ops)
        out_slots: tuple[int | None, ...] = (None,) * len(out_ops)
        if arena and fast is not None and not spec.views:
            # A small model output gets a buffer (copied out after the run) where the step
            # has fixed calls: then it can be static too.
            out_slots = tuple(
                layout.place(tuple(o.dimensions), np.dtype(DTYPE[o.type]))
                if (
                    arena_operand(o)
                    if i not in keep
                    else emit is not None and i in model_outputs and i not in model_inputs and io_operand(o)
                )
                else None
                for i, o in zip(operation.outputs, out_ops)
            )
            for i, placement in zip(operation.outputs, out_slots):
                if placement is not None:
                    placed[i] = placement
                    io_outputs |= i in model_outputs
        in_arena = tuple(0 if slot is not None else size for slot, size in zip(out_slots, sizes))
        # Operands dead after this step give their slot back, unless an operation that may
        # return a view of its input read them (the view could outlive them); a model
        # output keeps its slot until it is copied out.
        for i in dict.fromkeys((*operation.inputs, *operation.outputs)):
            if i in placed and last_use.get(i, n) == n and i not in pinned and i not in keep:
                layout.free(placed.pop(i))
        steps.append(
            Step(
                spec,
                operation.type,
                operation.inputs,
                operation.outputs,
                in_ops,
                out_ops,
                state,
                release,
                sum(sizes),
                fast,
                out_slots,
                in_arena,
                sizes,
                sum(in_arena),
                sum(sizes),
                max((static_bytes(o) for o in in_ops), default=0),
                operation.outputs[0] if len(operation.outputs) == 1 else None,
                taker(operation.inputs),
                emit,
            )
        )
    pool = None
    if layout.placements:
        pool = ArenaPool(layout, [step.out_slots for step in steps], input_slots)
    prepared = PreparedSubgraph(sg, constants, steps, pool, io_outputs)
    if pool is not None:
        pool.on_new = partial(compile_static, prepared)
    return prepared

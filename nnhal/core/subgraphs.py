"""Cutting a model's main subgraph into steps, and a step's sub-model: what the client's
partitioner (across devices) and a compiling device's internal fallback (backend vs
reference executor) share.

``cut`` orders the operations as Kahn's algorithm does, taking ready operations of the
current place for as long as there are any, so that a step is as long as the graph allows
(as the NNAPI runtime's per-device queues do). ``step_io`` names what each step reads from
outside (model inputs and other steps' results) and writes for others (model outputs and
results later steps read); constants stay inside. ``step_model`` is one step's model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from nnhal.core.enums import OperandLifeTime
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Model, Operand, Operation, Subgraph

L = OperandLifeTime
CONSTANT_LIFETIMES = (L.CONSTANT_COPY, L.CONSTANT_REFERENCE, L.NO_VALUE, L.SUBGRAPH)


def cut(model: Model, place: Sequence[int]) -> list[tuple[int, list[int]]]:
    """(place, operations) per step, in an order that respects every dependency; ``place[k]``
    is where main operation ``k`` runs. InvalidArgument when the operations form a cycle."""
    sg = model.main
    writer = {o: k for k, op in enumerate(sg.operations) for o in op.outputs}
    deps = [{writer[i] for i in op.inputs if i in writer} for op in sg.operations]
    readers: dict[int, list[int]] = {}
    for k, op in enumerate(sg.operations):
        for i in op.inputs:
            readers.setdefault(i, []).append(k)
    waiting = [len(d) for d in deps]
    ready = [k for k, n in enumerate(waiting) if n == 0]
    steps: list[tuple[int, list[int]]] = []
    while ready:
        where = place[min(ready)]
        ops: list[int] = []
        while True:
            mine = sorted(k for k in ready if place[k] == where)
            if not mine:
                break
            for k in mine:
                ready.remove(k)
                ops.append(k)
                for o in sg.operations[k].outputs:
                    for r in readers.get(o, ()):
                        waiting[r] -= 1
                        if waiting[r] == 0:
                            ready.append(r)
        steps.append((where, sorted(ops)))
    if sum(len(ops) for _, ops in steps) != len(sg.operations):
        raise InvalidArgument("the model's operations form a cycle")
    return steps


def step_io(model: Model, steps: Sequence[tuple[int, Sequence[int]]]) -> list[tuple[list[int], list[int]]]:
    """(inputs, outputs) per step of ``cut``: model operand indexes, sorted."""
    sg = model.main
    model_outputs = set(sg.output_indexes)
    result = []
    for k, (_, ops) in enumerate(steps):
        inside = {o for op in ops for o in sg.operations[op].outputs}
        reads = {i for op in ops for i in sg.operations[op].inputs}
        inputs = sorted(i for i in reads if i not in inside and sg.operands[i].lifetime not in CONSTANT_LIFETIMES)
        later = {i for _, later_ops in steps[k + 1 :] for op in later_ops for i in sg.operations[op].inputs}
        outputs = sorted(o for o in inside if o in model_outputs or o in later)
        result.append((inputs, outputs))
    return result


def step_model(model: Model, operations: Sequence[int], inputs: Sequence[int], outputs: Sequence[int]) -> Model:
    """The sub-model of ``operations``, reading ``inputs`` and writing ``outputs`` (model
    operand indexes), its operands renumbered in first-use order."""
    sg = model.main
    ops = [sg.operations[k] for k in operations]
    used: dict[int, int] = {}
    for i in (*inputs, *(x for op in ops for x in (*op.inputs, *op.outputs)), *outputs):
        used.setdefault(i, len(used))
    consumers = dict.fromkeys(used, 0)
    for op in ops:
        for i in op.inputs:
            consumers[i] += 1
    ins, outs = set(inputs), set(outputs)
    operands: list[Operand] = []
    for i in used:
        operand = sg.operands[i]
        if i in ins:
            lifetime = L.SUBGRAPH_INPUT
        elif i in outs:
            lifetime = L.SUBGRAPH_OUTPUT
        elif operand.lifetime in CONSTANT_LIFETIMES:
            lifetime = operand.lifetime
        else:
            lifetime = L.TEMPORARY_VARIABLE
        operands.append(replace(operand, lifetime=lifetime, number_of_consumers=consumers[i]))
    new_ops = tuple(
        Operation(op.type, tuple(used[i] for i in op.inputs), tuple(used[i] for i in op.outputs)) for op in ops
    )
    main = Subgraph(tuple(operands), new_ops, tuple(used[i] for i in inputs), tuple(used[i] for i in outputs))
    # Referenced subgraphs go only with a step that has control flow (a device without IF /
    # WHILE may refuse a model holding them).
    flow = any(o.lifetime == L.SUBGRAPH for o in operands)
    return replace(model, main=main, referenced=model.referenced if flow else ())

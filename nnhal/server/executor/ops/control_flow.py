"""Control flow operations (HAL 1.3): IF and WHILE.

Both run referenced subgraphs through ``ctx.control.run_subgraph``; a SUBGRAPH
operand's value is the referenced-subgraph index (its ``location.offset``).

types.hal asks for fully specified dimensions on every operand involved; like
the runtime's CPU path we accept operands of unknown size and only require the
specified parts to agree, since the executor resolves shapes as it runs.

WHILE splits its inputs into m input-output, k state-only and n input-only
values (m = output count, k = body outputs - m, n = body inputs - m - k); the
loop gives up with MISSED_DEADLINE_PERSISTENT once it has run longer than the
execution's loop timeout.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from nnhal.core.enums import HalVersion, OperandLifeTime, OperandType, OperationType
from nnhal.core.errors import MissedDeadlinePersistent
from nnhal.core.types import Operand, Subgraph
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.registry import register

T = OperandType

# IF operands
IF_CONDITION = 0
IF_THEN = 1
IF_ELSE = 2
IF_FIRST_INPUT = 3

# WHILE operands
WHILE_CONDITION = 0
WHILE_BODY = 1
WHILE_FIRST_INPUT = 2


# -- validation helpers ---------------------------------------------------------
def _subgraph_reference(v: ValidationContext, i: int, what: str) -> Subgraph:
    """The subgraph referenced by input ``i`` (a SUBGRAPH operand)."""
    if v.is_omitted(i):
        v.fail(f"input {i} ({what}) has no value")
    operand = v.inputs[i]
    if operand.type != T.SUBGRAPH:
        v.fail(f"input {i} ({what}) must be SUBGRAPH, got {operand.type.name}")
    value = v.constant(i)
    if value is not None:
        index = int(value.reshape(-1)[0])
    elif operand.lifetime == OperandLifeTime.SUBGRAPH:
        index = operand.location.offset
    else:
        v.fail(f"input {i} ({what}) is not a subgraph reference")
    if not 0 <= index < len(v.referenced):
        v.fail(f"input {i} ({what}) references subgraph {index}, the model has {len(v.referenced)}")
    return v.referenced[index]


def _incompatibility(inner: Operand, outer: Operand) -> str | None:
    """Why two operands cannot stand for one another (None when they can).

    Types, scales, zero points and per-channel parameters must be equal; ranks
    and dimensions only where both sides specify them.
    """
    if inner.type != outer.type:
        return f"type {inner.type.name} != {outer.type.name}"
    if inner.dimensions and outer.dimensions:
        if len(inner.dimensions) != len(outer.dimensions):
            return f"rank {len(inner.dimensions)} != {len(outer.dimensions)}"
        for d, (a, b) in enumerate(zip(inner.dimensions, outer.dimensions)):
            if a and b and a != b:
                return f"dimension {d}: {a} != {b}"
    if inner.scale != outer.scale:
        return f"scale {inner.scale} != {outer.scale}"
    if inner.zero_point != outer.zero_point:
        return f"zero point {inner.zero_point} != {outer.zero_point}"
    if inner.channel_quant != outer.channel_quant:
        return "per-channel quantization parameters differ"
    if inner.extension_params != outer.extension_params:
        return "extension parameters differ"
    return None


def _require_compatible(v: ValidationContext, inner: Operand, outer: Operand, where: str) -> None:
    why = _incompatibility(inner, outer)
    if why is not None:
        v.fail(f"{where}: {why}")


def _check_condition_operand(v: ValidationContext, operand: Operand, where: str) -> None:
    if operand.type != T.TENSOR_BOOL8:
        v.fail(f"{where} must be TENSOR_BOOL8, got {operand.type.name}")
    if len(operand.dimensions) != 1 or operand.dimensions[0] not in (0, 1):
        v.fail(f"{where} must have shape [1], got {list(operand.dimensions)}")


def _inputs(sg: Subgraph) -> list[Operand]:
    return [sg.operands[i] for i in sg.input_indexes]


def _outputs(sg: Subgraph) -> list[Operand]:
    return [sg.operands[i] for i in sg.output_indexes]


# -- IF ---------------------------------------------------------------------------
def validate_if(v: ValidationContext) -> HalVersion:
    v.require(v.num_inputs >= 3, f"expected at least 3 inputs, got {v.num_inputs}")
    v.require(v.num_outputs >= 1, f"expected at least 1 output, got {v.num_outputs}")
    if v.is_omitted(IF_CONDITION):
        v.fail("the condition (input 0) has no value")
    _check_condition_operand(v, v.inputs[IF_CONDITION], "the condition (input 0)")
    for i, name in ((IF_THEN, "then"), (IF_ELSE, "else")):
        branch = _subgraph_reference(v, i, f"{name} branch")
        ins, outs = _inputs(branch), _outputs(branch)
        if v.num_inputs != IF_FIRST_INPUT + len(ins):
            v.fail(f"the {name} branch takes {len(ins)} inputs, the operation passes {v.num_inputs - 3}")
        if v.num_outputs != len(outs):
            v.fail(f"the {name} branch has {len(outs)} outputs, the operation has {v.num_outputs}")
        for k, inner in enumerate(ins):
            outer_index = IF_FIRST_INPUT + k
            if v.is_omitted(outer_index):
                v.fail(f"input {outer_index} has no value")
            _require_compatible(v, inner, v.inputs[outer_index], f"{name} branch input {k}")
        for k, inner in enumerate(outs):
            _require_compatible(v, inner, v.outputs[k], f"{name} branch output {k}")
    return HalVersion.V1_3


def execute_if(ctx: ExecutionContext) -> None:
    condition = bool(ctx.tensor(IF_CONDITION).reshape(-1)[0])
    branch = ctx.scalar(IF_THEN if condition else IF_ELSE)
    inputs = [ctx.tensor(i) for i in range(IF_FIRST_INPUT, len(ctx.inputs))]
    outputs = ctx.control.run_subgraph(int(branch), inputs)
    _set_outputs(ctx, outputs)


def _set_outputs(ctx: ExecutionContext, values: Sequence[np.ndarray]) -> None:
    if len(values) < len(ctx.out_operands):
        ctx.fail(f"subgraph produced {len(values)} outputs, expected {len(ctx.out_operands)}")
    for k in range(len(ctx.out_operands)):
        ctx.set_output(k, values[k])


# -- WHILE ------------------------------------------------------------------------
def validate_while(v: ValidationContext) -> HalVersion:
    v.require(v.num_inputs >= 3, f"expected at least 3 inputs, got {v.num_inputs}")
    v.require(v.num_outputs >= 1, f"expected at least 1 output, got {v.num_outputs}")
    for i in range(WHILE_FIRST_INPUT, v.num_inputs):
        if v.is_omitted(i):
            v.fail(f"input {i} has no value")
    outer_inputs = v.inputs[WHILE_FIRST_INPUT:]

    cond = _subgraph_reference(v, WHILE_CONDITION, "condition")
    cond_ins, cond_outs = _inputs(cond), _outputs(cond)
    if len(cond_ins) != len(outer_inputs):
        v.fail(f"the condition takes {len(cond_ins)} inputs, the operation passes {len(outer_inputs)}")
    if len(cond_outs) != 1:
        v.fail(f"the condition must have exactly 1 output, it has {len(cond_outs)}")
    for k, inner in enumerate(cond_ins):
        _require_compatible(v, inner, outer_inputs[k], f"condition input {k}")
    _check_condition_operand(v, cond_outs[0], "the condition output")

    body = _subgraph_reference(v, WHILE_BODY, "body")
    body_ins, body_outs = _inputs(body), _outputs(body)
    m = v.num_outputs
    if len(body_ins) != len(outer_inputs):
        v.fail(f"the body takes {len(body_ins)} inputs, the operation passes {len(outer_inputs)}")
    if len(body_outs) < m:
        v.fail(f"the body has {len(body_outs)} outputs, fewer than the operation's {m}")
    if len(body_ins) < len(body_outs):
        v.fail(f"the body has more outputs ({len(body_outs)}) than inputs ({len(body_ins)})")
    for k, inner in enumerate(body_ins):
        _require_compatible(v, inner, outer_inputs[k], f"body input {k}")
    for k in range(m):
        _require_compatible(v, body_outs[k], v.outputs[k], f"body output {k}")
    for k, out in enumerate(body_outs):
        _require_compatible(v, body_ins[k], out, f"body input {k} versus body output {k}")
    return HalVersion.V1_3


def execute_while(ctx: ExecutionContext) -> None:
    control = ctx.control
    cond_index = int(ctx.scalar(WHILE_CONDITION))
    body_index = int(ctx.scalar(WHILE_BODY))
    values = [ctx.tensor(i) for i in range(WHILE_FIRST_INPUT, len(ctx.inputs))]
    timeout_ns = control.loop_timeout_ns
    start = time.monotonic_ns()
    while True:
        control.checkpoint()
        (condition,) = control.run_subgraph(cond_index, values)[:1]
        if not bool(np.asarray(condition).reshape(-1)[0]):
            break
        elapsed = time.monotonic_ns() - start
        if elapsed > timeout_ns:
            ctx.fail(
                f"loop ran {elapsed / 1e6:.3f} ms, over the loop timeout of {timeout_ns / 1e6:.3f} ms",
                MissedDeadlinePersistent,
            )
        carried = control.run_subgraph(body_index, values)
        if len(carried) > len(values):
            ctx.fail(f"body produced {len(carried)} outputs for {len(values)} inputs")
        values = [*carried, *values[len(carried) :]]
    _set_outputs(ctx, values)


register(OperationType.IF, validate=validate_if, execute=execute_if)
register(OperationType.WHILE, validate=validate_while, execute=execute_while)

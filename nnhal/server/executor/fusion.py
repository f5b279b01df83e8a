"""Graph rewrites made once at prepare, where the result is bit-identical to the model as written.

Activation folding: an operation with a fused-activation input (ADD, SUB, MUL, DIV, CONV_2D,
DEPTHWISE_CONV_2D, FULLY_CONNECTED) whose activation is the constant NONE, and whose only
consumer is a RELU / RELU1 / RELU6 writing an operand of the same type, shape, scale and zero
point, becomes that operation with the fused activation RELU / RELU1 / RELU6 writing the
activation's output directly. The clamp is then applied in place by the producer instead of by a
second operation over a second tensor. Exact because the standalone activation clamps to the same
bounds as the fused one: the float bounds (0, -1, 1, 6) are exact in every float type and
rounding is monotonic, and a quantized activation with the producer's scale and zero point
clamps to the same CalculateActivationRange bounds.

Operations are rewritten, never reordered beyond this: the folded activation's only input is
the producer's output, so running it as part of the producer changes no other operation's inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from nnhal.core.enums import FusedActivationFunc, OperandLifeTime, OperandType, OperationType
from nnhal.core.types import Operand, Subgraph

Op = OperationType
T = OperandType

_ACTIVATIONS = {
    Op.RELU: FusedActivationFunc.RELU,
    Op.RELU1: FusedActivationFunc.RELU1,
    Op.RELU6: FusedActivationFunc.RELU6,
}
_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
_CONSTANT = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)


@dataclass(frozen=True, slots=True)
class PlannedOperation:
    """One operation of the plan: the model's, or a rewritten one."""

    type: OperationType
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


def activation_input(op_type: OperationType, inputs: Sequence[int], operands: Sequence[Operand]) -> int | None:
    """The position of the fused-activation input of this operation, if it has one."""
    n = len(inputs)
    if op_type in (Op.ADD, Op.SUB, Op.MUL, Op.DIV):
        return 2 if n == 3 else None
    if op_type == Op.FULLY_CONNECTED:
        return 3 if n == 4 else None
    if op_type == Op.CONV_2D:
        explicit = n >= 10 and operands[inputs[7]].type == T.INT32
        return 9 if explicit else 6 if n >= 7 else None
    if op_type == Op.DEPTHWISE_CONV_2D:
        explicit = n >= 11 and operands[inputs[8]].type == T.INT32
        return 10 if explicit else 7 if n >= 8 else None
    return None


def fold_activations(
    sg: Subgraph, constants: list[np.ndarray | None]
) -> tuple[list[PlannedOperation], list[Operand], list[np.ndarray | None]]:
    """The plan of ``sg`` with standalone activations folded into their producers (see above).

    Returns the operations, the operands and the constants, both extended with the new
    activation-code constants (at indexes past the subgraph's own)."""
    operands = list(sg.operands)
    constants = list(constants)
    consumers = [0] * len(operands)
    for operation in sg.operations:
        for i in operation.inputs:
            consumers[i] += 1
    producer_of = {o: k for k, operation in enumerate(sg.operations) for o in operation.outputs}
    kept = set(sg.output_indexes) | set(sg.input_indexes)
    plan: list[PlannedOperation | None] = [
        PlannedOperation(o.type, tuple(o.inputs), tuple(o.outputs)) for o in sg.operations
    ]
    for k, operation in enumerate(sg.operations):
        func = _ACTIVATIONS.get(operation.type)
        if func is None or len(operation.inputs) != 1 or len(operation.outputs) != 1:
            continue
        source, target = operation.inputs[0], operation.outputs[0]
        p = producer_of.get(source)
        producer = plan[p] if p is not None else None
        if producer is None or len(producer.outputs) != 1 or consumers[source] != 1 or source in kept:
            continue
        mid, out = operands[source], operands[target]
        if (
            mid.lifetime != OperandLifeTime.TEMPORARY_VARIABLE
            or mid.type not in _TYPES
            or (out.type, out.dimensions, out.scale, out.zero_point)
            != (mid.type, mid.dimensions, mid.scale, mid.zero_point)
            or not all(mid.dimensions)
            or not mid.dimensions
        ):
            continue
        at = activation_input(producer.type, producer.inputs, operands)
        if at is None:
            continue
        code = operands[producer.inputs[at]]
        value = constants[producer.inputs[at]]
        if code.type != T.INT32 or code.lifetime not in _CONSTANT or value is None:
            continue
        if int(value.reshape(-1)[0]) != FusedActivationFunc.NONE:
            continue
        operands.append(replace(code, lifetime=OperandLifeTime.CONSTANT_COPY))
        constants.append(np.array(int(func), np.int32))
        inputs = list(producer.inputs)
        inputs[at] = len(operands) - 1
        plan[p] = PlannedOperation(producer.type, tuple(inputs), (target,))  # type: ignore[index]
        plan[k] = None
    return [o for o in plan if o is not None], operands, constants

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

Padding folding: a PAD (zeros; for quantized tensors the zero point) of only the H and W
dimensions of a static NHWC tensor whose only consumer is the input of a CONV_2D or
DEPTHWISE_CONV_2D (NHWC, constant parameters) becomes that convolution's explicit padding:
the convolution pads with zero after removing the input's zero point, the same values the
PAD wrote, and sees the same windows; the padded copy is never made.

Operations are rewritten, never reordered beyond this: the folded activation's only input is
the producer's output, so running it as part of the producer changes no other operation's inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from nnhal.core.enums import FusedActivationFunc, OperandLifeTime, OperandType, OperationType
from nnhal.core.types import Operand, Subgraph
from nnhal.server.executor.ops._padding import PADDING_CODES, implicit_padding

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


_PADS_FOLD_INTO = (Op.CONV_2D, Op.DEPTHWISE_CONV_2D)


def _static(operand: Operand) -> bool:
    return len(operand.dimensions) == 4 and all(d > 0 for d in operand.dimensions)


def _conv_padding(
    conv: PlannedOperation, operands: Sequence[Operand], constants: Sequence[np.ndarray | None], in_hw: tuple[int, int]
) -> tuple[bool, list[int]] | None:
    """(explicit, [left, right, top, bottom]) of a convolution whose parameters are all constant
    and whose layout is NHWC, for an input of ``in_hw``; None otherwise."""
    n = len(conv.inputs)
    depthwise = conv.type == Op.DEPTHWISE_CONV_2D
    implicit_count = 8 if depthwise else 7
    explicit = n >= implicit_count + 3 and operands[conv.inputs[implicit_count]].type == T.INT32
    values: list[int] = []
    for k in conv.inputs[3:]:
        value = constants[k]
        if operands[k].lifetime not in _CONSTANT or value is None or value.size != 1:
            return None
        values.append(int(value.reshape(-1)[0]))
    layout_at = (implicit_count + 3 if explicit else implicit_count) - 3
    if layout_at < len(values) and values[layout_at]:
        return None  # NCHW
    if explicit:
        return True, values[0:4]
    code, sw, sh = values[0], values[1], values[2]
    dilation_at = layout_at + 1
    dw, dh = (values[dilation_at], values[dilation_at + 1]) if dilation_at + 1 < len(values) else (1, 1)
    w = constants[conv.inputs[1]]
    if w is None or w.ndim != 4 or code not in PADDING_CODES or min(sw, sh, dw, dh) < 1:
        return None
    pt, pb = implicit_padding(in_hw[0], sh, dh, int(w.shape[1]), code)
    pl, pr = implicit_padding(in_hw[1], sw, dw, int(w.shape[2]), code)
    return False, [pl, pr, pt, pb]


def fold_pads(
    plan: list[PlannedOperation], operands: list[Operand], constants: list[np.ndarray | None], kept: set[int]
) -> list[PlannedOperation]:
    """``plan`` with zero PADs of H and W folded into the convolution they feed (see above);
    ``operands`` and ``constants`` are extended with the new padding constants."""
    consumers: dict[int, list[int]] = {}
    for k, operation in enumerate(plan):
        for i in operation.inputs:
            consumers.setdefault(i, []).append(k)
    out: list[PlannedOperation | None] = list(plan)
    for k, pad_op in enumerate(plan):
        if pad_op.type != Op.PAD or len(pad_op.inputs) != 2 or len(pad_op.outputs) != 1:
            continue
        source, mid = pad_op.inputs[0], pad_op.outputs[0]
        users = consumers.get(mid, [])
        if len(users) != 1 or mid in kept or out[users[0]] is None:
            continue
        conv = out[users[0]]
        assert conv is not None
        src, dst, pads = operands[source], operands[mid], constants[pad_op.inputs[1]]
        if (
            conv.type not in _PADS_FOLD_INTO
            or conv.inputs[0] != mid
            or mid in conv.inputs[1:]
            or dst.lifetime != OperandLifeTime.TEMPORARY_VARIABLE
            or src.type not in _TYPES
            or not (_static(src) and _static(dst))
            or operands[pad_op.inputs[1]].lifetime not in _CONSTANT
            or pads is None
            or pads.shape != (4, 2)
            or np.any(pads < 0)
            or np.any(pads[[0, 3]] != 0)
        ):
            continue
        padding = _conv_padding(conv, operands, constants, (dst.dimensions[1], dst.dimensions[2]))
        if padding is None:
            continue
        explicit, (pl, pr, pt, pb) = padding
        total = [pl + int(pads[2, 0]), pr + int(pads[2, 1]), pt + int(pads[1, 0]), pb + int(pads[1, 1])]
        pad_indexes = []
        for value in total:
            operands.append(Operand(T.INT32, (), lifetime=OperandLifeTime.CONSTANT_COPY))
            constants.append(np.array(value, np.int32))
            pad_indexes.append(len(operands) - 1)
        rest = conv.inputs[7:] if explicit else conv.inputs[4:]
        out[users[0]] = PlannedOperation(conv.type, (source, *conv.inputs[1:3], *pad_indexes, *rest), conv.outputs)
        out[k] = None
    return [o for o in out if o is not None]


def fold_activations(
    sg: Subgraph, constants: list[np.ndarray | None]
) -> tuple[list[PlannedOperation], list[Operand], list[np.ndarray | None]]:
    """The plan of ``sg`` with standalone activations folded into their producers and zero
    padding into the convolutions it feeds (see above).

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
    return fold_pads([o for o in plan if o is not None], operands, constants, kept), operands, constants

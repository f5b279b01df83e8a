"""Element-wise TFLite builtins -> NNAPI: arithmetic with a fused activation, comparisons,
logic, unary math and activations.

Broadcasting is numpy's in both. ADD/SUB/MUL/DIV carry their fused activation as NNAPI's
FuseCode (TANH as a separate operation, see ``Converter.emit_fused``). LEAKY_RELU is PRELU with
a one-element alpha, as in the delegate (for quantized inputs alpha is the value 1 at scale
``alpha``); ELU is ELU with alpha 1.0 (TFLite's ELU has no alpha).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tflite

from nnhal.core.enums import OperandType as T, OperationType as O
from nnhal.importers.converter import Converter, option
from nnhal.importers.reader import TfOperator
from nnhal.tflite_map.tables import FUSED_BINARY, SAME_OPERANDS

TT = tflite.TensorType
Mapper = Callable[[Converter, TfOperator], None]


def _binary_fused(kind: O) -> Mapper:
    def mapper(c: Converter, op: TfOperator) -> None:
        a, b = c.input(op.inputs[0]), c.input(op.inputs[1])
        c.emit_fused(kind, [a, b], option(op, "FusedActivationFunction", 0), op.outputs[0])

    return mapper


def _plain(kind: O) -> Mapper:
    """Same inputs in the same order, same outputs."""

    def mapper(c: Converter, op: TfOperator) -> None:
        c.emit(kind, [c.input(t) for t in op.inputs], [c.output(t) for t in op.outputs])

    return mapper


def leaky_relu(c: Converter, op: TfOperator) -> None:
    x = op.inputs[0]
    alpha = float(option(op, "Alpha", 0.2))
    kind = c.operand_type(x)[0]
    if kind == T.TENSOR_FLOAT32:
        a = c.b.constant(np.asarray([alpha], np.float32))
    else:
        a = c.b.constant(np.asarray([1], np.uint8 if kind == T.TENSOR_QUANT8_ASYMM else np.int8), kind, alpha, 0)
    c.emit(O.PRELU, [c.input(x), a], [c.output(op.outputs[0])])


def elu(c: Converter, op: TfOperator) -> None:
    c.emit(O.ELU, [c.input(op.inputs[0]), c.f32(1.0)], [c.output(op.outputs[0])])


MAPPERS: dict[str, Mapper] = {
    **{name: _binary_fused(kind) for name, kind in FUSED_BINARY.items()},
    # DEQUANTIZE and QUANTIZE fold constants or insert a DEQUANTIZE (ops_misc).
    **{name: _plain(kind) for name, kind in SAME_OPERANDS.items() if name not in ("DEQUANTIZE", "QUANTIZE")},
    "LEAKY_RELU": leaky_relu,
    "ELU": elu,
}

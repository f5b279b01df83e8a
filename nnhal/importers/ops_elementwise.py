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


def _unary_names() -> dict[str, O]:
    return {
        "ABS": O.ABS,
        "EXP": O.EXP,
        "LOG": O.LOG,
        "SQRT": O.SQRT,
        "RSQRT": O.RSQRT,
        "SIN": O.SIN,
        "NEG": O.NEG,
        "FLOOR": O.FLOOR,
        "RELU": O.RELU,
        "RELU6": O.RELU6,
        "RELU_N1_TO_1": O.RELU1,
        "LOGISTIC": O.LOGISTIC,
        "TANH": O.TANH,
        "HARD_SWISH": O.HARD_SWISH,
        "LOGICAL_NOT": O.LOGICAL_NOT,
        "CAST": O.CAST,
    }


MAPPERS: dict[str, Mapper] = {
    "ADD": _binary_fused(O.ADD),
    "SUB": _binary_fused(O.SUB),
    "MUL": _binary_fused(O.MUL),
    "DIV": _binary_fused(O.DIV),
    "MAXIMUM": _plain(O.MAXIMUM),
    "MINIMUM": _plain(O.MINIMUM),
    "POW": _plain(O.POW),
    "LESS": _plain(O.LESS),
    "LESS_EQUAL": _plain(O.LESS_EQUAL),
    "GREATER": _plain(O.GREATER),
    "GREATER_EQUAL": _plain(O.GREATER_EQUAL),
    "EQUAL": _plain(O.EQUAL),
    "NOT_EQUAL": _plain(O.NOT_EQUAL),
    "LOGICAL_AND": _plain(O.LOGICAL_AND),
    "LOGICAL_OR": _plain(O.LOGICAL_OR),
    "SELECT": _plain(O.SELECT),
    "PRELU": _plain(O.PRELU),
    "LEAKY_RELU": leaky_relu,
    "ELU": elu,
    **{name: _plain(kind) for name, kind in _unary_names().items()},
}

"""Elementwise operations as ONNX: arithmetic with fused activations, activations, unary math.

Float32 maps one to one (NNAPI broadcasting is numpy's, as ONNX's). Quant8 operands
go through float: ``DequantizeLinear`` → op → ``QuantizeLinear`` (then the fused
activation's clamp in the quantized domain), which stays within one quantization
step of the reference's fixed-point arithmetic. int32 ADD / SUB / MUL (no
activation) are the ONNX integer ops. DIV of int32 is left out: NNAPI floors,
ONNX truncates.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import OperationType
from nnhal.server.ort.emit import FLOAT32, QUANT8, Converter, OpView, T, Unsupported

Op = OperationType


def _binary(onnx_op: str, int32: bool) -> Converter:
    def convert(v: OpView) -> None:
        v.require_static()
        allowed = (FLOAT32, *QUANT8, T.TENSOR_INT32) if int32 else (FLOAT32, *QUANT8)
        t = v.require_types(allowed)
        act = int(v.scalar(2))
        if t == T.TENSOR_INT32:
            if act != 0:
                raise Unsupported("int32 arithmetic takes no fused activation")
            v.produce(v.b.one(onnx_op, [v.value(0), v.value(1)]))
            return
        a = v.dequant(v.value(0), v.operand(0))
        b = v.dequant(v.value(1), v.operand(1))
        y = v.quant(v.b.one(onnx_op, [a, b]), v.out())
        v.produce(v.fused(y, act, v.out()))

    return convert


def _minmax(onnx_op: str) -> Converter:
    def convert(v: OpView) -> None:
        v.require_static()
        v.require_types((FLOAT32, *QUANT8, T.TENSOR_INT32))
        a = v.dequant(v.value(0), v.operand(0))
        b = v.dequant(v.value(1), v.operand(1))
        v.produce(v.quant(v.b.one(onnx_op, [a, b]), v.out()))

    return convert


def _clamp(lo: float | None, hi: float | None) -> Converter:
    def convert(v: OpView) -> None:
        v.require_static()
        v.require_types((FLOAT32, *QUANT8))
        x = v.dequant(v.value(0), v.operand(0))
        if hi is None:
            y = v.b.one("Relu", [x])
        else:
            y = v.b.one("Clip", [x, v.b.const(np.float32(lo)), v.b.const(np.float32(hi))])
        v.produce(v.quant(y, v.out()))

    return convert


def _unary(*onnx_ops: str, quant: bool = False) -> Converter:
    def convert(v: OpView) -> None:
        v.require_static()
        v.require_types((FLOAT32, *QUANT8) if quant else (FLOAT32,))
        y = v.dequant(v.value(0), v.operand(0))
        for op in onnx_ops:
            y = v.b.one(op, [y])
        v.produce(v.quant(y, v.out()))

    return convert


CONVERTERS: dict[OperationType, Converter] = {
    Op.ADD: _binary("Add", int32=True),
    Op.SUB: _binary("Sub", int32=True),
    Op.MUL: _binary("Mul", int32=True),
    Op.DIV: _binary("Div", int32=False),
    Op.MAXIMUM: _minmax("Max"),
    Op.MINIMUM: _minmax("Min"),
    Op.RELU: _clamp(0.0, None),
    Op.RELU1: _clamp(-1.0, 1.0),
    Op.RELU6: _clamp(0.0, 6.0),
    Op.LOGISTIC: _unary("Sigmoid", quant=True),
    Op.TANH: _unary("Tanh", quant=True),
    Op.ABS: _unary("Abs"),
    Op.EXP: _unary("Exp"),
    Op.LOG: _unary("Log"),
    Op.SQRT: _unary("Sqrt"),
    Op.RSQRT: _unary("Sqrt", "Reciprocal"),
    Op.NEG: _unary("Neg"),
    Op.SIN: _unary("Sin"),
    Op.FLOOR: _unary("Floor"),
}

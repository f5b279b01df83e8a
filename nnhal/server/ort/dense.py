"""Dense and shape operations as ONNX: FULLY_CONNECTED, RESHAPE, SOFTMAX, CONCATENATION, TRANSPOSE.

FULLY_CONNECTED flattens its input to ``[batch, input_size]``; float32 is ``Gemm``,
quant8 a 1x1 ``QLinearConv`` (the only QLinear form with NNAPI's int32 bias).
Quantized SOFTMAX and a CONCATENATION whose inputs are quantized differently
from the output go through float (``DequantizeLinear`` → op → ``QuantizeLinear``):
the results stay within one quantization step of the reference.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import OperationType
from nnhal.server.ort.emit import FLOAT32, QUANT8, Converter, OpView, T, Unsupported

Op = OperationType
_ANY = (FLOAT32, *QUANT8, T.TENSOR_INT32)


def fully_connected(v: OpView) -> None:
    v.require_static()
    t = v.require_types((FLOAT32, *QUANT8))
    w = v.const(1)  # [units, input_size]
    units, size = w.shape
    out = v.out()
    batch = out.dimensions[0]
    act = int(v.scalar(3))
    x2 = v.b.one("Reshape", [v.value(0), v.b.const(np.array([batch, size], np.int64))])
    if t == FLOAT32:
        bias = v.b.const(np.zeros(units, np.float32)) if v.is_omitted(2) else v.value(2)
        y = v.b.one("Gemm", [x2, v.b.const(w), bias], transB=1)
        v.produce(v.fused(y, act, out))
        return
    if v.operand(1).type != t:
        raise Unsupported(f"{v.operand(1).type.name} weights with {t.name} inputs")
    bias = v.b.const(np.zeros(units, np.int32)) if v.is_omitted(2) else v.value(2)
    x4 = v.b.one("Reshape", [x2, v.b.const(np.array([batch, size, 1, 1], np.int64))])
    inputs = [x4, *v.qparams(v.operand(0)), v.b.const(w.reshape(units, size, 1, 1)), *v.qparams(v.operand(1))]
    y = v.b.one("QLinearConv", [*inputs, *v.qparams(out), bias])
    y = v.b.one("Reshape", [y, v.b.const(np.array([batch, units], np.int64))])
    v.produce(v.fused(y, act, out))


def reshape(v: OpView) -> None:
    v.require_static()
    v.require_types(_ANY)
    _same_quant(v, 0)
    v.produce(v.b.one("Reshape", [v.value(0), v.b.const(np.array(v.out().dimensions, np.int64))]))


def _same_quant(v: OpView, k: int) -> bool:
    a, out = v.operand(k), v.out()
    same = a.type not in QUANT8 or (a.scale, a.zero_point) == (out.scale, out.zero_point)
    if not same and v.operation.type == Op.RESHAPE:
        raise Unsupported("RESHAPE with different input and output quantization")
    return same


def softmax(v: OpView) -> None:
    v.require_static()
    v.require_types((FLOAT32, *QUANT8))
    beta = float(v.scalar(1))
    rank = len(v.operand(0).dimensions)
    axis = int(v.scalar(2, -1)) if not v.is_omitted(2) else -1
    if not -rank <= axis < rank:
        raise Unsupported(f"axis {axis} out of range")
    x = v.dequant(v.value(0), v.operand(0))
    if beta != 1.0:
        x = v.b.one("Mul", [x, v.b.const(np.float32(beta))])
    v.produce(v.quant(v.b.one("Softmax", [x], axis=axis), v.out()))


def concatenation(v: OpView) -> None:
    v.require_static()
    v.require_types(_ANY)
    n = v.n_inputs - 1
    rank = len(v.out().dimensions)
    axis = int(v.scalar(n))
    axis = axis + rank if axis < 0 else axis
    if all(_same_quant(v, k) for k in range(n)):
        v.produce(v.b.one("Concat", [v.value(k) for k in range(n)], axis=axis))
        return
    parts = [v.dequant(v.value(k), v.operand(k)) for k in range(n)]
    v.produce(v.quant(v.b.one("Concat", parts, axis=axis), v.out()))


def transpose(v: OpView) -> None:
    v.require_static()
    v.require_types(_ANY)
    rank = len(v.operand(0).dimensions)
    perm = list(range(rank))[::-1] if v.is_omitted(1) else [int(p) for p in v.const(1).reshape(-1)]
    if sorted(perm) != list(range(rank)):
        raise Unsupported(f"permutation {perm} is not a permutation of {rank} axes")
    if _same_quant(v, 0):
        v.produce(v.b.one("Transpose", [v.value(0)], perm=perm))
        return
    y = v.b.one("Transpose", [v.dequant(v.value(0), v.operand(0))], perm=perm)
    v.produce(v.quant(y, v.out()))


CONVERTERS: dict[OperationType, Converter] = {
    Op.FULLY_CONNECTED: fully_connected,
    Op.RESHAPE: reshape,
    Op.SOFTMAX: softmax,
    Op.CONCATENATION: concatenation,
    Op.TRANSPOSE: transpose,
}

"""Selection, comparison, reduction and a few activations as ONNX: ARGMAX, ARGMIN, GATHER,
the comparisons, LOGICAL_*, SELECT, REDUCE_*, PRELU, HARD_SWISH, ELU.

Comparisons and arg-max/min of quant8 values compare the real values (dequantized
when the two inputs are quantized differently; the order of one tensor's quantized
values is its real order). ONNX's ArgMax returns int64 and the first index of a tie,
as NNAPI: it is cast to int32. ONNX has no reduction over booleans: REDUCE_ALL/ANY
reduce the values cast to int32.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import OperationType
from nnhal.server.ort.emit import FLOAT32, QUANT8, Converter, OpView, T, Unsupported

Op = OperationType
_NUMERIC = (FLOAT32, *QUANT8, T.TENSOR_INT32)
_INT32, _BOOL = 6, 9


def _arg(onnx_op: str) -> Converter:
    def convert(v: OpView) -> None:
        v.require_static()
        v.require_types(_NUMERIC)
        rank = len(v.operand(0).dimensions)
        axis = int(v.scalar(1)) % rank
        x = v.value(0)
        if v.operand(0).type in QUANT8:  # the quantized order is the real order; float is exact
            x = v.b.one("Cast", [x], to=1)
        y = v.b.one(onnx_op, [x], axis=axis, keepdims=0)
        v.produce(v.b.one("Cast", [y], to=_INT32))

    return convert


def gather(v: OpView) -> None:
    v.require_static()
    v.require_types(_NUMERIC)
    a, out = v.operand(0), v.out()
    if a.type in QUANT8 and (a.scale, a.zero_point) != (out.scale, out.zero_point):
        raise Unsupported("GATHER with different input and output quantization")
    rank = len(a.dimensions)
    v.produce(v.b.one("Gather", [v.value(0), v.value(2)], axis=int(v.scalar(1)) % rank))


def _pair(v: OpView) -> tuple[str, str]:
    """Both inputs, quant8 ones dequantized (float32 holds every such value exactly)."""
    return v.dequant(v.value(0), v.operand(0)), v.dequant(v.value(1), v.operand(1))


def _compare(onnx_op: str, negate: bool = False) -> Converter:
    def convert(v: OpView) -> None:
        v.require_static()
        allowed = (*_NUMERIC, T.TENSOR_BOOL8) if onnx_op == "Equal" else _NUMERIC
        v.require_types(allowed)
        y = v.b.one(onnx_op, list(_pair(v)))
        v.produce(v.b.one("Not", [y]) if negate else y)

    return convert


def _logical(onnx_op: str) -> Converter:
    def convert(v: OpView) -> None:
        v.require_static()
        v.require_types((T.TENSOR_BOOL8,))
        n = 1 if onnx_op == "Not" else 2
        v.produce(v.b.one(onnx_op, [v.value(k) for k in range(n)]))

    return convert


def select(v: OpView) -> None:
    v.require_static()
    v.require_types(_NUMERIC, 1)
    a, b, out = v.operand(1), v.operand(2), v.out()
    if a.type not in QUANT8:
        v.produce(v.b.one("Where", [v.value(0), v.value(1), v.value(2)]))
        return
    y = v.b.one("Where", [v.value(0), v.dequant(v.value(1), a), v.dequant(v.value(2), b)])
    v.produce(v.quant(y, out))


def _reduce(onnx_op: str, types: tuple[T, ...]) -> Converter:
    def convert(v: OpView) -> None:
        v.require_static()
        t = v.require_types(types)
        a, out = v.operand(0), v.out()
        if t in QUANT8 and (a.scale, a.zero_point) != (out.scale, out.zero_point):
            raise Unsupported("quantized reduction with different input and output quantization")
        rank = len(a.dimensions)
        axes = sorted({int(x) % rank for x in v.const(1).reshape(-1)})
        keep = 1 if bool(v.scalar(2)) else 0
        x = v.dequant(v.value(0), a)  # quant8: exact in float, and back with the same parameters
        if t == T.TENSOR_BOOL8:
            x = v.b.one("Cast", [x], to=_INT32)
        if onnx_op == "ReduceSum":  # axes became an input in opset 13
            y = v.b.one(onnx_op, [x, v.b.const(np.array(axes, np.int64))], keepdims=keep)
        else:
            y = v.b.one(onnx_op, [x], axes=axes, keepdims=keep)
        y = v.b.one("Cast", [y], to=_BOOL) if t == T.TENSOR_BOOL8 else v.quant(y, out)
        # Reducing every axis without keeping them is [1] in NNAPI, a scalar in ONNX.
        v.produce(v.b.one("Reshape", [y, v.b.const(np.array(out.dimensions, np.int64))]))

    return convert


def prelu(v: OpView) -> None:
    v.require_static()
    v.require_types((FLOAT32, *QUANT8))
    if v.out().dimensions != v.operand(0).dimensions:
        raise Unsupported("alpha broadcast beyond the input's shape")
    x = v.dequant(v.value(0), v.operand(0))
    alpha = v.dequant(v.value(1), v.operand(1))
    v.produce(v.quant(v.b.one("PRelu", [x, alpha]), v.out()))


def hard_swish(v: OpView) -> None:
    v.require_static()
    v.require_types((FLOAT32, *QUANT8))
    x = v.dequant(v.value(0), v.operand(0))
    v.produce(v.quant(v.b.one("HardSwish", [x]), v.out()))


def elu(v: OpView) -> None:
    v.require_static()
    v.require_types((FLOAT32,))
    v.produce(v.b.one("Elu", [v.value(0)], alpha=float(v.scalar(1))))


CONVERTERS: dict[OperationType, Converter] = {
    Op.ARGMAX: _arg("ArgMax"),
    Op.ARGMIN: _arg("ArgMin"),
    Op.GATHER: gather,
    Op.EQUAL: _compare("Equal"),
    Op.NOT_EQUAL: _compare("Equal", negate=True),
    Op.GREATER: _compare("Greater"),
    Op.GREATER_EQUAL: _compare("GreaterOrEqual"),
    Op.LESS: _compare("Less"),
    Op.LESS_EQUAL: _compare("LessOrEqual"),
    Op.LOGICAL_AND: _logical("And"),
    Op.LOGICAL_OR: _logical("Or"),
    Op.LOGICAL_NOT: _logical("Not"),
    Op.SELECT: select,
    Op.REDUCE_MAX: _reduce("ReduceMax", (FLOAT32, *QUANT8)),
    Op.REDUCE_MIN: _reduce("ReduceMin", (FLOAT32, *QUANT8)),
    Op.REDUCE_SUM: _reduce("ReduceSum", (FLOAT32,)),
    Op.REDUCE_PROD: _reduce("ReduceProd", (FLOAT32,)),
    Op.REDUCE_ALL: _reduce("ReduceMin", (T.TENSOR_BOOL8,)),
    Op.REDUCE_ANY: _reduce("ReduceMax", (T.TENSOR_BOOL8,)),
    Op.PRELU: prelu,
    Op.HARD_SWISH: hard_swish,
    Op.ELU: elu,
}

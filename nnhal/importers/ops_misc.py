"""Normalisation, reductions, quantization and lookups: TFLite builtins -> NNAPI.

DEQUANTIZE of a constant (float16 weights, int8/uint8 weights) is folded into a float32
constant, as the delegate does for float16 (for quantized constants the folded value is exactly
what NNAPI's DEQUANTIZE computes, ``(q - zero_point) * scale``); DENSIFY of a constant is folded
the same way (the reader already densified the sparse buffer). A DEQUANTIZE of a computed float16
tensor is a CAST. QUANTIZE of an already quantized input is DEQUANTIZE then QUANTIZE (NNAPI
only quantizes from float). Reductions need constant axes and a non-scalar output, as in the
delegate; MEAN on quantized tensors needs equal input and output quantization.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tflite

from nnhal.core.enums import OperandType as T, OperationType as O
from nnhal.importers.converter import Converter, option
from nnhal.importers.errors import Unmappable
from nnhal.importers.ops_conv import dequantized
from nnhal.importers.reader import TfOperator

TT = tflite.TensorType
Mapper = Callable[[Converter, TfOperator], None]


def softmax(c: Converter, op: TfOperator) -> None:
    beta = c.f32(option(op, "Beta", 1.0))
    c.emit(O.SOFTMAX, [c.input(op.inputs[0]), beta], [c.output(op.outputs[0])])


def log_softmax(c: Converter, op: TfOperator) -> None:
    c.emit(O.LOG_SOFTMAX, [c.input(op.inputs[0]), c.f32(1.0), c.i32(-1)], [c.output(op.outputs[0])])


def l2_normalization(c: Converter, op: TfOperator) -> None:
    ins = [c.input(op.inputs[0])]
    c.maybe_fused_after(O.L2_NORMALIZATION, ins, option(op, "FusedActivationFunction", 0), op.outputs[0])


def local_response_normalization(c: Converter, op: TfOperator) -> None:
    ins = [c.input(op.inputs[0]), c.i32(option(op, "Radius", 5))]
    ins += [c.f32(option(op, name, default)) for name, default in (("Bias", 1.0), ("Alpha", 1.0), ("Beta", 0.5))]
    c.emit(O.LOCAL_RESPONSE_NORMALIZATION, ins, [c.output(op.outputs[0])])


def _axes(c: Converter, op: TfOperator) -> int:
    if not c.tensor_info(op.outputs[0]).shape:
        raise Unmappable("a scalar output (every axis reduced, keep_dims false) has no NNAPI form")
    return c.b.constant(np.asarray(c.ints(op.inputs[1], "the axes"), np.int32))


def mean(c: Converter, op: TfOperator) -> None:
    x, out = c.tensor_info(op.inputs[0]), c.tensor_info(op.outputs[0])
    if x.quant is not None and (x.quant != out.quant):
        raise Unmappable("MEAN on quantized tensors needs the same input and output quantization in NNAPI")
    keep = c.i32(1 if option(op, "KeepDims", False) else 0)
    c.emit(O.MEAN, [c.input(op.inputs[0]), _axes(c, op), keep], [c.output(op.outputs[0])])


def _reduce(kind: O) -> Mapper:
    def mapper(c: Converter, op: TfOperator) -> None:
        keep = c.boolean(bool(option(op, "KeepDims", False)))
        c.emit(kind, [c.input(op.inputs[0]), _axes(c, op), keep], [c.output(op.outputs[0])])

    return mapper


def _arg(kind: O) -> Mapper:
    def mapper(c: Converter, op: TfOperator) -> None:
        if c.tensor_info(op.outputs[0]).type != TT.INT32:
            raise Unmappable("NNAPI's ARGMAX/ARGMIN output int32 only")
        (axis,) = c.ints(op.inputs[1], "the axis")
        c.emit(kind, [c.input(op.inputs[0]), c.i32(axis)], [c.output(op.outputs[0])])

    return mapper


def topk_v2(c: Converter, op: TfOperator) -> None:
    (k,) = c.ints(op.inputs[1], "k")
    c.emit(O.TOPK_V2, [c.input(op.inputs[0]), c.i32(k)], [c.output(t) for t in op.outputs])


def dequantize(c: Converter, op: TfOperator) -> None:
    x, out = op.inputs[0], op.outputs[0]
    if c.value(x) is not None:
        c.fold(out, dequantized(c, x))
        return
    if c.tensor_info(x).type == TT.FLOAT16:
        c.emit(O.CAST, [c.input(x)], [c.output(out)])
        return
    c.emit(O.DEQUANTIZE, [c.input(x)], [c.output(out)])


def quantize(c: Converter, op: TfOperator) -> None:
    x, out = op.inputs[0], op.outputs[0]
    source = c.input(x)
    if c.operand_type(x)[0] not in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        real = c.b.add_operand(T.TENSOR_FLOAT32, c.shape(x))
        c.emit(O.DEQUANTIZE, [source], [real])
        source = real
    c.emit(O.QUANTIZE, [source], [c.output(out)])


def densify(c: Converter, op: TfOperator) -> None:
    c.fold(op.outputs[0], c.const(op.inputs[0], "DENSIFY's input"))


def fill(c: Converter, op: TfOperator) -> None:
    dims = c.b.constant(np.asarray(c.ints(op.inputs[0], "the dimensions"), np.int32))
    (value,) = np.asarray(c.const(op.inputs[1], "the fill value")).reshape(-1)[:1].tolist()
    kind = c.operand_type(op.outputs[0])[0]
    scalar = c.f32(value) if kind == T.TENSOR_FLOAT32 else c.i32(int(value))
    c.emit(O.FILL, [dims, scalar], [c.output(op.outputs[0])])


def embedding_lookup(c: Converter, op: TfOperator) -> None:
    c.emit(O.EMBEDDING_LOOKUP, [c.input(op.inputs[0]), c.input(op.inputs[1])], [c.output(op.outputs[0])])


def hashtable_lookup(c: Converter, op: TfOperator) -> None:
    ins = [c.input(t) for t in op.inputs[:3]]
    c.emit(O.HASHTABLE_LOOKUP, ins, [c.output(t) for t in op.outputs[:2]])


MAPPERS: dict[str, Mapper] = {
    "SOFTMAX": softmax,
    "LOG_SOFTMAX": log_softmax,
    "L2_NORMALIZATION": l2_normalization,
    "LOCAL_RESPONSE_NORMALIZATION": local_response_normalization,
    "MEAN": mean,
    "SUM": _reduce(O.REDUCE_SUM),
    "REDUCE_PROD": _reduce(O.REDUCE_PROD),
    "REDUCE_MAX": _reduce(O.REDUCE_MAX),
    "REDUCE_MIN": _reduce(O.REDUCE_MIN),
    "REDUCE_ANY": _reduce(O.REDUCE_ANY),
    "ARG_MAX": _arg(O.ARGMAX),
    "ARG_MIN": _arg(O.ARGMIN),
    "TOPK_V2": topk_v2,
    "DEQUANTIZE": dequantize,
    "QUANTIZE": quantize,
    "DENSIFY": densify,
    "FILL": fill,
    "EMBEDDING_LOOKUP": embedding_lookup,
    "HASHTABLE_LOOKUP": hashtable_lookup,
}

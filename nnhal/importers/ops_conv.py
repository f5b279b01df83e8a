"""Convolutions, fully connected and pooling: TFLite builtins -> NNAPI operations.

Conventions shared with NNAPI, so weights pass through unchanged: CONV_2D filters are
``[out, h, w, in]``, DEPTHWISE_CONV_2D filters ``[1, h, w, out]``, FULLY_CONNECTED weights
``[units, in]``, TRANSPOSE_CONV filters ``[out, h, w, in]``; all activations NHWC. Padding is the
implicit form (TFLite SAME/VALID -> NNAPI SAME 1 / VALID 2, the same head = total / 2 rule),
strides are passed width first as NNAPI orders them, dilation adds ``layout=false`` and the two
factors (NNAPI 1.2). A missing bias becomes a zero bias (NNAPI requires one), float32 for float
models, int32 with scale ``input_scale * filter_scale`` (0 for per-channel filters) for quantized
ones. Float models with quantized weights ("hybrid") get the weights dequantized to float32 at
import time, as the delegate's DEQUANTIZE of them would at run time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tflite

from nnhal.core.enums import OperandType as T, OperationType as O
from nnhal.importers.converter import Converter, option
from nnhal.importers.errors import Unmappable
from nnhal.importers.reader import TfOperator
from nnhal.tflite_map.tables import PADDING_CODE

TT = tflite.TensorType
Mapper = Callable[[Converter, TfOperator], None]


def dequantized(c: Converter, t: int) -> np.ndarray:
    """Constant tensor ``t`` as float32 real values ((q - zero_point) * scale, per channel if so)."""
    value = c.const(t, "the weights")
    info = c.tensor_info(t)
    if value.dtype.kind == "f":
        return value.astype(np.float32)
    q = info.quant
    if q is None:
        raise Unmappable(f"quantized constant '{info.name}' has no quantization parameters")
    shape = [1] * value.ndim
    if q.per_channel:
        shape[q.axis] = len(q.scales)
    scales = np.asarray(q.scales, np.float32).reshape(shape)
    zps = np.asarray(q.zero_points, np.float32).reshape(shape)
    return ((value.astype(np.float32) - zps) * scales).astype(np.float32)


def _weights(c: Converter, w: int, x: int) -> int:
    if c.tensor_info(x).type == TT.FLOAT32 and c.tensor_info(w).type in (TT.INT8, TT.UINT8):
        c.fold(w, dequantized(c, w))
    return c.input(w)


def _bias(c: Converter, op: TfOperator, at: int, x: int, w: int, channels: int) -> int:
    """The bias operand: the model's, re-scaled as NNAPI requires, or zeros when omitted."""
    b = op.inputs[at] if len(op.inputs) > at else -1
    wtype = c.operand_type(w)
    if wtype[0] in (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16):
        if b < 0:
            return c.b.constant(np.zeros(channels, np.float32 if wtype[0] == T.TENSOR_FLOAT32 else np.float16))
        return c.input(b)
    value = np.zeros(channels, np.int32) if b < 0 else c.const(b, "a quantized bias").astype(np.int32)
    # NNAPI checks bias_scale == input_scale * filter_scale; per-channel filters take scale 0.
    scale = 0.0 if wtype[0] == T.TENSOR_QUANT8_SYMM_PER_CHANNEL else c.operand_type(x)[1] * wtype[1]
    return c.b.constant(value.reshape(channels), T.TENSOR_INT32, scale)


def _dilation(c: Converter, op: TfOperator) -> list[int]:
    dw, dh = option(op, "DilationWFactor", 1), option(op, "DilationHFactor", 1)
    if dw == 1 and dh == 1:
        return []
    return [c.boolean(False), c.i32(dw), c.i32(dh)]


def _implicit(c: Converter, op: TfOperator) -> list[int]:
    padding = option(op, "Padding", tflite.Padding.SAME)
    if padding not in PADDING_CODE:
        raise Unmappable(f"padding {padding} is neither SAME nor VALID")
    return [c.i32(PADDING_CODE[padding]), c.i32(option(op, "StrideW", 1)), c.i32(option(op, "StrideH", 1))]


def conv_2d(c: Converter, op: TfOperator) -> None:
    x, w = op.inputs[0], op.inputs[1]
    ins = [c.input(x), _weights(c, w, x), _bias(c, op, 2, x, w, c.shape(w)[0]), *_implicit(c, op)]
    c.emit_fused(O.CONV_2D, ins, option(op, "FusedActivationFunction", 0), op.outputs[0], _dilation(c, op))


def depthwise_conv_2d(c: Converter, op: TfOperator) -> None:
    x, w = op.inputs[0], op.inputs[1]
    channels_in, channels_out = c.shape(x)[-1], c.shape(w)[-1]
    if channels_out % channels_in:
        raise Unmappable(f"{channels_out} output channels are not a multiple of {channels_in} input channels")
    # TFLite's kernel derives the multiplier from the shapes (older files carry a stale option).
    multiplier = channels_out // channels_in
    ins = [c.input(x), _weights(c, w, x), _bias(c, op, 2, x, w, channels_out), *_implicit(c, op), c.i32(multiplier)]
    c.emit_fused(O.DEPTHWISE_CONV_2D, ins, option(op, "FusedActivationFunction", 0), op.outputs[0], _dilation(c, op))


def fully_connected(c: Converter, op: TfOperator) -> None:
    x, w, out = op.inputs[0], op.inputs[1], op.outputs[0]
    if option(op, "WeightsFormat", 0) != tflite.FullyConnectedOptionsWeightsFormat.DEFAULT:
        raise Unmappable("shuffled (SHUFFLED4x16INT8) weights have no NNAPI layout")
    units = c.shape(w)[0]
    q = c.tensor_info(w).quant
    if q is not None and q.per_channel and c.tensor_info(x).type != TT.FLOAT32:
        raise Unmappable("per-channel quantized weights: NNAPI's FULLY_CONNECTED takes one weight scale")
    ins = [c.input(x), _weights(c, w, x), _bias(c, op, 2, x, w, units)]
    activation = option(op, "FusedActivationFunction", 0)
    out_shape = c.shape(out)
    if len(out_shape) == 2:
        c.emit_fused(O.FULLY_CONNECTED, ins, activation, out)
        return
    # keep_num_dims: NNAPI's output is [batch, units]; a RESHAPE restores TFLite's shape.
    inner = c.temporary(out, [int(np.prod(out_shape[:-1])), units])
    c.emit(O.FULLY_CONNECTED, [*ins, c.i32(c.fuse_code(activation))], [inner])
    c.emit(O.RESHAPE, [inner, c.b.constant(np.asarray(out_shape, np.int32))], [c.output(out)])


def transpose_conv(c: Converter, op: TfOperator) -> None:
    shape_t, w, x = op.inputs[0], op.inputs[1], op.inputs[2]
    output_shape = c.ints(shape_t, "the output shape")
    if c.tensor_info(x).type == TT.INT8:
        c.per_channel_forced.add(w)  # the delegate's NN_TENSOR_FLAG_FORCE_PER_CHANNEL
    ins = [c.input(x), _weights(c, w, x), _bias(c, op, 3, x, w, output_shape[-1])]
    ins += [c.b.constant(np.asarray(output_shape, np.int32)), *_implicit(c, op)]
    # TRANSPOSE_CONV gained a fused activation in operator version 4; older files have none.
    activation = option(op, "FusedActivationFunction", 0)
    c.emit_fused(O.TRANSPOSE_CONV_2D, ins, activation, op.outputs[0], [c.boolean(False)])


def _pool(kind: O) -> Mapper:
    def mapper(c: Converter, op: TfOperator) -> None:
        ins = [c.input(op.inputs[0]), *_implicit(c, op)]
        ins += [c.i32(option(op, "FilterWidth", 1)), c.i32(option(op, "FilterHeight", 1))]
        c.emit_fused(kind, ins, option(op, "FusedActivationFunction", 0), op.outputs[0])

    return mapper


MAPPERS: dict[str, Mapper] = {
    "CONV_2D": conv_2d,
    "DEPTHWISE_CONV_2D": depthwise_conv_2d,
    "FULLY_CONNECTED": fully_connected,
    "TRANSPOSE_CONV": transpose_conv,
    "AVERAGE_POOL_2D": _pool(O.AVERAGE_POOL_2D),
    "MAX_POOL_2D": _pool(O.MAX_POOL_2D),
    "L2_POOL_2D": _pool(O.L2_POOL_2D),
}

"""Conversions of the spatial operations to TFLite: convolutions (explicit padding that is not
SAME or VALID becomes a PAD before a VALID convolution), pooling, FULLY_CONNECTED. The
operators they write and their options follow the importer's mapping run backwards.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.core.enums import OperandType as T, OperationType as O
from nnhal.core.types import Operation
from nnhal.server.compiling import Unsupported
from nnhal.server.executor.ops._padding import PADDING_SAME, PADDING_VALID, implicit_padding
from nnhal.server.litert.graph import TfliteGraph
from nnhal.tflite_map.tables import PADDING, TENSOR_TYPE
from nnhal.tflite_map.writer import Quant

_TO_NHWC, _TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _nhwc_in(g: TfliteGraph, x: int, nchw: bool) -> tuple[int, tuple[int, ...]]:
    """(tensor, dims) of operand ``x`` in NHWC: itself, or a TRANSPOSE of an NCHW one."""
    dims = g.dims(x)
    if not nchw:
        return g.tensor(x), dims
    if len(dims) != 4:
        raise Unsupported("an NCHW operand that is not rank 4")
    shape = tuple(dims[i] for i in _TO_NHWC)
    t = g.temporary(x, shape)
    perm = g.constant(np.asarray(_TO_NHWC, np.int32), TENSOR_TYPE[T.TENSOR_INT32])
    g.emit("TRANSPOSE", [g.tensor(x), perm], [t])
    return t, shape


def _nhwc_out(g: TfliteGraph, out: int, nchw: bool) -> tuple[int, Callable[[], None]]:
    """(tensor to write NHWC results into, what to emit after the operation): operand
    ``out`` itself, or a temporary TRANSPOSEd into an NCHW ``out``."""
    if not nchw:
        return g.tensor(out), lambda: None
    dims = g.dims(out)
    t = g.temporary(out, tuple(dims[i] for i in _TO_NHWC))

    def finish() -> None:
        perm = g.constant(np.asarray(_TO_NCHW, np.int32), TENSOR_TYPE[T.TENSOR_INT32])
        g.emit("TRANSPOSE", [t, perm], [g.tensor(out)])

    return t, finish


def _padding(
    dims: tuple[int, ...], pads: tuple[int, int, int, int] | None, code: int, window: tuple[int, int, int, int]
) -> tuple[int, tuple[int, int, int, int]]:
    """(TFLite padding, explicit pads still to apply) for an NHWC input of ``dims``; ``window``
    is (filter w, filter h, stride w, stride h) with dilation folded in by the caller."""
    _, height, width, _ = dims
    fw, fh, sw, sh = window
    if pads is None:
        if code not in PADDING:
            raise Unsupported(f"padding code {code} is neither SAME nor VALID")
        return PADDING[code], (0, 0, 0, 0)
    left, right = implicit_padding(width, sw, 1, fw, PADDING_SAME)
    top, bottom = implicit_padding(height, sh, 1, fh, PADDING_SAME)
    if pads == (left, right, top, bottom):
        return PADDING[PADDING_SAME], (0, 0, 0, 0)
    return PADDING[PADDING_VALID], pads


def _spatial(g: TfliteGraph, operation: Operation, params: int) -> tuple[list[int], list[int], list[int]]:
    """([padding code] or the explicit [left, right, top, bottom], [stride w, stride h, *the
    ``params`` that follow], [fuse code, (layout, (dilation w, dilation h))]) of a 2-D
    operation whose first operands are ``x`` (and ``w, b`` for convolutions)."""
    ins = operation.inputs
    first = 3 if operation.type in (O.CONV_2D, O.DEPTHWISE_CONV_2D) else 1
    # Where the implicit form has its layout (BOOL, after the fuse code) the explicit form
    # has an INT32 (a stride or parameter), and the explicit form is the longer one.
    after_fuse = first + 1 + 2 + params + 1
    explicit = len(ins) >= first + 4 + 2 + params + 1 and g.operand(ins[after_fuse]).type == T.INT32
    n_pad = 4 if explicit else 1
    pad = [int(g.scalar(i, "the padding")) for i in ins[first : first + n_pad]]
    rest = ins[first + n_pad :]
    values = [int(g.scalar(i, "a stride or parameter")) for i in rest[: 2 + params]]
    tail = rest[2 + params :]
    return pad, values, list(tail)


def _layout_dilation(g: TfliteGraph, tail: list[int]) -> tuple[int, int, int, bool]:
    """(fuse code index, dilation w, dilation h, NCHW) from an operation's tail."""
    fuse, rest = tail[0], tail[1:]
    nchw = bool(rest) and bool(g.scalar(rest[0], "the layout"))
    dw, dh = (int(g.scalar(rest[1], "dilation")), int(g.scalar(rest[2], "dilation"))) if len(rest) >= 3 else (1, 1)
    return fuse, dw, dh, nchw


def _bias(g: TfliteGraph, b: int, x: int, w: int) -> int:
    """The bias tensor: as is for float; for quantized models with TFLite's scales
    (input scale x filter scale, per channel for per-channel filters)."""
    bias, filt = g.operand(b), g.operand(w)
    if bias.type != T.TENSOR_INT32:
        return g.tensor(b)
    value = g.value(b)
    if value is None:
        raise Unsupported("a quantized bias computed at run time")
    in_scale = g.operand(x).scale
    if filt.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        assert filt.channel_quant is not None
        scales = tuple(in_scale * s for s in filt.channel_quant.scales)
    else:
        scales = (in_scale * filt.scale,)
    return g.constant(
        value.astype(np.int32).reshape(-1), TENSOR_TYPE[T.TENSOR_INT32], Quant(scales, (0,) * len(scales))
    )


def _check_filter(g: TfliteGraph, x: int, w: int) -> None:
    xt, wt = g.operand(x), g.operand(w)
    if wt.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and xt.type != T.TENSOR_QUANT8_ASYMM_SIGNED:
        raise Unsupported("per-channel filters need int8 (QUANT8_ASYMM_SIGNED) activations in TFLite")
    if wt.type == T.TENSOR_QUANT8_ASYMM_SIGNED and wt.zero_point != 0:
        raise Unsupported("int8 filters must have zero point 0 in TFLite")
    if g.value(w) is None:
        raise Unsupported("a filter computed at run time")


def _pad_input(g: TfliteGraph, x: int, tensor: int, dims: tuple[int, ...], pads: tuple[int, int, int, int]) -> int:
    """NHWC ``tensor`` (operand ``x``'s values, ``dims``) zero-padded by explicit (left,
    right, top, bottom) pads."""
    if not any(pads):
        return tensor
    n, h, w, c = dims
    left, right, top, bottom = pads
    paddings = np.asarray([[0, 0], [top, bottom], [left, right], [0, 0]], np.int32)
    padded = g.temporary(x, (n, h + top + bottom, w + left + right, c))
    g.emit("PAD", [tensor, g.constant(paddings, TENSOR_TYPE[T.TENSOR_INT32])], [padded])
    return padded


def _conv_operands(
    g: TfliteGraph, operation: Operation, params: int
) -> tuple[list[int], int, Callable[[], None], list[int], dict[str, int]]:
    """What a 2-D convolution (``params`` scalars after the strides: 0 for CONV_2D, the
    multiplier for DEPTHWISE_CONV_2D) gives TFLite: its input tensors (NHWC input, explicitly
    padded when TFLite's padding cannot say it; filter; bias), its output tensor and the
    ``finish`` that lays it out, the ``params`` values, and the options both builtins share."""
    x, w, b = operation.inputs[:3]
    pad, values, tail = _spatial(g, operation, params)
    sw, sh = values[:2]
    fuse, dw, dh, nchw = _layout_dilation(g, tail)
    _check_filter(g, x, w)
    _, fh, fw, _ = g.dims(w)
    xt, xdims = _nhwc_in(g, x, nchw)
    padding, pads = _conv_padding(xdims, pad, (fw, fh, sw, sh), (dw, dh))
    inputs = [_pad_input(g, x, xt, xdims, pads), g.tensor(w), _bias(g, b, x, w)]
    out, finish = _nhwc_out(g, operation.outputs[0], nchw)
    options = {
        "Padding": padding,
        "StrideW": sw,
        "StrideH": sh,
        "FusedActivationFunction": g.activation(fuse),
        "DilationWFactor": dw,
        "DilationHFactor": dh,
    }
    return inputs, out, finish, values[2:], options


def conv_2d(g: TfliteGraph, operation: Operation) -> None:
    inputs, out, finish, _, options = _conv_operands(g, operation, 0)
    g.emit("CONV_2D", inputs, [out], "Conv2DOptions", **options)
    finish()


def depthwise_conv_2d(g: TfliteGraph, operation: Operation) -> None:
    inputs, out, finish, (multiplier,), options = _conv_operands(g, operation, 1)
    g.emit("DEPTHWISE_CONV_2D", inputs, [out], "DepthwiseConv2DOptions", DepthMultiplier=multiplier, **options)
    finish()


def _conv_padding(
    dims: tuple[int, ...], pad: list[int], window: tuple[int, int, int, int], dilation: tuple[int, int]
) -> tuple[int, tuple[int, int, int, int]]:
    fw, fh, sw, sh = window
    dw, dh = dilation
    effective = ((fw - 1) * dw + 1, (fh - 1) * dh + 1, sw, sh)
    explicit = (pad[0], pad[1], pad[2], pad[3]) if len(pad) == 4 else None
    return _padding(dims, explicit, pad[0], effective)


def pooling(builtin: str) -> Callable[[TfliteGraph, Operation], None]:
    def convert(g: TfliteGraph, operation: Operation) -> None:
        x = operation.inputs[0]
        pad, (sw, sh, fw, fh), tail = _spatial(g, operation, 2)
        fuse, _, _, nchw = _layout_dilation(g, tail)
        explicit = (pad[0], pad[1], pad[2], pad[3]) if len(pad) == 4 else None
        xt, xdims = _nhwc_in(g, x, nchw)
        padding, pads = _padding(xdims, explicit, pad[0], (fw, fh, sw, sh))
        if any(pads):
            raise Unsupported("explicit padding that is neither SAME nor VALID (pooling cannot pad by a PAD)")
        out, finish = _nhwc_out(g, operation.outputs[0], nchw)
        g.emit(
            builtin,
            [xt],
            [out],
            "Pool2DOptions",
            Padding=padding,
            StrideW=sw,
            StrideH=sh,
            FilterWidth=fw,
            FilterHeight=fh,
            FusedActivationFunction=g.activation(fuse),
        )
        finish()

    return convert


def fully_connected(g: TfliteGraph, operation: Operation) -> None:
    x, w, b, fuse = operation.inputs
    _check_filter(g, x, w)
    g.emit(
        "FULLY_CONNECTED",
        [g.tensor(x), g.tensor(w), _bias(g, b, x, w)],
        [g.tensor(operation.outputs[0])],
        "FullyConnectedOptions",
        FusedActivationFunction=g.activation(fuse),
    )

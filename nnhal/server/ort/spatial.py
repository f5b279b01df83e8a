"""Spatial operations as ONNX: CONV_2D, DEPTHWISE_CONV_2D, GROUPED_CONV_2D, TRANSPOSE_CONV_2D,
AVERAGE_POOL_2D, MAX_POOL_2D.

Float32 convolutions are ``Conv`` with the fused activation as ``Relu`` / ``Clip``;
quant8 ones (asymmetric, signed, per-channel filters) are ``QLinearConv`` with the
int32 bias at scale ``input_scale * filter_scale`` as NNAPI defines it, the fused
activation a ``Clip`` in the quantized domain. onnxruntime requantizes with a float
multiplier where the reference uses a fixed-point one: they differ by at most one
step on ties, inside the conformance tolerance of one. Implicit padding is resolved
as the reference does (SAME puts the odd pixel at the end).

Parameters (strides, pads, activation, layout) must be constants: the graph is static.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from nnhal.core.enums import OperandType, OperationType
from nnhal.server.executor.ops._padding import PADDING_CODES, implicit_padding, transpose_padding
from nnhal.server.ort.emit import FLOAT32, QUANT8, Converter, OpView, Unsupported

T = OperandType
Op = OperationType


@dataclass(frozen=True)
class Window:
    pads: tuple[int, int, int, int]  # ONNX order: top, left, bottom, right
    strides: tuple[int, int]  # h, w
    dilations: tuple[int, int]
    kernel: tuple[int, int]
    act: int
    nchw: bool
    extra: int = 0  # depth multiplier


def _window(v: OpView, first: int, explicit: bool, kernel: tuple[int, int] | None, has_extra: bool) -> Window:
    """Read the scalar parameters from input ``first`` on; ``kernel`` None: pooling, whose
    filter size is a parameter."""
    i = first
    if explicit:
        pl, pr, pt, pb = (int(v.scalar(i + k)) for k in range(4))
        i, code = i + 4, 0
    else:
        code, i = int(v.scalar(i)), i + 1
    sw, sh = int(v.scalar(i)), int(v.scalar(i + 1))
    i += 2
    if kernel is None:
        kernel = (int(v.scalar(i + 1)), int(v.scalar(i)))
        i += 2
    extra = 0
    if has_extra:
        extra, i = int(v.scalar(i)), i + 1
    act, i = int(v.scalar(i)), i + 1
    nchw = bool(v.scalar(i, False))
    dw, dh = (int(v.scalar(i + 1)), int(v.scalar(i + 2))) if v.n_inputs > i + 2 else (1, 1)
    if min(sw, sh, dw, dh) < 1:
        raise Unsupported("strides and dilations must be >= 1")
    if not explicit:
        if code not in PADDING_CODES:
            raise Unsupported(f"implicit padding code {code}")
        dims = v.operand(0).dimensions
        h, w = (dims[2], dims[3]) if nchw else (dims[1], dims[2])
        pt, pb = implicit_padding(h, sh, dh, kernel[0], code)
        pl, pr = implicit_padding(w, sw, dw, kernel[1], code)
    if min(pl, pr, pt, pb) < 0:
        raise Unsupported("negative padding")
    return Window((pt, pl, pb, pr), (sh, sw), (dh, dw), kernel, act, nchw, extra)


def _attrs(win: Window, group: int = 1, pool: bool = False) -> dict[str, Any]:
    attrs: dict[str, Any] = {"pads": list(win.pads), "strides": list(win.strides)}
    if pool:
        attrs["kernel_shape"] = list(win.kernel)
    else:
        attrs["dilations"] = list(win.dilations)
        attrs["group"] = group
    return attrs


def _filter_qparams(v: OpView, k: int, channel_dim: int) -> tuple[str, str]:
    """(scale, zero point) initializers of the filter: per tensor, or per output channel."""
    f = v.operand(k)
    if f.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        cq = f.channel_quant
        if cq is None or cq.channel_dim != channel_dim:
            raise Unsupported(f"per-channel filters must be quantized along dimension {channel_dim}")
        scales = np.asarray(cq.scales, np.float32)
        return v.b.const(scales), v.b.const(np.zeros(len(scales), np.int8))
    return v.qparams(f)


def _filter(v: OpView, perm: tuple[int, ...]) -> str:
    """The filter (input 1) in ONNX's layout: a transposed constant, or a Transpose node."""
    if v.is_const(1):
        return v.b.const(np.ascontiguousarray(v.const(1).transpose(perm)))
    return v.b.one("Transpose", [v.value(1)], perm=list(perm))


def _conv(v: OpView, kind: str) -> None:
    """CONV_2D, DEPTHWISE_CONV_2D ("depthwise") and GROUPED_CONV_2D ("grouped")."""
    v.require_static()
    t = v.require_types((FLOAT32, *QUANT8))
    n = v.n_inputs
    extra = kind != "conv"
    if extra:
        explicit = n >= 11 and v.operand(8).type == T.INT32
    else:
        explicit = n >= 8 and v.operand(7).type == T.INT32
    w = v.operand(1).dimensions  # NHWC filter [out, kh, kw, in] (depthwise [1, kh, kw, out])
    win = _window(v, 3, explicit, (w[1], w[2]), extra)
    dims = v.operand(0).dimensions
    channels = dims[1] if win.nchw else dims[3]
    if kind == "depthwise":
        perm, group, channel_dim = (3, 0, 1, 2), channels, 3  # -> [out, 1, kh, kw]
        if win.extra * channels != w[3]:
            raise Unsupported("depth multiplier times input channels must equal the filter's channels")
    else:
        perm, group, channel_dim = (0, 3, 1, 2), (win.extra if kind == "grouped" else 1), 0
        if group < 1 or w[3] * group != channels or w[0] % group:
            raise Unsupported("the filter's depth times the groups must equal the input channels")
    x = v.to_nchw(v.value(0), win.nchw)
    out = v.out()
    weights = _filter(v, perm)
    if t == FLOAT32:
        y = v.b.one("Conv", [x, weights, v.value(2)], **_attrs(win, group))
    else:
        f = v.operand(1)
        if f.type not in (t, T.TENSOR_QUANT8_SYMM_PER_CHANNEL):
            raise Unsupported(f"{f.type.name} filters with {t.name} inputs")
        ws, wzp = _filter_qparams(v, 1, channel_dim)
        inputs = [x, *v.qparams(v.operand(0)), weights, ws, wzp, *v.qparams(out), v.value(2)]
        y = v.b.one("QLinearConv", inputs, **_attrs(win, group))
    v.produce(v.from_nchw(v.fused(y, win.act, out), win.nchw))


def conv_2d(v: OpView) -> None:
    _conv(v, "conv")


def depthwise_conv_2d(v: OpView) -> None:
    _conv(v, "depthwise")


def grouped_conv_2d(v: OpView) -> None:
    _conv(v, "grouped")


def transpose_conv_2d(v: OpView) -> None:
    """ConvTranspose; quant8 through float (dequantized filter and bias, then quantized):
    the sums are exact in float32 for these sizes, the rounding within one step."""
    v.require_static()
    t = v.require_types((FLOAT32, *QUANT8))
    explicit = v.n_inputs >= 10 and v.operand(9).type == T.INT32
    w = v.operand(1).dimensions  # [out, kh, kw, in]
    i = 3
    if explicit:
        pl, pr, pt, pb = (int(v.scalar(i + k)) for k in range(4))
        sw, sh, act, nchw = int(v.scalar(7)), int(v.scalar(8)), int(v.scalar(9)), bool(v.scalar(10, False))
    else:
        code, sw, sh = int(v.scalar(4)), int(v.scalar(5)), int(v.scalar(6))
        act, nchw = int(v.scalar(7)), bool(v.scalar(8, False))
        # The reference pads for the requested output size (input 3), not the input's.
        shape = [int(d) for d in v.const(3).reshape(-1)]
        if len(shape) != 4:
            raise Unsupported("the output shape must have 4 elements")
        h, wd = (shape[2], shape[3]) if nchw else (shape[1], shape[2])
        pt, pb = transpose_padding(h, sh, w[1], code)
        pl, pr = transpose_padding(wd, sw, w[2], code)
    if min(sw, sh) < 1 or min(pl, pt) < 0:
        raise Unsupported("strides must be >= 1 and leading padding >= 0")
    extra_h, extra_w = max(0, -pb), max(0, -pr)  # a negative tail grows the output
    if extra_h >= sh or extra_w >= sw:
        raise Unsupported("a trailing padding this negative has no ONNX ConvTranspose form")
    attrs: dict[str, Any] = {
        "strides": [sh, sw],
        "pads": [pt, pl, max(pb, 0), max(pr, 0)],
        "output_padding": [extra_h, extra_w],
    }
    x = v.to_nchw(v.value(0), nchw)
    out = v.out()
    if t == FLOAT32:
        y = v.b.one("ConvTranspose", [x, _filter(v, (3, 0, 1, 2)), v.value(2)], **attrs)
        v.produce(v.from_nchw(v.fused(y, act, out), nchw))
        return
    f = v.operand(1)
    if f.type not in (t, T.TENSOR_QUANT8_SYMM_PER_CHANNEL) or not v.is_const(1) or not v.is_const(2):
        raise Unsupported("quantized TRANSPOSE_CONV_2D needs constant filters and bias of the input's kind")
    raw = v.const(1).astype(np.float32)
    if f.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        if f.channel_quant is None or f.channel_quant.channel_dim != 0:
            raise Unsupported("per-channel filters must be quantized along dimension 0")
        scales = np.asarray(f.channel_quant.scales, np.float32)
        wf = raw * scales.reshape(-1, 1, 1, 1)
    else:
        scales = np.full(w[0], f.scale, np.float32)
        wf = (raw - f.zero_point) * np.float32(f.scale)
    bias = v.const(2).astype(np.float64) * (v.operand(0).scale * scales.astype(np.float64))
    xf = v.dequant(x, v.operand(0))
    consts = [v.b.const(np.ascontiguousarray(wf.transpose(3, 0, 1, 2))), v.b.const(bias.astype(np.float32))]
    y = v.quant(v.b.one("ConvTranspose", [xf, *consts], **attrs), out)
    v.produce(v.from_nchw(v.fused(y, act, out), nchw))


def _pool(v: OpView, kind: str) -> None:
    v.require_static()
    t = v.require_types((FLOAT32, *QUANT8))
    win = _window(v, 1, v.n_inputs >= 10, None, False)
    inp, out = v.operand(0), v.out()
    if t in QUANT8 and (inp.scale, inp.zero_point) != (out.scale, out.zero_point):
        raise Unsupported("quantized pooling with different input and output quantization")
    x = v.to_nchw(v.value(0), win.nchw)
    if kind == "MaxPool":
        y = v.b.one("MaxPool", [x], **_attrs(win, pool=True))
        y = v.fused(y, win.act, out)
    elif t == FLOAT32:
        y = v.b.one("AveragePool", [x], count_include_pad=0, **_attrs(win, pool=True))
        y = v.fused(y, win.act, out)
    else:
        # The zero point cancels in an average of one tensor's values; the reference rounds
        # (sum + count / 2) / count, which floor(mean + 0.5) equals for these integer sums.
        elem = 2 if t == T.TENSOR_QUANT8_ASYMM else 3
        f = v.b.one("Cast", [x], to=1)
        mean = v.b.one("AveragePool", [f], count_include_pad=0, **_attrs(win, pool=True))
        rounded = v.b.one("Floor", [v.b.one("Add", [mean, v.b.const(np.float32(0.5))])])
        y = v.fused(v.b.one("Cast", [rounded], to=elem), win.act, out)
    v.produce(v.from_nchw(y, win.nchw))


def average_pool_2d(v: OpView) -> None:
    _pool(v, "AveragePool")


def max_pool_2d(v: OpView) -> None:
    _pool(v, "MaxPool")


CONVERTERS: dict[OperationType, Converter] = {
    Op.CONV_2D: conv_2d,
    Op.DEPTHWISE_CONV_2D: depthwise_conv_2d,
    Op.GROUPED_CONV_2D: grouped_conv_2d,
    Op.TRANSPOSE_CONV_2D: transpose_conv_2d,
    Op.AVERAGE_POOL_2D: average_pool_2d,
    Op.MAX_POOL_2D: max_pool_2d,
}

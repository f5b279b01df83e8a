"""Spatial operations as ONNX: CONV_2D, DEPTHWISE_CONV_2D, AVERAGE_POOL_2D, MAX_POOL_2D.

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
from nnhal.server.executor.ops._padding import PADDING_CODES, implicit_padding
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


def _conv(v: OpView, depthwise: bool) -> None:
    v.require_static()
    t = v.require_types((FLOAT32, *QUANT8))
    n = v.n_inputs
    if depthwise:
        explicit = n >= 11 and v.operand(8).type == T.INT32
    else:
        explicit = n >= 8 and v.operand(7).type == T.INT32
    w = v.const(1)  # NHWC filter [out, kh, kw, in] (depthwise [1, kh, kw, out])
    win = _window(v, 3, explicit, (w.shape[1], w.shape[2]), depthwise)
    dims = v.operand(0).dimensions
    channels = dims[1] if win.nchw else dims[3]
    if depthwise:
        weights = w.transpose(3, 0, 1, 2)  # [out, 1, kh, kw]
        group = channels
        if win.extra * channels != w.shape[3]:
            raise Unsupported("depth multiplier times input channels must equal the filter's channels")
    else:
        weights, group = w.transpose(0, 3, 1, 2), 1
        if w.shape[3] != channels:
            raise Unsupported("grouped filters (filter depth != input channels)")
    x = v.to_nchw(v.value(0), win.nchw)
    out = v.out()
    if t == FLOAT32:
        bias = v.value(2)
        y = v.b.one("Conv", [x, v.b.const(weights), bias], **_attrs(win, group))
        y = v.fused(y, win.act, out)
    else:
        f = v.operand(1)
        if f.type not in (t, T.TENSOR_QUANT8_SYMM_PER_CHANNEL):
            raise Unsupported(f"{f.type.name} filters with {t.name} inputs")
        ws, wzp = _filter_qparams(v, 1, 3 if depthwise else 0)
        inputs = [x, *v.qparams(v.operand(0)), v.b.const(weights), ws, wzp, *v.qparams(out), v.value(2)]
        y = v.b.one("QLinearConv", inputs, **_attrs(win, group))
        y = v.fused(y, win.act, out)
    v.produce(v.from_nchw(y, win.nchw))


def conv_2d(v: OpView) -> None:
    _conv(v, depthwise=False)


def depthwise_conv_2d(v: OpView) -> None:
    _conv(v, depthwise=True)


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
    Op.AVERAGE_POOL_2D: average_pool_2d,
    Op.MAX_POOL_2D: max_pool_2d,
}

"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR (size or scale form, layout,
align_corners and half_pixel_centers), as tflite's reference kernels compute them:
source coordinates per output row/column, then gathers and a weighted sum over
whole tensors."""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    QUANT8_TYPES,
    T,
    from_nhwc,
    qrange,
    round_half_away,
    to_compute,
    to_nhwc,
    version_for_types,
)
from nnhal.server.executor.registry import register

INPUT, WIDTH, HEIGHT, LAYOUT, ALIGN_CORNERS, HALF_PIXEL = range(6)
Op = OperationType


def validate_resize(v: ValidationContext) -> HalVersion:
    low = 3 if v.op_type == Op.RESIZE_BILINEAR else 4
    v.expect_counts(range(low, 7), 1)
    t = v.expect_input_type_in(INPUT, (*FLOAT_TYPES, *QUANT8_TYPES))
    st = v.input_type(WIDTH)
    allowed = {T.INT32, T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32}
    v.require(st in allowed, f"output size/scale must be one of {sorted(a.name for a in allowed)}, got {st.name}")
    v.expect_types([t, st, st, T.BOOL, T.BOOL, T.BOOL], [t])
    v.expect_rank(INPUT, 4)
    version = version_for_types([t])
    if t == T.TENSOR_QUANT8_ASYMM or st != T.INT32 or v.num_inputs >= 4 or v.op_type == Op.RESIZE_NEAREST_NEIGHBOR:
        version = max(version, HalVersion.V1_2)
    if v.num_inputs >= 5:
        version = max(version, HalVersion.V1_3)
    return version


def _flag(ctx: ExecutionContext, i: int) -> bool:
    return bool(ctx.scalar(i)) if i < len(ctx.inputs) and ctx.has(i) else False


def _scale(in_size: int, out_size: int, align: bool) -> np.float32:
    if align and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _source(out_size: int, scale: np.float32, half_pixel: bool) -> np.ndarray:
    o = np.arange(out_size, dtype=np.float32)
    return (o + np.float32(0.5)) * scale - np.float32(0.5) if half_pixel else o * scale


def execute_resize(ctx: ExecutionContext) -> None:
    nchw = _flag(ctx, LAYOUT)
    align = _flag(ctx, ALIGN_CORNERS)
    half = _flag(ctx, HALF_PIXEL)
    ctx.require(not (align and half), "align_corners and half_pixel_centers are exclusive")
    x = to_nhwc(ctx.tensor(INPUT), nchw)
    _, h, w, c = x.shape
    ctx.require(min(h, w, c) > 0, "only the batch dimension may be zero")
    if ctx.in_type(WIDTH) == T.INT32:
        out_w, out_h = int(ctx.scalar(WIDTH)), int(ctx.scalar(HEIGHT))
    else:
        scale_w, scale_h = np.float32(ctx.scalar(WIDTH)), np.float32(ctx.scalar(HEIGHT))
        if not (np.isfinite(scale_w) and np.isfinite(scale_h)):
            ctx.fail(f"scales {float(scale_h)} x {float(scale_w)} must be finite")
        with np.errstate(over="ignore"):  # a product past float32 is inf: refused just below
            out_w_f, out_h_f = np.floor(np.float32(w) * scale_w), np.floor(np.float32(h) * scale_h)
        if not (np.isfinite(out_w_f) and np.isfinite(out_h_f)):
            ctx.fail(f"scales {float(scale_h)} x {float(scale_w)} give an output too large to represent")
        out_w, out_h = int(out_w_f), int(out_h_f)
    if out_w <= 0 or out_h <= 0:
        ctx.fail(f"output size {out_h}x{out_w} must be positive")
    # The result, and the float64 interpolation temporaries of its size.
    reserve_shape((x.shape[0], out_h, out_w, c), 8, copies=3)
    sy, sx = _scale(h, out_h, align), _scale(w, out_w, align)
    t = ctx.in_type(INPUT)
    if ctx.op_type == Op.RESIZE_NEAREST_NEIGHBOR:
        iy = _nearest(out_h, sy, h, align, half)
        ix = _nearest(out_w, sx, w, align, half)
        out = x[:, iy][:, :, ix]
    else:
        ys, xs = _source(out_h, sy, half), _source(out_w, sx, half)
        y0 = np.maximum(np.floor(ys).astype(np.int64), 0)
        y1 = np.minimum(np.ceil(ys).astype(np.int64), h - 1)
        x0 = np.maximum(np.floor(xs).astype(np.int64), 0)
        x1 = np.minimum(np.ceil(xs).astype(np.int64), w - 1)
        dy = (ys - y0).astype(np.float32)[None, :, None, None]
        dx = (xs - x0).astype(np.float32)[None, None, :, None]
        xf = np.asarray(to_compute(x), np.float32)
        top = xf[:, y0]
        bottom = xf[:, y1]
        value = (
            top[:, :, x0] * (1 - dy) * (1 - dx)
            + bottom[:, :, x0] * dy * (1 - dx)
            + top[:, :, x1] * (1 - dy) * dx
            + bottom[:, :, x1] * dy * dx
        )
        if t in QUANT8_TYPES:
            lo, hi = qrange(t)
            value = np.clip(np.floor(value + np.float32(0.5)), lo, hi)
        out = value
    ctx.set_output(0, from_nhwc(np.asarray(out), nchw))


def _nearest(out_size: int, scale: np.float32, in_size: int, align: bool, half: bool) -> np.ndarray:
    src = (
        _source(out_size, scale, False)
        if not half
        else (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale
    )
    idx = round_half_away(src) if align else np.floor(src)
    idx = np.minimum(idx.astype(np.int64), in_size - 1)
    return np.maximum(idx, 0) if half else idx


register(Op.RESIZE_BILINEAR, validate=validate_resize, execute=execute_resize)
register(Op.RESIZE_NEAREST_NEIGHBOR, validate=validate_resize, execute=execute_resize)

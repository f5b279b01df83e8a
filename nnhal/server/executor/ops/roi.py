"""ROI_ALIGN and ROI_POOLING: fixed-size feature maps cut out of an NHWC (or NCHW)
input for each region of interest.

ROI_ALIGN samples bilinearly (quantized: integer weights in steps of 1/255 and a
fixed-point rescale, as the reference); ROI_POOLING takes the maximum over each
cell's pixels. Malformed ROIs (outside the feature map, x2 < x1) fail as the
reference's checks do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from nnhal.core.enums import HalVersion, OperandType, OperationType
from nnhal.server.executor import allocation
from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._detection import (
    BOX_SCALE,
    F32,
    as_float,
    dim,
    expect_rank,
    is_box_quant,
    quant_version,
    require_box_quant,
    require_constant,
    require_dim,
    require_output_quant,
)
from nnhal.server.executor.ops._fixed_point import multiply_by_quantized_multiplier, quantize_multiplier
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    QUANT8_TYPES,
    T,
    float_scalar_type,
    from_nhwc,
    qrange,
    round_half_away,
    to_nhwc,
)
from nnhal.server.executor.registry import register

#: The quantization step of ROI_ALIGN's integer interpolation weights.
_WEIGHT_SCALE = F32(1.0) / F32(255.0)


def _validate_roi_common(v: ValidationContext, num_inputs: int, extra: Sequence[OperandType]) -> HalVersion:
    v.expect_counts(num_inputs, 1)
    t = v.expect_input_type_in(0, (*FLOAT_TYPES, *QUANT8_TYPES))
    roi_t = T.TENSOR_QUANT16_ASYMM if t in QUANT8_TYPES else t
    stride_t = float_scalar_type(t) if t in FLOAT_TYPES else T.FLOAT32
    v.expect_types([t, roi_t, T.TENSOR_INT32, T.INT32, T.INT32, stride_t, stride_t, *extra, T.BOOL], [t])
    v.expect_rank(0, 4)
    v.expect_rank(1, 2)
    v.expect_rank(2, 1)
    require_dim(v, 1, 1, 4, "each ROI has 4 coordinates")
    require_dim(v, 2, 0, dim(v, 1, 0), "one batch index per ROI")
    for i in (3, 4):
        require_constant(v, i, lambda x: x > 0, "the output size must be positive")
    for i in (5, 6):
        require_constant(v, i, lambda x: x > 0, "the stride must be positive")
    if t in QUANT8_TYPES:
        require_box_quant(v, v.inputs[1], "the ROI tensor")
    return quant_version(t)


def validate_roi_align(v: ValidationContext) -> HalVersion:
    version = _validate_roi_common(v, 10, [T.INT32, T.INT32])
    for i in (7, 8):
        require_constant(v, i, lambda x: x >= 0, "the sampling ratio must not be negative")
    return version


class _RoiInput:
    """The checked, NHWC-ordered operands shared by ROI_ALIGN and ROI_POOLING."""

    def __init__(self, ctx: ExecutionContext, layout_index: int) -> None:
        self.nchw = bool(ctx.scalar(layout_index))
        x = ctx.tensor(0)
        expect_rank(ctx, x, 4, "the input")
        self.x = to_nhwc(x, self.nchw)
        self.rois = ctx.tensor(1)
        self.batches = ctx.tensor(2).astype(np.int64)
        expect_rank(ctx, self.rois, 2, "the ROI tensor")
        if self.rois.shape[1] != 4 or self.batches.shape != (self.rois.shape[0],):
            ctx.fail(f"ROIs {list(self.rois.shape)} and batch indexes {list(self.batches.shape)} disagree")
        self.out_h, self.out_w = int(ctx.scalar(3)), int(ctx.scalar(4))
        self.h_stride, self.w_stride = float(ctx.scalar(5)), float(ctx.scalar(6))
        if self.out_h <= 0 or self.out_w <= 0 or not (self.h_stride > 0 and self.w_stride > 0):
            ctx.fail("output sizes and strides must be positive")
        if ctx.in_type(1) == T.TENSOR_QUANT16_ASYMM and not is_box_quant(ctx.scale(1), ctx.zero_point(1)):
            ctx.fail("the ROI tensor must have scale 0.125 and zero point 0")
        n, self.height, self.width, self.depth = self.x.shape
        if len(self.rois) and min(n, self.height, self.width, self.depth) <= 0:
            ctx.fail(f"the input {list(x.shape)} must not be empty")
        if np.any((self.batches < 0) | (self.batches >= n)):
            ctx.fail(f"a batch index is outside [0, {n})")

    def output_shape(self) -> tuple[int, ...]:
        return (len(self.rois), self.out_h, self.out_w, self.depth)


def _check_roi_bounds(ctx: ExecutionContext, r: _RoiInput, scaled: np.ndarray, rois: np.ndarray) -> None:
    """Reference's malformed-ROI checks: inside the feature map and x1 <= x2, y1 <= y2."""
    bad = (
        ~np.all(np.isfinite(scaled), axis=1)
        | ~np.all(np.isfinite(rois), axis=1)
        | np.any(rois < 0, axis=1)
        | (scaled[:, 0] > r.width)
        | (scaled[:, 2] > r.width)
        | (scaled[:, 1] > r.height)
        | (scaled[:, 3] > r.height)
        | (rois[:, 0] > rois[:, 2])
        | (rois[:, 1] > rois[:, 3])
    )
    if np.any(bad):
        ctx.fail(f"ROI {int(np.argmax(bad))} is malformed or outside the feature map")


def _sample_axis(start: F32, step: F32, out: int, ratio: int, size: int) -> tuple[np.ndarray, ...]:
    """Bilinear sample positions along one axis: (low index, high index, low weight, high weight).

    One entry per (output cell, sample) pair, in that order; positions past the
    last pixel clamp to it as the reference does.
    """
    reserve_shape((out, ratio), 8, copies=4)
    bin_size = F32(step / F32(ratio))
    cells = (step * np.arange(out, dtype=F32) + start).astype(F32)
    pos = (cells[:, None] + bin_size / F32(2)) + bin_size * np.arange(ratio, dtype=F32)[None, :]
    pos = pos.reshape(-1).astype(F32)
    low = np.floor(pos).astype(np.int64)
    frac = (pos - low.astype(F32)).astype(F32)
    clamp = low >= size - 1
    low = np.where(clamp, size - 1, low)
    high = np.where(clamp, size - 1, low + 1)
    frac = np.where(clamp, F32(0), frac).astype(F32)
    return low, high, (F32(1) - frac).astype(F32), frac


def execute_roi_align(ctx: ExecutionContext) -> None:
    r = _RoiInput(ctx, 9)
    h_ratio_param, w_ratio_param = int(ctx.scalar(7)), int(ctx.scalar(8))
    if h_ratio_param < 0 or w_ratio_param < 0:
        ctx.fail("sampling ratios must not be negative")
    quant = ctx.in_type(0) in QUANT8_TYPES
    h_scale, w_scale = F32(1) / F32(r.h_stride), F32(1) / F32(r.w_stride)
    rois = r.rois.astype(F32)
    scaled = rois * np.array([w_scale, h_scale, w_scale, h_scale], F32)
    if quant:
        # Quantized boxes are checked after scaling, as the reference does (they cannot be negative).
        scaled = scaled * F32(BOX_SCALE)
        _check_roi_bounds(ctx, r, scaled, scaled)
    else:
        _check_roi_bounds(ctx, r, scaled, rois)

    reserve_shape(r.output_shape(), 8)
    out = np.zeros(r.output_shape(), dtype=np.int64 if quant else np.float64)
    x = r.x.astype(np.int64) - ctx.zero_point(0) if quant else r.x.astype(np.float64)
    scratch = 0
    for k in range(len(rois)):
        ctx.control.checkpoint()  # one vectorized pass per box: the execution's limits apply between them
        w0, h0, w1, h1 = (F32(c) for c in scaled[k])
        roi_w = F32(max(F32(w1 - w0), F32(1)))
        roi_h = F32(max(F32(h1 - h0), F32(1)))
        w_step, h_step = F32(roi_w / F32(r.out_w)), F32(roi_h / F32(r.out_h))
        w_ratio = w_ratio_param if w_ratio_param > 0 else math.ceil(float(w_step))
        h_ratio = h_ratio_param if h_ratio_param > 0 else math.ceil(float(h_step))
        ys = _sample_axis(h0, h_step, r.out_h, h_ratio, r.height)
        xs = _sample_axis(w0, w_step, r.out_w, w_ratio, r.width)
        image = x[r.batches[k]]
        # The accumulator and one weighted gather of its size, per box: the previous box's are free.
        allocation.release(scratch)
        scratch = allocation.shape_bytes((len(ys[0]), len(xs[0]), r.depth), 8, copies=2)
        allocation.reserve(scratch)
        acc = np.zeros((len(ys[0]), len(xs[0]), r.depth), dtype=out.dtype)
        for row, wy in ((ys[0], ys[2]), (ys[1], ys[3])):
            for col, wx in ((xs[0], xs[2]), (xs[1], xs[3])):
                weight = (wy[:, None] * wx[None, :]).astype(F32)
                if quant:
                    weight = round_half_away(weight / _WEIGHT_SCALE).astype(np.int64)
                acc += weight[:, :, None] * image[np.ix_(row, col)]
        cell_sum = acc.reshape(r.out_h, h_ratio, r.out_w, w_ratio, r.depth).sum(axis=(1, 3))
        count = h_ratio * w_ratio
        if quant:
            real = F32(F32(F32(ctx.scale(0)) * _WEIGHT_SCALE) / F32(ctx.out_scale(0))) / F32(count)
            if not 0 <= real < 1:
                ctx.fail(f"rescale multiplier {real} is outside [0, 1)")
            multiplier, shift = quantize_multiplier(float(real))
            out[k] = multiply_by_quantized_multiplier(cell_sum, multiplier, shift) + ctx.out_zero_point(0)
        else:
            out[k] = cell_sum / count
    if quant:
        lo, hi = qrange(ctx.out_type(0))
        out = np.clip(out, lo, hi)
    ctx.set_output(0, from_nhwc(out, r.nchw))


def validate_roi_pooling(v: ValidationContext) -> HalVersion:
    version = _validate_roi_common(v, 8, [])
    if v.input_type(0) in QUANT8_TYPES:
        require_output_quant(v, v.outputs[0], v.inputs[0], "the output")
    return version


def _pool_bounds(step: F32, start: int, out: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.arange(out, dtype=F32)
    lo = np.floor((step * idx + F32(start)).astype(F32)).astype(np.int64)
    hi = np.ceil((step * (idx + F32(1)) + F32(start)).astype(F32)).astype(np.int64)
    return np.clip(lo, 0, size), np.clip(hi, 0, size)


def execute_roi_pooling(ctx: ExecutionContext) -> None:
    r = _RoiInput(ctx, 7)
    rois = as_float(ctx, 1)
    h_scale, w_scale = F32(1) / F32(r.h_stride), F32(1) / F32(r.w_stride)
    scaled = (rois * np.array([w_scale, h_scale, w_scale, h_scale], F32)).astype(F32)
    _check_roi_bounds(ctx, r, scaled, rois)
    corners = round_half_away(scaled).astype(np.int64)
    empty_value = ctx.zero_point(0) if ctx.in_type(0) in QUANT8_TYPES else 0
    reserve_shape(r.output_shape(), r.x.itemsize)
    out = np.empty(r.output_shape(), dtype=r.x.dtype)
    for k in range(len(rois)):
        w0, h0, w1, h1 = (int(c) for c in corners[k])
        h_step = F32(F32(max(h1 - h0 + 1, 1)) / F32(r.out_h))
        w_step = F32(F32(max(w1 - w0 + 1, 1)) / F32(r.out_w))
        h_lo, h_hi = _pool_bounds(h_step, h0, r.out_h, r.height)
        w_lo, w_hi = _pool_bounds(w_step, w0, r.out_w, r.width)
        image = r.x[r.batches[k]]
        for i in range(r.out_h):
            # A Python loop over an output the request sizes: the execution's limits apply within it.
            ctx.control.checkpoint()
            if h_hi[i] <= h_lo[i]:
                out[k, i] = empty_value
                continue
            rows = image[h_lo[i] : h_hi[i]].max(axis=0)
            for j in range(r.out_w):
                if w_hi[j] <= w_lo[j]:
                    out[k, i, j] = empty_value
                else:
                    out[k, i, j] = rows[w_lo[j] : w_hi[j]].max(axis=0)
    ctx.set_output(0, from_nhwc(out, r.nchw))


register(OperationType.ROI_ALIGN, validate=validate_roi_align, execute=execute_roi_align)
register(OperationType.ROI_POOLING, validate=validate_roi_pooling, execute=execute_roi_pooling)

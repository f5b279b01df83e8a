"""Detection operations: ROI_ALIGN, ROI_POOLING, AXIS_ALIGNED_BBOX_TRANSFORM,
BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS, DETECTION_POSTPROCESSING and
HEATMAP_MAX_KEYPOINT.

Apart from quantized ROI_ALIGN (integer bilinear weights, fixed-point
rescale), the reference computes these on float32 copies of its inputs and
quantizes the results back (round half away from zero after adding the zero
point), so this module does the same. Boxes of quantized models are
TENSOR_QUANT16_ASYMM with scale 0.125 and zero point 0 (TENSOR_QUANT16_SYMM for
GENERATE_PROPOSALS anchors).

Non-maximum suppression keeps the reference's selection order: the highest
remaining score is taken (first one on ties), the suppressed candidates are
swapped to the end of the pending range, and final orderings use stable sorts.
Outputs whose size depends on the data (the box counts) may be zero-sized.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from nnhal.core.enums import HalVersion, OperandType, OperationType
from nnhal.core.errors import GeneralFailure
from nnhal.core.operand_types import DTYPE
from nnhal.core.types import Operand
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    QUANT8_TYPES,
    T,
    multiply_by_quantized_multiplier,
    qrange,
    quantize_multiplier,
    round_half_away,
    version_for_types,
)
from nnhal.server.executor.registry import register

F32 = np.float32
BOX_SCALE = 0.125
#: The quantization step of ROI_ALIGN's integer interpolation weights.
_WEIGHT_SCALE = F32(1.0) / F32(255.0)


# -- shared helpers -----------------------------------------------------------------
def _fail(ctx: ExecutionContext, message: str) -> GeneralFailure:
    return GeneralFailure(f"{ctx.op_type.name}: {message}")


def _float_scalar_type(t: OperandType) -> OperandType:
    return T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32


def _as_float(ctx: ExecutionContext, i: int) -> np.ndarray:
    """Input ``i`` as float32: float16 widened, quantized types dequantized."""
    x = ctx.tensor(i)
    t = ctx.in_type(i)
    if t == T.TENSOR_FLOAT32:
        return x
    if t == T.TENSOR_FLOAT16:
        return x.astype(F32)
    return (x.astype(F32) - F32(ctx.zero_point(i))) * F32(ctx.scale(i))


def _from_float(x: np.ndarray, operand: Operand) -> np.ndarray:
    """Float32 results in the operand's type (quantized: round(x / scale + zp), saturated)."""
    t = operand.type
    if t in FLOAT_TYPES:
        return x
    lo, hi = qrange(t)
    with np.errstate(invalid="ignore", over="ignore"):
        q = round_half_away(np.asarray(x, F32) / F32(operand.scale) + F32(operand.zero_point))
    return np.asarray(np.clip(np.nan_to_num(q), lo, hi), dtype=DTYPE[t])


def _same_f32(a: float, b: float) -> bool:
    return bool(F32(a) == F32(b))


def _require_box_quant(v: ValidationContext, operand: Operand, what: str) -> None:
    v.require(
        _same_f32(operand.scale, BOX_SCALE) and operand.zero_point == 0,
        f"{what} must have scale 0.125 and zero point 0, got {operand.scale} and {operand.zero_point}",
    )


def _require_same_quant(v: ValidationContext, out: Operand, inp: Operand, what: str) -> None:
    v.require(
        _same_f32(out.scale, inp.scale) and out.zero_point == inp.zero_point,
        f"{what} must have the input's scale and zero point",
    )


def _dim(v: ValidationContext, i: int, axis: int) -> int:
    """Declared size of input ``i`` along ``axis`` (0 when unknown)."""
    dims = v.input_dims(i)
    return dims[axis] if axis < len(dims) else 0


def _require_dim(v: ValidationContext, i: int, axis: int, expected: int, what: str) -> None:
    got = _dim(v, i, axis)
    if got and expected:
        v.require(got == expected, f"{what}: input {i} dimension {axis} is {got}, expected {expected}")


def _constant(v: ValidationContext, i: int) -> float | int | bool | None:
    return v.constant_scalar(i) if v.is_constant(i) else None


def _require_constant(v: ValidationContext, i: int, check: Callable[[float], bool], message: str) -> None:
    value = _constant(v, i)
    if value is not None:
        v.require(check(value), f"input {i}: {message}, got {value}")


def _expect_rank(ctx: ExecutionContext, x: np.ndarray, rank: int, what: str) -> None:
    if x.ndim != rank:
        raise _fail(ctx, f"{what} must have rank {rank}, got shape {list(x.shape)}")


def _to_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return x.transpose(0, 2, 3, 1) if nchw else x


def _from_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    return x.transpose(0, 3, 1, 2) if nchw else x


def _quant_version(t: OperandType) -> HalVersion:
    return version_for_types([t], HalVersion.V1_2)


# -- IoU and non-maximum suppression ----------------------------------------------------------------
def _iou(boxes: np.ndarray, box: np.ndarray) -> np.ndarray:
    """IoU of each [x1, y1, x2, y2] row of ``boxes`` with ``box``, in float32."""
    with np.errstate(invalid="ignore", divide="ignore"):
        area1 = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        area2 = (box[2] - box[0]) * (box[3] - box[1])
        w = np.maximum(np.minimum(boxes[:, 2], box[2]) - np.maximum(boxes[:, 0], box[0]), F32(0))
        h = np.maximum(np.minimum(boxes[:, 3], box[3]) - np.maximum(boxes[:, 1], box[1]), F32(0))
        inter = w * h
        return np.asarray(inter / (area1 + area2 - inter), dtype=F32)


#: Given the pending candidates and the box just selected, which candidates to drop
#: (it may also lower the candidates' scores, as soft NMS does).
Suppressor = Callable[[np.ndarray, int], np.ndarray]


def _partition_kept(rest: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """The kept candidates in the order the reference's swap-to-the-end loop leaves them.

    Each dropped candidate is replaced by the last not-yet-visited one, so the
    kept candidates near the end fill the holes in reverse order.
    """
    kept_count = int(np.count_nonzero(~removed))
    front = rest[:kept_count].copy()
    holes = np.nonzero(removed[:kept_count])[0]
    if holes.size:
        tail = rest[kept_count:][~removed[kept_count:]]
        front[holes] = tail[::-1]
    return front


def _nms(scores: np.ndarray, candidates: np.ndarray, max_detections: int, suppress: Suppressor) -> np.ndarray:
    """Greedy NMS over ``candidates`` (indexes into ``scores``); returns the selected, in order."""
    pending = candidates.astype(np.int64)
    limit = len(pending) if max_detections < 0 else max_detections
    selected: list[int] = []
    while pending.size and len(selected) < limit:
        best_pos = int(np.argmax(scores[pending]))
        best = int(pending[best_pos])
        pending[best_pos] = pending[0]
        rest = pending[1:]
        selected.append(best)
        if rest.size == 0:
            break
        pending = _partition_kept(rest, suppress(rest, best))
    return np.asarray(selected, dtype=np.int64)


def _hard_suppressor(boxes: np.ndarray, iou_threshold: float) -> Suppressor:
    threshold = F32(iou_threshold)

    def suppress(rest: np.ndarray, best: int) -> np.ndarray:
        return np.asarray(_iou(boxes[rest], boxes[best]) >= threshold)

    return suppress


def _stable_desc(scores: np.ndarray) -> np.ndarray:
    """Indexes that sort ``scores`` descending, ties in their original order."""
    return np.argsort(-scores.astype(np.float64), kind="stable")


# -- ROI_ALIGN ------------------------------------------------------------------------------
def _validate_roi_common(v: ValidationContext, num_inputs: int, extra: Sequence[OperandType]) -> HalVersion:
    v.expect_counts(num_inputs, 1)
    t = v.expect_input_type_in(0, (*FLOAT_TYPES, *QUANT8_TYPES))
    roi_t = T.TENSOR_QUANT16_ASYMM if t in QUANT8_TYPES else t
    stride_t = _float_scalar_type(t) if t in FLOAT_TYPES else T.FLOAT32
    v.expect_types([t, roi_t, T.TENSOR_INT32, T.INT32, T.INT32, stride_t, stride_t, *extra, T.BOOL], [t])
    v.expect_rank(0, 4)
    v.expect_rank(1, 2)
    v.expect_rank(2, 1)
    _require_dim(v, 1, 1, 4, "each ROI has 4 coordinates")
    _require_dim(v, 2, 0, _dim(v, 1, 0), "one batch index per ROI")
    for i in (3, 4):
        _require_constant(v, i, lambda x: x > 0, "the output size must be positive")
    for i in (5, 6):
        _require_constant(v, i, lambda x: x > 0, "the stride must be positive")
    if t in QUANT8_TYPES:
        _require_box_quant(v, v.inputs[1], "the ROI tensor")
    return _quant_version(t)


def validate_roi_align(v: ValidationContext) -> HalVersion:
    version = _validate_roi_common(v, 10, [T.INT32, T.INT32])
    for i in (7, 8):
        _require_constant(v, i, lambda x: x >= 0, "the sampling ratio must not be negative")
    return version


class _RoiInput:
    """The checked, NHWC-ordered operands shared by ROI_ALIGN and ROI_POOLING."""

    def __init__(self, ctx: ExecutionContext, layout_index: int) -> None:
        self.nchw = bool(ctx.scalar(layout_index))
        x = ctx.tensor(0)
        _expect_rank(ctx, x, 4, "the input")
        self.x = _to_nhwc(x, self.nchw)
        self.rois = ctx.tensor(1)
        self.batches = ctx.tensor(2).astype(np.int64)
        _expect_rank(ctx, self.rois, 2, "the ROI tensor")
        if self.rois.shape[1] != 4 or self.batches.shape != (self.rois.shape[0],):
            raise _fail(ctx, f"ROIs {list(self.rois.shape)} and batch indexes {list(self.batches.shape)} disagree")
        self.out_h, self.out_w = int(ctx.scalar(3)), int(ctx.scalar(4))
        self.h_stride, self.w_stride = float(ctx.scalar(5)), float(ctx.scalar(6))
        if self.out_h <= 0 or self.out_w <= 0 or not (self.h_stride > 0 and self.w_stride > 0):
            raise _fail(ctx, "output sizes and strides must be positive")
        if ctx.in_type(1) == T.TENSOR_QUANT16_ASYMM and not (
            _same_f32(ctx.scale(1), BOX_SCALE) and ctx.zero_point(1) == 0
        ):
            raise _fail(ctx, "the ROI tensor must have scale 0.125 and zero point 0")
        n, self.height, self.width, self.depth = self.x.shape
        if len(self.rois) and min(n, self.height, self.width, self.depth) <= 0:
            raise _fail(ctx, f"the input {list(x.shape)} must not be empty")
        if np.any((self.batches < 0) | (self.batches >= n)):
            raise _fail(ctx, f"a batch index is outside [0, {n})")

    def output_shape(self) -> tuple[int, ...]:
        return (len(self.rois), self.out_h, self.out_w, self.depth)


def _check_roi_bounds(ctx: ExecutionContext, r: _RoiInput, scaled: np.ndarray, rois: np.ndarray) -> None:
    """Reference's malformed-ROI checks: inside the feature map and x1 <= x2, y1 <= y2."""
    bad = (
        np.any(rois < 0, axis=1)
        | (scaled[:, 0] > r.width)
        | (scaled[:, 2] > r.width)
        | (scaled[:, 1] > r.height)
        | (scaled[:, 3] > r.height)
        | (rois[:, 0] > rois[:, 2])
        | (rois[:, 1] > rois[:, 3])
    )
    if np.any(bad):
        raise _fail(ctx, f"ROI {int(np.argmax(bad))} is malformed or outside the feature map")


def _sample_axis(start: F32, step: F32, out: int, ratio: int, size: int) -> tuple[np.ndarray, ...]:
    """Bilinear sample positions along one axis: (low index, high index, low weight, high weight).

    One entry per (output cell, sample) pair, in that order; positions past the
    last pixel clamp to it as the reference does.
    """
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
        raise _fail(ctx, "sampling ratios must not be negative")
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

    out = np.zeros(r.output_shape(), dtype=np.int64 if quant else np.float64)
    x = r.x.astype(np.int64) - ctx.zero_point(0) if quant else r.x.astype(np.float64)
    for k in range(len(rois)):
        w0, h0, w1, h1 = (F32(c) for c in scaled[k])
        roi_w = F32(max(F32(w1 - w0), F32(1)))
        roi_h = F32(max(F32(h1 - h0), F32(1)))
        w_step, h_step = F32(roi_w / F32(r.out_w)), F32(roi_h / F32(r.out_h))
        w_ratio = w_ratio_param if w_ratio_param > 0 else math.ceil(float(w_step))
        h_ratio = h_ratio_param if h_ratio_param > 0 else math.ceil(float(h_step))
        ys = _sample_axis(h0, h_step, r.out_h, h_ratio, r.height)
        xs = _sample_axis(w0, w_step, r.out_w, w_ratio, r.width)
        image = x[r.batches[k]]
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
                raise _fail(ctx, f"rescale multiplier {real} is outside [0, 1)")
            multiplier, shift = quantize_multiplier(float(real))
            out[k] = multiply_by_quantized_multiplier(cell_sum, multiplier, shift) + ctx.out_zero_point(0)
        else:
            out[k] = cell_sum / count
    if quant:
        lo, hi = qrange(ctx.out_type(0))
        out = np.clip(out, lo, hi)
    ctx.set_output(0, _from_nhwc(out, r.nchw))


# -- ROI_POOLING ----------------------------------------------------------------------------
def validate_roi_pooling(v: ValidationContext) -> HalVersion:
    version = _validate_roi_common(v, 8, [])
    if v.input_type(0) in QUANT8_TYPES:
        _require_same_quant(v, v.outputs[0], v.inputs[0], "the output")
    return version


def _pool_bounds(step: F32, start: int, out: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.arange(out, dtype=F32)
    lo = np.floor((step * idx + F32(start)).astype(F32)).astype(np.int64)
    hi = np.ceil((step * (idx + F32(1)) + F32(start)).astype(F32)).astype(np.int64)
    return np.clip(lo, 0, size), np.clip(hi, 0, size)


def execute_roi_pooling(ctx: ExecutionContext) -> None:
    r = _RoiInput(ctx, 7)
    rois = _as_float(ctx, 1)
    h_scale, w_scale = F32(1) / F32(r.h_stride), F32(1) / F32(r.w_stride)
    scaled = (rois * np.array([w_scale, h_scale, w_scale, h_scale], F32)).astype(F32)
    _check_roi_bounds(ctx, r, scaled, rois)
    corners = round_half_away(scaled).astype(np.int64)
    empty_value = ctx.zero_point(0) if ctx.in_type(0) in QUANT8_TYPES else 0
    out = np.empty(r.output_shape(), dtype=r.x.dtype)
    for k in range(len(rois)):
        w0, h0, w1, h1 = (int(c) for c in corners[k])
        h_step = F32(F32(max(h1 - h0 + 1, 1)) / F32(r.out_h))
        w_step = F32(F32(max(w1 - w0 + 1, 1)) / F32(r.out_w))
        h_lo, h_hi = _pool_bounds(h_step, h0, r.out_h, r.height)
        w_lo, w_hi = _pool_bounds(w_step, w0, r.out_w, r.width)
        image = r.x[r.batches[k]]
        for i in range(r.out_h):
            if h_hi[i] <= h_lo[i]:
                out[k, i] = empty_value
                continue
            rows = image[h_lo[i] : h_hi[i]].max(axis=0)
            for j in range(r.out_w):
                if w_hi[j] <= w_lo[j]:
                    out[k, i, j] = empty_value
                else:
                    out[k, i, j] = rows[w_lo[j] : w_hi[j]].max(axis=0)
    ctx.set_output(0, _from_nhwc(out, r.nchw))


# -- AXIS_ALIGNED_BBOX_TRANSFORM ----------------------------------------------------------------
def validate_bbox_transform(v: ValidationContext) -> HalVersion:
    v.expect_counts(4, 1)
    t = v.expect_input_type_in(0, (*FLOAT_TYPES, T.TENSOR_QUANT16_ASYMM))
    if t == T.TENSOR_QUANT16_ASYMM:
        delta_t = v.expect_input_type_in(1, QUANT8_TYPES)
        v.expect_types([t, delta_t, T.TENSOR_INT32, t], [t])
        _require_box_quant(v, v.inputs[0], "the ROI tensor")
        _require_box_quant(v, v.inputs[3], "the image info tensor")
        _require_box_quant(v, v.outputs[0], "the output")
        version = _quant_version(delta_t)
    else:
        v.expect_types([t, t, T.TENSOR_INT32, t], [t])
        version = _quant_version(t)
    for i, rank in enumerate((2, 2, 1, 2)):
        v.expect_rank(i, rank)
    _require_dim(v, 0, 1, 4, "each ROI has 4 coordinates")
    _require_dim(v, 1, 0, _dim(v, 0, 0), "one delta row per ROI")
    _require_dim(v, 2, 0, _dim(v, 0, 0), "one batch index per ROI")
    _require_dim(v, 3, 1, 2, "image info is [height, width]")
    classes4 = _dim(v, 1, 1)
    v.require(classes4 % 4 == 0, f"the delta tensor's second dimension {classes4} is not a multiple of 4")
    return version


def _apply_deltas(rois: np.ndarray, deltas: np.ndarray, image_hw: np.ndarray) -> np.ndarray:
    """Boxes [R, 4] moved by deltas [R, C, 4] (dx, dy, dw, dh) and clipped to the image [R, 2]."""
    w = rois[:, 2] - rois[:, 0]
    h = rois[:, 3] - rois[:, 1]
    cx = (rois[:, 0] + rois[:, 2]) / F32(2)
    cy = (rois[:, 1] + rois[:, 3]) / F32(2)
    with np.errstate(over="ignore", invalid="ignore"):
        new_w = np.exp(deltas[..., 2]) * w[:, None]
        new_h = np.exp(deltas[..., 3]) * h[:, None]
        new_cx = cx[:, None] + deltas[..., 0] * w[:, None]
        new_cy = cy[:, None] + deltas[..., 1] * h[:, None]
        half_w, half_h = new_w / F32(2), new_h / F32(2)
        img_h, img_w = image_hw[:, 0:1], image_hw[:, 1:2]
        out = np.stack(
            [
                np.minimum(np.maximum(new_cx - half_w, F32(0)), img_w),
                np.minimum(np.maximum(new_cy - half_h, F32(0)), img_h),
                np.minimum(np.maximum(new_cx + half_w, F32(0)), img_w),
                np.minimum(np.maximum(new_cy + half_h, F32(0)), img_h),
            ],
            axis=-1,
        )
    return out.astype(F32)


def execute_bbox_transform(ctx: ExecutionContext) -> None:
    rois, deltas = _as_float(ctx, 0), _as_float(ctx, 1)
    batches = ctx.tensor(2).astype(np.int64)
    info = _as_float(ctx, 3)
    for x, rank, what in ((rois, 2, "ROIs"), (deltas, 2, "deltas"), (batches, 1, "batches"), (info, 2, "image info")):
        _expect_rank(ctx, x, rank, what)
    num_rois = rois.shape[0]
    if (
        rois.shape[1] != 4
        or deltas.shape[0] != num_rois
        or deltas.shape[1] % 4
        or deltas.shape[1] == 0
        or batches.shape[0] != num_rois
        or info.shape[1] != 2
        or info.shape[0] == 0
    ):
        raise _fail(ctx, "inconsistent input shapes")
    if np.any((batches < 0) | (batches >= info.shape[0])):
        raise _fail(ctx, f"a batch index is outside [0, {info.shape[0]})")
    if np.any((rois[:, 0] > rois[:, 2]) | (rois[:, 1] > rois[:, 3])):
        raise _fail(ctx, "a ROI has x2 < x1 or y2 < y1")
    classes = deltas.shape[1] // 4  # explicit: -1 cannot be inferred for zero ROIs
    boxes = _apply_deltas(rois, deltas.reshape(num_rois, classes, 4), info[batches])
    ctx.set_output(0, _from_float(boxes.reshape(num_rois, classes * 4), ctx.out(0)))


# -- BOX_WITH_NMS_LIMIT ---------------------------------------------------------------------------
HARD, LINEAR, GAUSSIAN = 0, 1, 2


def validate_box_with_nms_limit(v: ValidationContext) -> HalVersion:
    v.expect_counts(9, 4)
    t = v.expect_input_type_in(0, (*FLOAT_TYPES, *QUANT8_TYPES))
    box_t = T.TENSOR_QUANT16_ASYMM if t in QUANT8_TYPES else t
    f = _float_scalar_type(t) if t in FLOAT_TYPES else T.FLOAT32
    v.expect_types(
        [t, box_t, T.TENSOR_INT32, f, T.INT32, T.INT32, f, f, f],
        [t, box_t, T.TENSOR_INT32, T.TENSOR_INT32],
    )
    for i, rank in enumerate((2, 2, 1)):
        v.expect_rank(i, rank)
    classes = _dim(v, 0, 1)
    if classes:
        v.require(classes > 1, f"there must be more than one class, got {classes}")
    _require_dim(v, 1, 0, _dim(v, 0, 0), "one box row per score row")
    _require_dim(v, 1, 1, 4 * classes, "4 box coordinates per class")
    _require_dim(v, 2, 0, _dim(v, 0, 0), "one batch index per score row")
    _require_constant(v, 5, lambda k: k in (HARD, LINEAR, GAUSSIAN), "the NMS kernel must be 0, 1 or 2")
    if t in QUANT8_TYPES:
        _require_box_quant(v, v.inputs[1], "the box tensor")
        _require_same_quant(v, v.outputs[0], v.inputs[0], "the output scores")
        _require_box_quant(v, v.outputs[1], "the output boxes")
    return _quant_version(t)


def _soft_suppressor(
    scores: np.ndarray, boxes: np.ndarray, kernel: int, iou_threshold: float, sigma: float, score_threshold: float
) -> Suppressor:
    iou_t, sigma32, keep_t = F32(iou_threshold), F32(sigma), F32(score_threshold)

    def suppress(rest: np.ndarray, best: int) -> np.ndarray:
        iou = _iou(boxes[rest], boxes[best])
        with np.errstate(all="ignore"):
            if kernel == HARD:
                factor = np.where(iou < iou_t, F32(1), F32(0))
            elif kernel == LINEAR:
                factor = np.where(iou < iou_t, F32(1), F32(1) - iou)
            else:
                factor = np.exp(F32(-1) * iou * iou / sigma32)
            scores[rest] = (scores[rest] * factor.astype(F32)).astype(F32)
        return np.asarray(scores[rest] < keep_t)

    return suppress


def _batch_runs(batches: np.ndarray) -> list[tuple[int, int]]:
    """(start, length) of each run of equal consecutive batch indexes."""
    if batches.size == 0:
        return []
    starts = np.concatenate([[0], np.nonzero(np.diff(batches))[0] + 1])
    ends = np.concatenate([starts[1:], [batches.size]])
    return [(int(s), int(e - s)) for s, e in zip(starts, ends)]


def execute_box_with_nms_limit(ctx: ExecutionContext) -> None:
    scores_in = _as_float(ctx, 0)
    boxes_in = _as_float(ctx, 1)
    raw_boxes = ctx.tensor(1)
    batches = ctx.tensor(2).astype(np.int64)
    score_threshold = F32(ctx.scalar(3))
    max_detections = int(ctx.scalar(4))
    kernel = int(ctx.scalar(5))
    iou_threshold, sigma, nms_threshold = float(ctx.scalar(6)), float(ctx.scalar(7)), float(ctx.scalar(8))
    for x, rank, what in ((scores_in, 2, "scores"), (boxes_in, 2, "boxes"), (batches, 1, "batches")):
        _expect_rank(ctx, x, rank, what)
    num_rois, num_classes = scores_in.shape
    if boxes_in.shape != (num_rois, 4 * num_classes) or batches.shape != (num_rois,) or num_classes < 2:
        raise _fail(ctx, "inconsistent input shapes")
    if kernel not in (HARD, LINEAR, GAUSSIAN):
        raise _fail(ctx, f"unsupported NMS kernel {kernel}")

    chosen_rows: list[np.ndarray] = []
    chosen_scores: list[np.ndarray] = []
    chosen_batches: list[np.ndarray] = []
    for start, length in _batch_runs(batches):
        scores = scores_in[start : start + length].reshape(-1).astype(F32)
        boxes = boxes_in[start : start + length].reshape(-1, 4)
        # The reference checks the first `length` boxes of the batch in flat order.
        head = boxes[:length]
        if np.any((head[:, 0] > head[:, 2]) | (head[:, 1] > head[:, 3])):
            raise _fail(ctx, "a box has x2 < x1 or y2 < y1")
        suppress = _soft_suppressor(scores, boxes, kernel, iou_threshold, sigma, nms_threshold)
        per_class: list[np.ndarray] = []
        for c in range(1, num_classes):
            rows = np.nonzero(scores_in[start : start + length, c].astype(F32) > score_threshold)[0]
            per_class.append(_nms(scores, rows * num_classes + c, max_detections, suppress))
        picked = np.concatenate(per_class) if per_class else np.zeros(0, np.int64)
        picked = picked[_stable_desc(scores[picked])]
        if max_detections >= 0:
            picked = picked[:max_detections]
        picked = picked[np.lexsort((-scores[picked].astype(np.float64), picked % num_classes))]
        chosen_rows.append(picked + start * num_classes)
        chosen_scores.append(scores[picked])
        chosen_batches.append(np.full(len(picked), batches[start], dtype=np.int32))

    flat = np.concatenate(chosen_rows) if chosen_rows else np.zeros(0, np.int64)
    out_scores = np.concatenate(chosen_scores) if chosen_scores else np.zeros(0, F32)
    ctx.set_output(0, _from_float(out_scores, ctx.out(0)))
    ctx.set_output(1, raw_boxes.reshape(-1, 4)[flat])
    ctx.set_output(2, (flat % num_classes).astype(np.int32))
    ctx.set_output(3, np.concatenate(chosen_batches) if chosen_batches else np.zeros(0, np.int32))


# -- GENERATE_PROPOSALS -----------------------------------------------------------------------------
def validate_generate_proposals(v: ValidationContext) -> HalVersion:
    v.expect_counts(11, 3)
    t = v.expect_input_type_in(0, (*FLOAT_TYPES, *QUANT8_TYPES))
    if t in QUANT8_TYPES:
        anchor_t, info_t, f = T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT16_ASYMM, T.FLOAT32
    else:
        anchor_t, info_t, f = t, t, _float_scalar_type(t)
    v.expect_types(
        [t, t, anchor_t, info_t, f, f, T.INT32, T.INT32, f, f, T.BOOL],
        [t, info_t, T.TENSOR_INT32],
    )
    for i, rank in enumerate((4, 4, 2, 2)):
        v.expect_rank(i, rank)
    nchw = _constant(v, 10)
    if nchw is not None:
        h_axis, w_axis, c_axis = (2, 3, 1) if nchw else (1, 2, 3)
        anchors = _dim(v, 0, c_axis)
        _require_dim(v, 1, c_axis, 4 * anchors, "4 deltas per anchor")
        _require_dim(v, 1, h_axis, _dim(v, 0, h_axis), "deltas and scores have the same height")
        _require_dim(v, 1, w_axis, _dim(v, 0, w_axis), "deltas and scores have the same width")
        _require_dim(v, 2, 0, anchors, "one anchor per score channel")
    _require_dim(v, 1, 0, _dim(v, 0, 0), "deltas and scores have the same batches")
    _require_dim(v, 3, 0, _dim(v, 0, 0), "one image info row per batch")
    _require_dim(v, 2, 1, 4, "each anchor has 4 coordinates")
    _require_dim(v, 3, 1, 2, "image info is [height, width]")
    if t in QUANT8_TYPES:
        v.require(_same_f32(v.inputs[2].scale, BOX_SCALE), "the anchor tensor must have scale 0.125")
        _require_box_quant(v, v.inputs[3], "the image info tensor")
        _require_same_quant(v, v.outputs[0], v.inputs[0], "the output scores")
        _require_box_quant(v, v.outputs[1], "the output boxes")
    return _quant_version(t)


def execute_generate_proposals(ctx: ExecutionContext) -> None:
    nchw = bool(ctx.scalar(10))
    scores_all, deltas_all = _as_float(ctx, 0), _as_float(ctx, 1)
    anchors, info = _as_float(ctx, 2), _as_float(ctx, 3)
    for x, rank, what in (
        (scores_all, 4, "scores"),
        (deltas_all, 4, "deltas"),
        (anchors, 2, "anchors"),
        (info, 2, "image info"),
    ):
        _expect_rank(ctx, x, rank, what)
    scores_all, deltas_all = _to_nhwc(scores_all, nchw), _to_nhwc(deltas_all, nchw)
    batches, height, width, num_anchors = scores_all.shape
    if (
        deltas_all.shape != (batches, height, width, 4 * num_anchors)
        or anchors.shape != (num_anchors, 4)
        or info.shape != (batches, 2)
    ):
        raise _fail(ctx, "inconsistent input shapes")
    h_stride, w_stride = F32(ctx.scalar(4)), F32(ctx.scalar(5))
    pre_nms, post_nms = int(ctx.scalar(6)), int(ctx.scalar(7))
    iou_threshold, min_size = float(ctx.scalar(8)), F32(ctx.scalar(9))

    h_shift = np.arange(height, dtype=F32) * h_stride
    w_shift = np.arange(width, dtype=F32) * w_stride
    shift = np.zeros((height, width, 1, 4), dtype=F32)
    shift[..., 0] = shift[..., 2] = w_shift[None, :, None]
    shift[..., 1] = shift[..., 3] = h_shift[:, None, None]
    base = (anchors[None, None, :, :] + shift).reshape(-1, 4).astype(F32)
    if np.any((base[:, 0] > base[:, 2]) | (base[:, 1] > base[:, 3])):
        raise _fail(ctx, "an anchor has x2 < x1 or y2 < y1")

    out_scores: list[np.ndarray] = []
    out_boxes: list[np.ndarray] = []
    out_batches: list[np.ndarray] = []
    for b in range(batches):
        boxes = _apply_deltas(base, deltas_all[b].reshape(-1, 1, 4), np.broadcast_to(info[b], (len(base), 2)))
        boxes = boxes.reshape(-1, 4)
        scores = scores_all[b].reshape(-1)
        order = np.arange(len(scores))
        if 0 < pre_nms < len(order):
            order = _stable_desc(scores)[:pre_nms]
        cand = boxes[order]
        w = cand[:, 2] - cand[:, 0]
        h = cand[:, 3] - cand[:, 1]
        keep = (
            (w > min_size)
            & (h > min_size)
            & (cand[:, 0] + w / F32(2) < info[b, 1])
            & (cand[:, 1] + h / F32(2) < info[b, 0])
        )
        picked = _nms(scores, order[keep], post_nms, _hard_suppressor(boxes, iou_threshold))
        out_scores.append(scores[picked])
        out_boxes.append(boxes[picked])
        out_batches.append(np.full(len(picked), b, dtype=np.int32))
    ctx.set_output(0, _from_float(np.concatenate(out_scores) if out_scores else np.zeros(0, F32), ctx.out(0)))
    ctx.set_output(1, _from_float(np.concatenate(out_boxes) if out_boxes else np.zeros((0, 4), F32), ctx.out(1)))
    ctx.set_output(2, np.concatenate(out_batches) if out_batches else np.zeros(0, np.int32))


# -- DETECTION_POSTPROCESSING --------------------------------------------------------------------
def validate_detection_postprocessing(v: ValidationContext) -> HalVersion:
    v.expect_counts(14, 4)
    t = v.expect_input_type_in(0, FLOAT_TYPES)
    f = _float_scalar_type(t)
    v.expect_types(
        [t, t, t, f, f, f, f, T.BOOL, T.INT32, T.INT32, T.INT32, f, f, T.BOOL],
        [t, t, T.TENSOR_INT32, T.TENSOR_INT32],
    )
    for i, rank in enumerate((3, 3, 2)):
        v.expect_rank(i, rank)
    _require_dim(v, 1, 0, _dim(v, 0, 0), "deltas and scores have the same batches")
    _require_dim(v, 1, 1, _dim(v, 0, 1), "one delta row per anchor")
    _require_dim(v, 2, 0, _dim(v, 0, 1), "one anchor per score row")
    _require_dim(v, 2, 1, 4, "each anchor has 4 values")
    classes = _dim(v, 0, 2)
    if classes:
        v.require(classes > 1, f"there must be more than one class, got {classes}")
    encoding = _dim(v, 1, 2)
    if encoding:
        v.require(encoding >= 4, f"the box encoding length must be at least 4, got {encoding}")
    for i in (3, 4, 5, 6):
        _require_constant(v, i, lambda x: x > 0, "the delta scale must be positive")
    for i in (11, 12):
        _require_constant(v, i, lambda x: x >= 0, "the threshold must not be negative")
    _require_constant(v, 8, lambda x: x > 0, "max_num_detections must be positive")
    regular = _constant(v, 7)
    if regular is True:
        _require_constant(v, 10, lambda x: x > 0, "max detections per class must be positive")
    elif regular is False:
        _require_constant(v, 9, lambda x: x > 0, "max classes per detection must be positive")
    return _quant_version(t)


def _decode_center_boxes(deltas: np.ndarray, anchors: np.ndarray, scales: Sequence[F32]) -> np.ndarray:
    """[y1, x1, y2, x2] boxes from anchors [ctr_y, ctr_x, h, w] and deltas [dy, dx, dh, dw]."""
    sy, sx, sh, sw = scales
    ay, ax, ah, aw = (anchors[:, k] for k in range(4))
    with np.errstate(over="ignore", invalid="ignore"):
        y = ay + ah * deltas[:, 0] / sy
        x = ax + aw * deltas[:, 1] / sx
        half_h = ah * np.exp(deltas[:, 2] / sh) * F32(0.5)
        half_w = aw * np.exp(deltas[:, 3] / sw) * F32(0.5)
        return np.stack([y - half_h, x - half_w, y + half_h, x + half_w], axis=-1).astype(F32)


def execute_detection_postprocessing(ctx: ExecutionContext) -> None:
    scores_all, deltas_all, anchors = _as_float(ctx, 0), _as_float(ctx, 1), _as_float(ctx, 2)
    for x, rank, what in ((scores_all, 3, "scores"), (deltas_all, 3, "deltas"), (anchors, 2, "anchors")):
        _expect_rank(ctx, x, rank, what)
    batches, num_anchors, num_classes = scores_all.shape
    scales = [F32(ctx.scalar(i)) for i in (3, 4, 5, 6)]
    regular = bool(ctx.scalar(7))
    max_detections, max_classes, max_per_class = (int(ctx.scalar(i)) for i in (8, 9, 10))
    score_threshold, iou_threshold = F32(ctx.scalar(11)), float(ctx.scalar(12))
    label_offset = 0 if bool(ctx.scalar(13)) else 1
    if (
        deltas_all.shape[:2] != (batches, num_anchors)
        or deltas_all.shape[2] < 4
        or anchors.shape != (num_anchors, 4)
        or num_classes < 2
    ):
        raise _fail(ctx, "inconsistent input shapes")
    if not all(s > 0 for s in scales) or score_threshold < 0 or iou_threshold < 0 or max_detections <= 0:
        raise _fail(ctx, "scales, thresholds and max_num_detections must be positive")
    if (regular and max_per_class <= 0) or (not regular and max_classes <= 0):
        raise _fail(ctx, "the per-class / per-detection limit must be positive")
    num_out = max_detections if regular else max_detections * max_classes

    out_scores = np.zeros((batches, num_out), F32)
    out_boxes = np.zeros((batches, num_out, 4), F32)
    out_classes = np.zeros((batches, num_out), np.int32)
    out_counts = np.zeros(batches, np.int32)
    for b in range(batches):
        boxes = _decode_center_boxes(deltas_all[b, :, :4], anchors, scales)
        scores = scores_all[b]
        if regular:
            flat = scores.reshape(-1)
            per_box = boxes[np.arange(flat.size) // num_classes]
            suppress = _hard_suppressor(per_box, iou_threshold)
            picked_parts = [
                _nms(flat, np.nonzero(scores[:, c] > score_threshold)[0] * num_classes + c, max_per_class, suppress)
                for c in range(1, num_classes)
            ]
            picked = np.concatenate(picked_parts)
            picked = picked[_stable_desc(flat[picked])][:max_detections]
            n = len(picked)
            out_scores[b, :n] = flat[picked]
            out_boxes[b, :n] = per_box[picked]
            out_classes[b, :n] = picked % num_classes - label_offset
            out_counts[b] = n
        else:
            classes_out = min(num_classes - 1, max_classes)
            best = scores[:, 1:].max(axis=1)
            picked = _nms(
                best, np.nonzero(best > score_threshold)[0], max_detections, _hard_suppressor(boxes, iou_threshold)
            )
            ranked = np.argsort(-scores[picked, 1:].astype(np.float64), axis=1, kind="stable")[:, :classes_out] + 1
            n = len(picked) * classes_out
            out_scores[b, :n] = np.take_along_axis(scores[picked], ranked, axis=1).reshape(-1)
            out_boxes[b, :n] = np.repeat(boxes[picked], classes_out, axis=0)
            out_classes[b, :n] = (ranked - label_offset).reshape(-1)
            out_counts[b] = n
    ctx.set_output(0, out_scores)
    ctx.set_output(1, out_boxes)
    ctx.set_output(2, out_classes)
    ctx.set_output(3, out_counts)


# -- HEATMAP_MAX_KEYPOINT -----------------------------------------------------------------------
def validate_heatmap_max_keypoint(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 2)
    t = v.expect_input_type_in(0, (*FLOAT_TYPES, *QUANT8_TYPES))
    box_t = T.TENSOR_QUANT16_ASYMM if t in QUANT8_TYPES else t
    v.expect_types([t, box_t, T.BOOL], [t, box_t])
    v.expect_rank(0, 4)
    v.expect_rank(1, 2)
    _require_dim(v, 1, 1, 4, "each box has 4 coordinates")
    _require_dim(v, 1, 0, _dim(v, 0, 0), "one box per heatmap")
    nchw = _constant(v, 2)
    if nchw is not None:
        size = _dim(v, 0, 2)
        _require_dim(v, 0, 3 if nchw else 1, size, "heatmaps must be square")
        if size:
            v.require(size >= 2, f"the heatmap size must be at least 2, got {size}")
    if t in QUANT8_TYPES:
        _require_box_quant(v, v.inputs[1], "the box tensor")
        _require_box_quant(v, v.outputs[1], "the output keypoints")
    return _quant_version(t)


def _refine_peaks(
    grid: np.ndarray, peak: np.ndarray, atol: F32, rtol: F32
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sub-pixel peak offsets (dx, dy) and scores from 3x3 neighbourhoods [..., 3, 3].

    A second-order Taylor expansion around the centre; singular Hessians keep
    the integer peak, offsets beyond 1.5 pixels are scaled back to 1.5.
    """
    g = grid.astype(F32)
    two = F32(2)
    b0 = -(g[..., 1, 2] - g[..., 1, 0]) / two
    b1 = -(g[..., 2, 1] - g[..., 0, 1]) / two
    a00 = g[..., 1, 0] - two * g[..., 1, 1] + g[..., 1, 2]
    a01 = (g[..., 2, 2] - g[..., 2, 0] - g[..., 0, 2] + g[..., 0, 0]) / F32(4)
    a11 = g[..., 0, 1] - two * g[..., 1, 1] + g[..., 2, 1]
    cross = a00 * a11
    det = cross - a01 * a01
    with np.errstate(all="ignore"):
        solvable = ~(np.abs(det) < atol + rtol * cross)
        d0 = np.where(solvable, (a11 * b0 - a01 * b1) / det, F32(0)).astype(F32)
        d1 = np.where(solvable, (a00 * b1 - a01 * b0) / det, F32(0)).astype(F32)
        largest = np.maximum(np.abs(d0), np.abs(d1))
        shrink = np.where(largest > F32(1.5), F32(1.5) / largest, F32(1)).astype(F32)
        d0, d1 = (d0 * shrink).astype(F32), (d1 * shrink).astype(F32)
        refined = g[..., 1, 1] - b0 * d0 - b1 * d1 + ((a00 * d0 + a01 * d1) * d0 + (a01 * d0 + a11 * d1) * d1) / two
    score = np.where(solvable, refined, peak).astype(F32)
    return d0, d1, score


def execute_heatmap_max_keypoint(ctx: ExecutionContext) -> None:
    nchw = bool(ctx.scalar(2))
    heatmaps, boxes = _as_float(ctx, 0), _as_float(ctx, 1)
    _expect_rank(ctx, heatmaps, 4, "the heatmap tensor")
    _expect_rank(ctx, boxes, 2, "the box tensor")
    heatmaps = _to_nhwc(heatmaps, nchw)
    num_boxes, size, size_w, keypoints = heatmaps.shape
    if size != size_w or size < 2 or boxes.shape != (num_boxes, 4):
        raise _fail(ctx, f"heatmaps {list(heatmaps.shape)} and boxes {list(boxes.shape)} are inconsistent")
    if np.any((boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3])):
        raise _fail(ctx, "a box has x2 < x1 or y2 < y1")
    t = ctx.in_type(0)
    tol = F32(1e-3) if t == T.TENSOR_FLOAT16 else F32(1e-5)

    flat = heatmaps.reshape(num_boxes, size * size, keypoints).transpose(0, 2, 1)  # [N, K, H*W]
    peak_index = np.argmax(flat, axis=2)
    peak = np.take_along_axis(flat, peak_index[..., None], axis=2)[..., 0]
    row, col = peak_index // size, peak_index % size
    offsets = np.arange(-1, 2)

    def mirrored(center: np.ndarray) -> np.ndarray:
        idx = center[..., None] + offsets
        return np.where(idx < 0, 1, np.where(idx >= size, size - 2, idx))

    rows, cols = mirrored(row), mirrored(col)  # [N, K, 3]
    n_idx = np.arange(num_boxes)[:, None, None, None]
    k_idx = np.arange(keypoints)[None, :, None, None]
    grid = heatmaps[n_idx, rows[..., :, None], cols[..., None, :], k_idx]  # [N, K, 3, 3]
    dx, dy, score = _refine_peaks(grid, peak, tol, tol)

    x1, y1 = boxes[:, 0:1], boxes[:, 1:2]
    width, height = boxes[:, 2:3] - x1, boxes[:, 3:4] - y1
    size32 = F32(size)
    rel_x = (col.astype(F32) + dx + F32(0.5)) / size32
    rel_y = (row.astype(F32) + dy + F32(0.5)) / size32
    keypoints_xy = np.stack([rel_x * width + x1, rel_y * height + y1], axis=-1).astype(F32)
    ctx.set_output(0, _from_float(score, ctx.out(0)))
    ctx.set_output(1, _from_float(keypoints_xy, ctx.out(1)))


register(OperationType.ROI_ALIGN, validate=validate_roi_align, execute=execute_roi_align)
register(OperationType.ROI_POOLING, validate=validate_roi_pooling, execute=execute_roi_pooling)
register(OperationType.AXIS_ALIGNED_BBOX_TRANSFORM, validate=validate_bbox_transform, execute=execute_bbox_transform)
register(OperationType.BOX_WITH_NMS_LIMIT, validate=validate_box_with_nms_limit, execute=execute_box_with_nms_limit)
register(OperationType.GENERATE_PROPOSALS, validate=validate_generate_proposals, execute=execute_generate_proposals)
register(
    OperationType.DETECTION_POSTPROCESSING,
    validate=validate_detection_postprocessing,
    execute=execute_detection_postprocessing,
)
register(
    OperationType.HEATMAP_MAX_KEYPOINT,
    validate=validate_heatmap_max_keypoint,
    execute=execute_heatmap_max_keypoint,
)

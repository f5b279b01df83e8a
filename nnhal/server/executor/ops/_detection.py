"""Helpers shared by the detection families (ROI_ALIGN / ROI_POOLING, AXIS_ALIGNED_BBOX_TRANSFORM,
BOX_WITH_NMS_LIMIT, GENERATE_PROPOSALS, DETECTION_POSTPROCESSING, HEATMAP_MAX_KEYPOINT).

Apart from quantized ROI_ALIGN (integer bilinear weights, fixed-point
rescale), the reference computes these operations on float32 copies of their
inputs and quantizes the results back (round half away from zero after adding
the zero point); ``as_float`` and ``from_float`` do the same. Boxes of
quantized models are TENSOR_QUANT16_ASYMM with scale 0.125 and zero point 0
(TENSOR_QUANT16_SYMM for GENERATE_PROPOSALS anchors).

Non-maximum suppression keeps the reference's selection order: the highest
remaining score is taken (first one on ties), the suppressed candidates are
swapped to the end of the pending range, and final orderings use stable sorts.
Outputs whose size depends on the data (the box counts) may be zero-sized.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.core.enums import HalVersion, OperandType
from nnhal.core.operand_types import DTYPE
from nnhal.core.types import Operand
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._validation import same_quant
from nnhal.server.executor.ops.common import FLOAT_TYPES, T, qrange, round_half_away, version_for_types

F32 = np.float32
BOX_SCALE = 0.125


def as_float(ctx: ExecutionContext, i: int) -> np.ndarray:
    """Input ``i`` as float32: float16 widened, quantized types dequantized."""
    x = ctx.tensor(i)
    t = ctx.in_type(i)
    if t == T.TENSOR_FLOAT32:
        return x
    if t == T.TENSOR_FLOAT16:
        return x.astype(F32)
    return (x.astype(F32) - F32(ctx.zero_point(i))) * F32(ctx.scale(i))


def from_float(x: np.ndarray, operand: Operand) -> np.ndarray:
    """Float32 results in the operand's type (quantized: round(x / scale + zp), saturated)."""
    t = operand.type
    if t in FLOAT_TYPES:
        return x
    lo, hi = qrange(t)
    with np.errstate(invalid="ignore", over="ignore"):
        q = round_half_away(np.asarray(x, F32) / F32(operand.scale) + F32(operand.zero_point))
    return np.asarray(np.clip(np.nan_to_num(q), lo, hi), dtype=DTYPE[t])


def is_box_quant(scale: float, zero_point: int) -> bool:
    """The fixed quantization of quantized boxes: scale 0.125 (as float32), zero point 0."""
    return bool(F32(scale) == F32(BOX_SCALE)) and zero_point == 0


def require_box_quant(v: ValidationContext, operand: Operand, what: str) -> None:
    v.require(
        is_box_quant(operand.scale, operand.zero_point),
        f"{what} must have scale 0.125 and zero point 0, got {operand.scale} and {operand.zero_point}",
    )


def require_output_quant(v: ValidationContext, out: Operand, inp: Operand, what: str) -> None:
    v.require(same_quant(out, inp), f"{what} must have the input's scale and zero point")


def dim(v: ValidationContext, i: int, axis: int) -> int:
    """Declared size of input ``i`` along ``axis`` (0 when unknown)."""
    dims = v.input_dims(i)
    return dims[axis] if axis < len(dims) else 0


def require_dim(v: ValidationContext, i: int, axis: int, expected: int, what: str) -> None:
    got = dim(v, i, axis)
    if got and expected:
        v.require(got == expected, f"{what}: input {i} dimension {axis} is {got}, expected {expected}")


def require_constant(v: ValidationContext, i: int, check: Callable[[float], bool], message: str) -> None:
    value = v.constant_scalar(i)
    if value is not None:
        v.require(check(value), f"input {i}: {message}, got {value}")


def expect_rank(ctx: ExecutionContext, x: np.ndarray, rank: int, what: str) -> None:
    if x.ndim != rank:
        ctx.fail(f"{what} must have rank {rank}, got shape {list(x.shape)}")


def quant_version(t: OperandType) -> HalVersion:
    return version_for_types([t], HalVersion.V1_2)


def iou(boxes: np.ndarray, box: np.ndarray) -> np.ndarray:
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


def nms(scores: np.ndarray, candidates: np.ndarray, max_detections: int, suppress: Suppressor) -> np.ndarray:
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


def hard_suppressor(boxes: np.ndarray, iou_threshold: float) -> Suppressor:
    threshold = F32(iou_threshold)

    def suppress(rest: np.ndarray, best: int) -> np.ndarray:
        return np.asarray(iou(boxes[rest], boxes[best]) >= threshold)

    return suppress


def stable_desc(scores: np.ndarray) -> np.ndarray:
    """Indexes that sort ``scores`` descending, ties in their original order."""
    return np.argsort(-scores.astype(np.float64), kind="stable")


def apply_deltas(rois: np.ndarray, deltas: np.ndarray, image_hw: np.ndarray) -> np.ndarray:
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

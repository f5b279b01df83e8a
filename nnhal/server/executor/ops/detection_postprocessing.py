"""DETECTION_POSTPROCESSING: SSD-style decoding of center-size boxes from anchors and
deltas, then hard NMS, per class ("regular") or over each box's best class.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._detection import (
    F32,
    as_float,
    dim,
    expect_rank,
    hard_suppressor,
    nms,
    quant_version,
    require_constant,
    require_dim,
    stable_desc,
)
from nnhal.server.executor.ops.common import FLOAT_TYPES, T, float_scalar_type
from nnhal.server.executor.registry import register


def validate_detection_postprocessing(v: ValidationContext) -> HalVersion:
    v.expect_counts(14, 4)
    t = v.expect_input_type_in(0, FLOAT_TYPES)
    f = float_scalar_type(t)
    v.expect_types(
        [t, t, t, f, f, f, f, T.BOOL, T.INT32, T.INT32, T.INT32, f, f, T.BOOL],
        [t, t, T.TENSOR_INT32, T.TENSOR_INT32],
    )
    for i, rank in enumerate((3, 3, 2)):
        v.expect_rank(i, rank)
    require_dim(v, 1, 0, dim(v, 0, 0), "deltas and scores have the same batches")
    require_dim(v, 1, 1, dim(v, 0, 1), "one delta row per anchor")
    require_dim(v, 2, 0, dim(v, 0, 1), "one anchor per score row")
    require_dim(v, 2, 1, 4, "each anchor has 4 values")
    classes = dim(v, 0, 2)
    if classes:
        v.require(classes > 1, f"there must be more than one class, got {classes}")
    encoding = dim(v, 1, 2)
    if encoding:
        v.require(encoding >= 4, f"the box encoding length must be at least 4, got {encoding}")
    for i in (3, 4, 5, 6):
        require_constant(v, i, lambda x: x > 0, "the delta scale must be positive")
    for i in (11, 12):
        require_constant(v, i, lambda x: x >= 0, "the threshold must not be negative")
    require_constant(v, 8, lambda x: x > 0, "max_num_detections must be positive")
    regular = v.constant_scalar(7)
    if regular is True:
        require_constant(v, 10, lambda x: x > 0, "max detections per class must be positive")
    elif regular is False:
        require_constant(v, 9, lambda x: x > 0, "max classes per detection must be positive")
    return quant_version(t)


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
    scores_all, deltas_all, anchors = as_float(ctx, 0), as_float(ctx, 1), as_float(ctx, 2)
    for x, rank, what in ((scores_all, 3, "scores"), (deltas_all, 3, "deltas"), (anchors, 2, "anchors")):
        expect_rank(ctx, x, rank, what)
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
        ctx.fail("inconsistent input shapes")
    if not all(s > 0 for s in scales) or score_threshold < 0 or iou_threshold < 0 or max_detections <= 0:
        ctx.fail("scales, thresholds and max_num_detections must be positive")
    if (regular and max_per_class <= 0) or (not regular and max_classes <= 0):
        ctx.fail("the per-class / per-detection limit must be positive")
    num_out = max_detections if regular else max_detections * max_classes
    reserve_shape((batches, num_out, 7), 4)

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
            suppress = hard_suppressor(per_box, iou_threshold)
            picked_parts = [
                nms(flat, np.nonzero(scores[:, c] > score_threshold)[0] * num_classes + c, max_per_class, suppress)
                for c in range(1, num_classes)
            ]
            picked = np.concatenate(picked_parts)
            picked = picked[stable_desc(flat[picked])][:max_detections]
            n = len(picked)
            out_scores[b, :n] = flat[picked]
            out_boxes[b, :n] = per_box[picked]
            out_classes[b, :n] = picked % num_classes - label_offset
            out_counts[b] = n
        else:
            classes_out = min(num_classes - 1, max_classes)
            best = scores[:, 1:].max(axis=1)
            picked = nms(
                best, np.nonzero(best > score_threshold)[0], max_detections, hard_suppressor(boxes, iou_threshold)
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


register(
    OperationType.DETECTION_POSTPROCESSING,
    validate=validate_detection_postprocessing,
    execute=execute_detection_postprocessing,
)

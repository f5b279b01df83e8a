"""BOX_WITH_NMS_LIMIT: per-class non-maximum suppression (hard, linear or Gaussian
soft NMS) over the boxes of each batch, then the best detections overall.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._detection import (
    F32,
    Suppressor,
    as_float,
    dim,
    expect_rank,
    from_float,
    iou,
    nms,
    quant_version,
    require_box_quant,
    require_constant,
    require_dim,
    require_output_quant,
    stable_desc,
)
from nnhal.server.executor.ops.common import FLOAT_TYPES, QUANT8_TYPES, T, float_scalar_type
from nnhal.server.executor.registry import register

HARD, LINEAR, GAUSSIAN = 0, 1, 2


def validate_box_with_nms_limit(v: ValidationContext) -> HalVersion:
    v.expect_counts(9, 4)
    t = v.expect_input_type_in(0, (*FLOAT_TYPES, *QUANT8_TYPES))
    box_t = T.TENSOR_QUANT16_ASYMM if t in QUANT8_TYPES else t
    f = float_scalar_type(t) if t in FLOAT_TYPES else T.FLOAT32
    v.expect_types(
        [t, box_t, T.TENSOR_INT32, f, T.INT32, T.INT32, f, f, f],
        [t, box_t, T.TENSOR_INT32, T.TENSOR_INT32],
    )
    for i, rank in enumerate((2, 2, 1)):
        v.expect_rank(i, rank)
    classes = dim(v, 0, 1)
    if classes:
        v.require(classes > 1, f"there must be more than one class, got {classes}")
    require_dim(v, 1, 0, dim(v, 0, 0), "one box row per score row")
    require_dim(v, 1, 1, 4 * classes, "4 box coordinates per class")
    require_dim(v, 2, 0, dim(v, 0, 0), "one batch index per score row")
    require_constant(v, 5, lambda k: k in (HARD, LINEAR, GAUSSIAN), "the NMS kernel must be 0, 1 or 2")
    if t in QUANT8_TYPES:
        require_box_quant(v, v.inputs[1], "the box tensor")
        require_output_quant(v, v.outputs[0], v.inputs[0], "the output scores")
        require_box_quant(v, v.outputs[1], "the output boxes")
    return quant_version(t)


def _soft_suppressor(
    scores: np.ndarray, boxes: np.ndarray, kernel: int, iou_threshold: float, sigma: float, score_threshold: float
) -> Suppressor:
    iou_t, sigma32, keep_t = F32(iou_threshold), F32(sigma), F32(score_threshold)

    def suppress(rest: np.ndarray, best: int) -> np.ndarray:
        overlap = iou(boxes[rest], boxes[best])
        with np.errstate(all="ignore"):
            if kernel == HARD:
                factor = np.where(overlap < iou_t, F32(1), F32(0))
            elif kernel == LINEAR:
                factor = np.where(overlap < iou_t, F32(1), F32(1) - overlap)
            else:
                factor = np.exp(F32(-1) * overlap * overlap / sigma32)
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
    scores_in = as_float(ctx, 0)
    boxes_in = as_float(ctx, 1)
    raw_boxes = ctx.tensor(1)
    batches = ctx.tensor(2).astype(np.int64)
    score_threshold = F32(ctx.scalar(3))
    max_detections = int(ctx.scalar(4))
    kernel = int(ctx.scalar(5))
    iou_threshold, sigma, nms_threshold = float(ctx.scalar(6)), float(ctx.scalar(7)), float(ctx.scalar(8))
    for x, rank, what in ((scores_in, 2, "scores"), (boxes_in, 2, "boxes"), (batches, 1, "batches")):
        expect_rank(ctx, x, rank, what)
    num_rois, num_classes = scores_in.shape
    if boxes_in.shape != (num_rois, 4 * num_classes) or batches.shape != (num_rois,) or num_classes < 2:
        ctx.fail("inconsistent input shapes")
    if kernel not in (HARD, LINEAR, GAUSSIAN):
        ctx.fail(f"unsupported NMS kernel {kernel}")

    chosen_rows: list[np.ndarray] = []
    chosen_scores: list[np.ndarray] = []
    chosen_batches: list[np.ndarray] = []
    for start, length in _batch_runs(batches):
        scores = scores_in[start : start + length].reshape(-1).astype(F32)
        boxes = boxes_in[start : start + length].reshape(-1, 4)
        # The reference checks the first `length` boxes of the batch in flat order.
        head = boxes[:length]
        if np.any((head[:, 0] > head[:, 2]) | (head[:, 1] > head[:, 3])):
            ctx.fail("a box has x2 < x1 or y2 < y1")
        suppress = _soft_suppressor(scores, boxes, kernel, iou_threshold, sigma, nms_threshold)
        per_class: list[np.ndarray] = []
        for c in range(1, num_classes):
            rows = np.nonzero(scores_in[start : start + length, c].astype(F32) > score_threshold)[0]
            per_class.append(nms(scores, rows * num_classes + c, max_detections, suppress))
        picked = np.concatenate(per_class) if per_class else np.zeros(0, np.int64)
        picked = picked[stable_desc(scores[picked])]
        if max_detections >= 0:
            picked = picked[:max_detections]
        picked = picked[np.lexsort((-scores[picked].astype(np.float64), picked % num_classes))]
        chosen_rows.append(picked + start * num_classes)
        chosen_scores.append(scores[picked])
        chosen_batches.append(np.full(len(picked), batches[start], dtype=np.int32))

    flat = np.concatenate(chosen_rows) if chosen_rows else np.zeros(0, np.int64)
    out_scores = np.concatenate(chosen_scores) if chosen_scores else np.zeros(0, F32)
    ctx.set_output(0, from_float(out_scores, ctx.out(0)))
    ctx.set_output(1, raw_boxes.reshape(-1, 4)[flat])
    ctx.set_output(2, (flat % num_classes).astype(np.int32))
    ctx.set_output(3, np.concatenate(chosen_batches) if chosen_batches else np.zeros(0, np.int32))


register(OperationType.BOX_WITH_NMS_LIMIT, validate=validate_box_with_nms_limit, execute=execute_box_with_nms_limit)

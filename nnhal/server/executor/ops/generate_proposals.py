"""GENERATE_PROPOSALS: region proposals from anchors moved by deltas, filtered by size
and image bounds, then hard NMS per batch (the reference's float32 arithmetic).
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._detection import (
    BOX_SCALE,
    F32,
    apply_deltas,
    as_float,
    dim,
    expect_rank,
    from_float,
    hard_suppressor,
    nms,
    quant_version,
    require_box_quant,
    require_dim,
    require_output_quant,
    stable_desc,
)
from nnhal.server.executor.ops.common import FLOAT_TYPES, QUANT8_TYPES, T, float_scalar_type, to_nhwc
from nnhal.server.executor.registry import register


def validate_generate_proposals(v: ValidationContext) -> HalVersion:
    v.expect_counts(11, 3)
    t = v.expect_input_type_in(0, (*FLOAT_TYPES, *QUANT8_TYPES))
    if t in QUANT8_TYPES:
        anchor_t, info_t, f = T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT16_ASYMM, T.FLOAT32
    else:
        anchor_t, info_t, f = t, t, float_scalar_type(t)
    v.expect_types(
        [t, t, anchor_t, info_t, f, f, T.INT32, T.INT32, f, f, T.BOOL],
        [t, info_t, T.TENSOR_INT32],
    )
    for i, rank in enumerate((4, 4, 2, 2)):
        v.expect_rank(i, rank)
    nchw = v.constant_scalar(10)
    if nchw is not None:
        h_axis, w_axis, c_axis = (2, 3, 1) if nchw else (1, 2, 3)
        anchors = dim(v, 0, c_axis)
        require_dim(v, 1, c_axis, 4 * anchors, "4 deltas per anchor")
        require_dim(v, 1, h_axis, dim(v, 0, h_axis), "deltas and scores have the same height")
        require_dim(v, 1, w_axis, dim(v, 0, w_axis), "deltas and scores have the same width")
        require_dim(v, 2, 0, anchors, "one anchor per score channel")
    require_dim(v, 1, 0, dim(v, 0, 0), "deltas and scores have the same batches")
    require_dim(v, 3, 0, dim(v, 0, 0), "one image info row per batch")
    require_dim(v, 2, 1, 4, "each anchor has 4 coordinates")
    require_dim(v, 3, 1, 2, "image info is [height, width]")
    if t in QUANT8_TYPES:
        v.require(F32(v.inputs[2].scale) == F32(BOX_SCALE), "the anchor tensor must have scale 0.125")
        require_box_quant(v, v.inputs[3], "the image info tensor")
        require_output_quant(v, v.outputs[0], v.inputs[0], "the output scores")
        require_box_quant(v, v.outputs[1], "the output boxes")
    return quant_version(t)


def execute_generate_proposals(ctx: ExecutionContext) -> None:
    nchw = bool(ctx.scalar(10))
    scores_all, deltas_all = as_float(ctx, 0), as_float(ctx, 1)
    anchors, info = as_float(ctx, 2), as_float(ctx, 3)
    for x, rank, what in (
        (scores_all, 4, "scores"),
        (deltas_all, 4, "deltas"),
        (anchors, 2, "anchors"),
        (info, 2, "image info"),
    ):
        expect_rank(ctx, x, rank, what)
    scores_all, deltas_all = to_nhwc(scores_all, nchw), to_nhwc(deltas_all, nchw)
    batches, height, width, num_anchors = scores_all.shape
    if (
        deltas_all.shape != (batches, height, width, 4 * num_anchors)
        or anchors.shape != (num_anchors, 4)
        or info.shape != (batches, 2)
    ):
        ctx.fail("inconsistent input shapes")
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
        ctx.fail("an anchor has x2 < x1 or y2 < y1")

    out_scores: list[np.ndarray] = []
    out_boxes: list[np.ndarray] = []
    out_batches: list[np.ndarray] = []
    for b in range(batches):
        boxes = apply_deltas(base, deltas_all[b].reshape(-1, 1, 4), np.broadcast_to(info[b], (len(base), 2)))
        boxes = boxes.reshape(-1, 4)
        scores = scores_all[b].reshape(-1)
        order = np.arange(len(scores))
        if 0 < pre_nms < len(order):
            order = stable_desc(scores)[:pre_nms]
        cand = boxes[order]
        w = cand[:, 2] - cand[:, 0]
        h = cand[:, 3] - cand[:, 1]
        keep = (
            (w > min_size)
            & (h > min_size)
            & (cand[:, 0] + w / F32(2) < info[b, 1])
            & (cand[:, 1] + h / F32(2) < info[b, 0])
        )
        picked = nms(scores, order[keep], post_nms, hard_suppressor(boxes, iou_threshold))
        out_scores.append(scores[picked])
        out_boxes.append(boxes[picked])
        out_batches.append(np.full(len(picked), b, dtype=np.int32))
    ctx.set_output(0, from_float(np.concatenate(out_scores) if out_scores else np.zeros(0, F32), ctx.out(0)))
    ctx.set_output(1, from_float(np.concatenate(out_boxes) if out_boxes else np.zeros((0, 4), F32), ctx.out(1)))
    ctx.set_output(2, np.concatenate(out_batches) if out_batches else np.zeros(0, np.int32))


register(OperationType.GENERATE_PROPOSALS, validate=validate_generate_proposals, execute=execute_generate_proposals)

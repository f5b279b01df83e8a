"""HEATMAP_MAX_KEYPOINT: the sub-pixel maximum of each keypoint heatmap (a second-order
Taylor refinement around the peak), mapped into its box.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._detection import (
    F32,
    as_float,
    dim,
    expect_rank,
    from_float,
    quant_version,
    require_box_quant,
    require_dim,
)
from nnhal.server.executor.ops.common import FLOAT_TYPES, QUANT8_TYPES, T, to_nhwc
from nnhal.server.executor.registry import register


def validate_heatmap_max_keypoint(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 2)
    t = v.expect_input_type_in(0, (*FLOAT_TYPES, *QUANT8_TYPES))
    box_t = T.TENSOR_QUANT16_ASYMM if t in QUANT8_TYPES else t
    v.expect_types([t, box_t, T.BOOL], [t, box_t])
    v.expect_rank(0, 4)
    v.expect_rank(1, 2)
    require_dim(v, 1, 1, 4, "each box has 4 coordinates")
    require_dim(v, 1, 0, dim(v, 0, 0), "one box per heatmap")
    nchw = v.constant_scalar(2)
    if nchw is not None:
        size = dim(v, 0, 2)
        require_dim(v, 0, 3 if nchw else 1, size, "heatmaps must be square")
        if size:
            v.require(size >= 2, f"the heatmap size must be at least 2, got {size}")
    if t in QUANT8_TYPES:
        require_box_quant(v, v.inputs[1], "the box tensor")
        require_box_quant(v, v.outputs[1], "the output keypoints")
    return quant_version(t)


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
    heatmaps, boxes = as_float(ctx, 0), as_float(ctx, 1)
    expect_rank(ctx, heatmaps, 4, "the heatmap tensor")
    expect_rank(ctx, boxes, 2, "the box tensor")
    heatmaps = to_nhwc(heatmaps, nchw)
    num_boxes, size, size_w, keypoints = heatmaps.shape
    if size != size_w or size < 2 or boxes.shape != (num_boxes, 4):
        ctx.fail(f"heatmaps {list(heatmaps.shape)} and boxes {list(boxes.shape)} are inconsistent")
    if np.any((boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3])):
        ctx.fail("a box has x2 < x1 or y2 < y1")
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
    ctx.set_output(0, from_float(score, ctx.out(0)))
    ctx.set_output(1, from_float(keypoints_xy, ctx.out(1)))


register(
    OperationType.HEATMAP_MAX_KEYPOINT,
    validate=validate_heatmap_max_keypoint,
    execute=execute_heatmap_max_keypoint,
)

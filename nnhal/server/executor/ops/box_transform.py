"""AXIS_ALIGNED_BBOX_TRANSFORM: boxes moved by per-class deltas (dx, dy, dw, dh) and
clipped to their image, computed on float32 as the reference does.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._detection import (
    apply_deltas,
    as_float,
    dim,
    expect_rank,
    from_float,
    quant_version,
    require_box_quant,
    require_dim,
)
from nnhal.server.executor.ops.common import FLOAT_TYPES, QUANT8_TYPES, T
from nnhal.server.executor.registry import register


def validate_bbox_transform(v: ValidationContext) -> HalVersion:
    v.expect_counts(4, 1)
    t = v.expect_input_type_in(0, (*FLOAT_TYPES, T.TENSOR_QUANT16_ASYMM))
    if t == T.TENSOR_QUANT16_ASYMM:
        delta_t = v.expect_input_type_in(1, QUANT8_TYPES)
        v.expect_types([t, delta_t, T.TENSOR_INT32, t], [t])
        require_box_quant(v, v.inputs[0], "the ROI tensor")
        require_box_quant(v, v.inputs[3], "the image info tensor")
        require_box_quant(v, v.outputs[0], "the output")
        version = quant_version(delta_t)
    else:
        v.expect_types([t, t, T.TENSOR_INT32, t], [t])
        version = quant_version(t)
    for i, rank in enumerate((2, 2, 1, 2)):
        v.expect_rank(i, rank)
    require_dim(v, 0, 1, 4, "each ROI has 4 coordinates")
    require_dim(v, 1, 0, dim(v, 0, 0), "one delta row per ROI")
    require_dim(v, 2, 0, dim(v, 0, 0), "one batch index per ROI")
    require_dim(v, 3, 1, 2, "image info is [height, width]")
    classes4 = dim(v, 1, 1)
    v.require(classes4 % 4 == 0, f"the delta tensor's second dimension {classes4} is not a multiple of 4")
    return version


def execute_bbox_transform(ctx: ExecutionContext) -> None:
    rois, deltas = as_float(ctx, 0), as_float(ctx, 1)
    batches = ctx.tensor(2).astype(np.int64)
    info = as_float(ctx, 3)
    for x, rank, what in ((rois, 2, "ROIs"), (deltas, 2, "deltas"), (batches, 1, "batches"), (info, 2, "image info")):
        expect_rank(ctx, x, rank, what)
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
        ctx.fail("inconsistent input shapes")
    if np.any((batches < 0) | (batches >= info.shape[0])):
        ctx.fail(f"a batch index is outside [0, {info.shape[0]})")
    if np.any((rois[:, 0] > rois[:, 2]) | (rois[:, 1] > rois[:, 3])):
        ctx.fail("a ROI has x2 < x1 or y2 < y1")
    classes = deltas.shape[1] // 4  # explicit: -1 cannot be inferred for zero ROIs
    boxes = apply_deltas(rois, deltas.reshape(num_rois, classes, 4), info[batches])
    ctx.set_output(0, from_float(boxes.reshape(num_rois, classes * 4), ctx.out(0)))


register(OperationType.AXIS_ALIGNED_BBOX_TRANSFORM, validate=validate_bbox_transform, execute=execute_bbox_transform)

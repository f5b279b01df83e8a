"""BATCH_MATMUL (AIDL V2, NNAPI feature level 6): slices of two tensors multiplied in batches.

OperationType.aidl: inputs of rank 2 to 4 with the same type (TENSOR_FLOAT16, TENSOR_FLOAT32,
TENSOR_QUANT8_ASYMM_SIGNED, TENSOR_INT32), rank and batch size; two BOOL scalars adj_x / adj_y
transpose the last two dimensions of either input first (adjoint = transpose, as the
types are real). Output [..., r_o, c_o] with r_o = c_x if adj_x else r_x and
c_o = r_y if adj_y else c_y, of the inputs' type.

Float is one batched BLAS matmul in float32 (float16 narrowed on output). INT32 wraps as
the reference's int32 accumulation does. Quantized: exact integer accumulation of
(x - zp_x) * (y - zp_y) (float64 BLAS, exact below 2^53), then the fully-connected
requantization: multiplier s_x * s_y (float32 product) / s_out in double, TFLite's
MultiplyByQuantizedMultiplier, plus the output zero point, saturated to int8.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._fixed_point import quantize_multiplier, requantize
from nnhal.server.executor.ops.common import FLOAT_TYPES, T, qrange, to_compute
from nnhal.server.executor.registry import register

LHS, RHS, ADJ_X, ADJ_Y = 0, 1, 2, 3
OUTPUT = 0
TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_INT32)


def validate_batch_matmul(v: ValidationContext) -> HalVersion:
    v.expect_counts(4, 1)
    t = v.expect_input_type_in(LHS, TYPES)
    v.expect_types([t, t, T.BOOL, T.BOOL], [t])
    ranks = {r for r in (v.input_rank(LHS), v.input_rank(RHS)) if r is not None}
    v.require(len(ranks) <= 1, f"the inputs must have the same rank, got {sorted(ranks)}")
    for i in (LHS, RHS):
        r = v.input_rank(i)
        v.require(r is None or 2 <= r <= 4, f"input {i} must have rank 2 to 4, got {r}")
    out = v.outputs[OUTPUT]
    if out.dimensions and ranks:
        v.require(len(out.dimensions) in ranks, f"the output must have the inputs' rank, got {len(out.dimensions)}")
    return HalVersion.AIDL_V2


def _matrices(ctx: ExecutionContext) -> tuple[np.ndarray, np.ndarray]:
    x, y = ctx.tensor(LHS), ctx.tensor(RHS)
    if x.ndim != y.ndim or not 2 <= x.ndim <= 4:
        ctx.fail(f"the inputs must have the same rank, 2 to 4; got shapes {list(x.shape)} and {list(y.shape)}")
    if x.shape[:-2] != y.shape[:-2]:
        ctx.fail(f"the inputs' batch dimensions differ: {list(x.shape[:-2])} and {list(y.shape[:-2])}")
    if ctx.scalar(ADJ_X):
        x = np.swapaxes(x, -1, -2)
    if ctx.scalar(ADJ_Y):
        y = np.swapaxes(y, -1, -2)
    if 0 in x.shape[-2:] or 0 in y.shape[-2:] or x.shape[-1] != y.shape[-2]:
        ctx.fail(f"cannot multiply slices of shape {list(x.shape[-2:])} by {list(y.shape[-2:])}")
    reserve_shape((*x.shape[:-1], y.shape[-1]), 8, copies=2)
    return x, y


def execute_batch_matmul(ctx: ExecutionContext) -> None:
    x, y = _matrices(ctx)
    t = ctx.in_type(LHS)
    if t in FLOAT_TYPES:
        ctx.set_output(OUTPUT, np.matmul(to_compute(x), to_compute(y)))
        return
    if t == T.TENSOR_INT32:
        # int64 products summed exactly, then wrapped to int32 as the reference's accumulator.
        ctx.set_output(OUTPUT, np.matmul(x.astype(np.int64), y.astype(np.int64)).astype(np.int32))
        return
    xs = x.astype(np.float64) - ctx.zero_point(LHS)
    ys = y.astype(np.float64) - ctx.zero_point(RHS)
    acc = np.rint(np.matmul(xs, ys)).astype(np.int64)
    real = float(np.float32(ctx.scale(LHS)) * np.float32(ctx.scale(RHS))) / float(np.float32(ctx.out_scale(OUTPUT)))
    qm, shift = quantize_multiplier(real)
    out = requantize(acc, np.int64(qm), np.int64(shift), inplace=True, zero_point=ctx.out_zero_point(OUTPUT))
    lo, hi = qrange(ctx.out_type(OUTPUT))
    ctx.set_output(OUTPUT, np.clip(out, lo, hi))


register(OperationType.BATCH_MATMUL, validate=validate_batch_matmul, execute=execute_batch_matmul)

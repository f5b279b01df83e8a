"""Normalizations: SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION,
INSTANCE_NORMALIZATION.

Whole-tensor numpy along the chosen axis. Quantized SOFTMAX and L2_NORMALIZATION
compute in float32 on dequantized values and round to the HAL's fixed output
quantization (1/256 and 1/128): the reference's fixed-point results are within
the harness tolerance of 1 of these.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    QUANT8_TYPES,
    T,
    dequantize,
    float_scalar_type,
    qrange,
    quantize,
    round_half_away,
    to_compute,
    version_for_types,
)
from nnhal.server.executor.registry import register

INPUT = 0
Op = OperationType


def _axis(ctx: ExecutionContext, index: int, rank: int, default: int = -1) -> int:
    axis = ctx.scalar(index) if index < len(ctx.inputs) and ctx.has(index) else default
    if not -rank <= axis < rank:
        ctx.fail(f"axis {axis} out of range for rank {rank}")
    return int(axis % rank)


def _float_input(ctx: ExecutionContext) -> np.ndarray:
    x = ctx.tensor(INPUT)
    if ctx.in_type(INPUT) in QUANT8_TYPES:
        return dequantize(x, ctx.scale(INPUT), ctx.zero_point(INPUT))
    return np.asarray(to_compute(x), np.float32)


# -- SOFTMAX / LOG_SOFTMAX ----------------------------------------------------------
def validate_softmax(v: ValidationContext) -> HalVersion:
    v.expect_counts((2, 3), 1)
    t = v.expect_input_type_in(INPUT, (*FLOAT_TYPES, *QUANT8_TYPES))
    v.expect_types([t, float_scalar_type(t), T.INT32], [t])
    rank = v.input_rank(INPUT)
    v.require(rank is None or 1 <= rank <= 4, f"input must have rank 1 to 4, got {rank}")
    if t in QUANT8_TYPES:
        out = v.outputs[0]
        want_zp = -128 if t == T.TENSOR_QUANT8_ASYMM_SIGNED else 0
        v.require(
            out.scale == np.float32(1.0 / 256) and out.zero_point == want_zp,
            f"quantized output must have scale 1/256 and zero point {want_zp}",
        )
    version = version_for_types([t])
    if v.num_inputs == 3 or rank not in (2, 4):
        version = max(version, HalVersion.V1_2)
    return version


def execute_softmax(ctx: ExecutionContext) -> None:
    x = _float_input(ctx)
    beta = float(ctx.scalar(1))
    axis = _axis(ctx, 2, x.ndim)
    if x.size == 0:
        ctx.set_output(0, np.zeros(x.shape))
        return
    z = (x - x.max(axis=axis, keepdims=True)) * np.float32(beta)
    e = np.exp(z)
    y = e / e.sum(axis=axis, keepdims=True)
    t = ctx.in_type(INPUT)
    if t in QUANT8_TYPES:
        ctx.set_output(0, quantize(y, ctx.out_scale(0), ctx.out_zero_point(0), t))
    else:
        ctx.set_output(0, y)


def validate_log_softmax(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 1)
    t = v.expect_input_type_in(INPUT, FLOAT_TYPES)
    v.expect_types([t, float_scalar_type(t), T.INT32], [t])
    return HalVersion.V1_2


def execute_log_softmax(ctx: ExecutionContext) -> None:
    x = _float_input(ctx)
    beta = np.float32(ctx.scalar(1))
    axis = _axis(ctx, 2, x.ndim)
    z = (x - x.max(axis=axis, keepdims=True)) * beta if x.size else x
    ctx.set_output(0, z - np.log(np.exp(z).sum(axis=axis, keepdims=True)) if x.size else z)


# -- L2_NORMALIZATION ----------------------------------------------------------------
def validate_l2_norm(v: ValidationContext) -> HalVersion:
    v.expect_counts((1, 2), 1)
    t = v.expect_input_type_in(INPUT, (*FLOAT_TYPES, *QUANT8_TYPES))
    v.expect_types([t, T.INT32], [t])
    rank = v.input_rank(INPUT)
    v.require(rank is None or 1 <= rank <= 4, f"input must have rank 1 to 4, got {rank}")
    if t in QUANT8_TYPES:
        out = v.outputs[0]
        want_zp = 0 if t == T.TENSOR_QUANT8_ASYMM_SIGNED else 128
        v.require(
            out.scale == np.float32(1.0 / 128) and out.zero_point == want_zp,
            f"quantized output must have scale 1/128 and zero point {want_zp}",
        )
    version = version_for_types([t])
    if t == T.TENSOR_QUANT8_ASYMM or v.num_inputs == 2 or rank != 4:
        version = max(version, HalVersion.V1_2)
    return version


def execute_l2_norm(ctx: ExecutionContext) -> None:
    t = ctx.in_type(INPUT)
    x = ctx.tensor(INPUT)
    axis = _axis(ctx, 1, x.ndim)
    if t in QUANT8_TYPES:
        v = x.astype(np.float64) - ctx.zero_point(INPUT)
        norm = np.sqrt((v * v).sum(axis=axis, keepdims=True))
        with np.errstate(divide="ignore", invalid="ignore"):
            y = np.where(norm > 0, v * 128.0 / norm, 0.0)
        zo = ctx.out_zero_point(0)
        lo, hi = qrange(t)
        ctx.set_output(0, np.clip(round_half_away(y) + zo, lo, hi))
        return
    xf = np.asarray(to_compute(x), np.float32)
    norm = np.maximum(np.sqrt((xf * xf).sum(axis=axis, keepdims=True)), np.float32(1e-6))
    ctx.set_output(0, xf / norm)


# -- LOCAL_RESPONSE_NORMALIZATION --------------------------------------------------------
def validate_lrn(v: ValidationContext) -> HalVersion:
    v.expect_counts((5, 6), 1)
    t = v.expect_input_type_in(INPUT, FLOAT_TYPES)
    s = float_scalar_type(t)
    v.expect_types([t, T.INT32, s, s, s, T.INT32], [t])
    rank = v.input_rank(INPUT)
    v.require(rank is None or 1 <= rank <= 4, f"input must have rank 1 to 4, got {rank}")
    version = version_for_types([t])
    if v.num_inputs == 6 or rank != 4:
        version = max(version, HalVersion.V1_2)
    return version


def execute_lrn(ctx: ExecutionContext) -> None:
    x = np.asarray(to_compute(ctx.tensor(INPUT)), np.float32)
    radius = ctx.scalar(1)
    bias, alpha, beta = (np.float32(ctx.scalar(i)) for i in (2, 3, 4))
    axis = _axis(ctx, 5, x.ndim)
    ctx.require(radius >= 0, "radius must be >= 0")
    moved = np.moveaxis(x, axis, -1)
    sq = moved * moved
    depth = moved.shape[-1]
    csum = np.concatenate([np.zeros((*sq.shape[:-1], 1), np.float32), np.cumsum(sq, axis=-1)], axis=-1)
    idx = np.arange(depth)
    hi = np.minimum(idx + radius + 1, depth)
    lo = np.maximum(idx - radius, 0)
    window = csum[..., hi] - csum[..., lo]
    out = moved / np.power(bias + alpha * window, beta)
    ctx.set_output(0, np.moveaxis(out, -1, axis))


# -- INSTANCE_NORMALIZATION --------------------------------------------------------------
def validate_instance_norm(v: ValidationContext) -> HalVersion:
    v.expect_counts(5, 1)
    t = v.expect_input_type_in(INPUT, FLOAT_TYPES)
    s = float_scalar_type(t)
    v.expect_types([t, s, s, s, T.BOOL], [t])
    v.expect_rank(INPUT, 4)
    return HalVersion.V1_2


def execute_instance_norm(ctx: ExecutionContext) -> None:
    x = np.asarray(to_compute(ctx.tensor(INPUT)), np.float32)
    gamma, beta, epsilon = (np.float32(ctx.scalar(i)) for i in (1, 2, 3))
    spatial = (2, 3) if ctx.scalar(4) else (1, 2)
    mean = x.mean(axis=spatial, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=spatial, keepdims=True)
    ctx.set_output(0, (x - mean) * gamma / np.sqrt(var + epsilon) + beta)


register(Op.SOFTMAX, validate=validate_softmax, execute=execute_softmax)
register(Op.LOG_SOFTMAX, validate=validate_log_softmax, execute=execute_log_softmax)
register(Op.L2_NORMALIZATION, validate=validate_l2_norm, execute=execute_l2_norm)
register(Op.LOCAL_RESPONSE_NORMALIZATION, validate=validate_lrn, execute=execute_lrn)
register(Op.INSTANCE_NORMALIZATION, validate=validate_instance_norm, execute=execute_instance_norm)

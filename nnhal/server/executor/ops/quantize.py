"""Type conversions: QUANTIZE, DEQUANTIZE, CAST.

QUANTIZE: float16/32 -> QUANT8_ASYMM(_SIGNED), round half away from zero in
float32, add the zero point, saturate. DEQUANTIZE: (q - zeroPoint) * scale in
float32 (per-channel scales for TENSOR_QUANT8_SYMM_PER_CHANNEL). CAST ignores
quantization parameters: numeric casts among FLOAT16/FLOAT32/INT32/QUANT8_ASYMM
(float -> int truncates, -> uint8 saturates first), and identity casts of the
other tensor types since 1.3.
"""

from __future__ import annotations

import math

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.core.operand_types import DTYPE
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._fixed_point import INT32_MAX, INT32_MIN
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    QUANT8_TYPES,
    T,
    qrange,
    round_half_away,
    version_for_types,
)
from nnhal.server.executor.registry import register

Op = OperationType
INPUT = 0
OUTPUT = 0


# -- QUANTIZE ------------------------------------------------------------------------
def validate_quantize(v: ValidationContext) -> HalVersion:
    v.expect_counts(1, 1)
    t_in = v.expect_input_type_in(INPUT, FLOAT_TYPES)
    t_out = v.output_type(OUTPUT)
    v.require(t_out in QUANT8_TYPES, f"output must be a quant8 asymmetric tensor, got {t_out.name}")
    return version_for_types([t_in, t_out], HalVersion.V1_2)


def execute_quantize(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT).astype(np.float32)
    t = ctx.out_type(OUTPUT)
    lo, hi = qrange(t)
    with np.errstate(all="ignore"):
        q = round_half_away(x / np.float32(ctx.out_scale(OUTPUT))) + np.float32(ctx.out_zero_point(OUTPUT))
    # NaN ends at the upper bound, as std::min(255.f, NaN) gives 255.
    q = np.where(np.isnan(q), hi, np.clip(q, lo, hi))
    ctx.set_output(OUTPUT, q)


# -- DEQUANTIZE ----------------------------------------------------------------------
_DEQUANT_INPUTS = (*QUANT8_TYPES, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL)


def validate_dequantize(v: ValidationContext) -> HalVersion:
    v.expect_counts(1, 1)
    t_in = v.expect_input_type_in(INPUT, _DEQUANT_INPUTS)
    t_out = v.output_type(OUTPUT)
    v.require(t_out in FLOAT_TYPES, f"output must be a float tensor, got {t_out.name}")
    v.expect_rank(INPUT, 4, at_most=True)
    if t_in == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        cq = v.inputs[INPUT].channel_quant
        v.require(cq is not None and len(cq.scales) > 0, "per-channel input needs channel quantization")
        dims = v.input_dims(INPUT)
        if cq is not None and dims:
            v.require(0 <= cq.channel_dim < len(dims), f"channel dimension {cq.channel_dim} out of range")
    if t_in == T.TENSOR_QUANT8_ASYMM and t_out == T.TENSOR_FLOAT32:
        return HalVersion.V1_0
    return version_for_types([t_in, t_out], HalVersion.V1_2)


def execute_dequantize(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    operand = ctx.in_operands[INPUT]
    centered = (x.astype(np.int32) - np.int32(operand.zero_point)).astype(np.float32)
    cq = operand.channel_quant
    if operand.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and cq is not None:
        scales = np.asarray(cq.scales, dtype=np.float32)
        if x.ndim <= cq.channel_dim or x.shape[cq.channel_dim] != scales.size:
            ctx.fail(f"{scales.size} channel scales for dimension {cq.channel_dim} of {list(x.shape)}")
        shape = [1] * x.ndim
        shape[cq.channel_dim] = scales.size
        real = scales.reshape(shape) * centered
    else:
        real = np.float32(operand.scale) * centered
    with np.errstate(over="ignore"):  # narrowing to float16 may overflow
        ctx.set_output(OUTPUT, real)


# -- CAST ------------------------------------------------------------------------
_NUMERIC = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)
_IDENTITY_ONLY = (
    T.TENSOR_BOOL8,
    T.TENSOR_QUANT16_ASYMM,
    T.TENSOR_QUANT16_SYMM,
    T.TENSOR_QUANT8_ASYMM_SIGNED,
    T.TENSOR_QUANT8_SYMM,
)


def validate_cast(v: ValidationContext) -> HalVersion:
    v.expect_counts(1, 1)
    t_in = v.expect_input_type_in(INPUT, (*_NUMERIC, *_IDENTITY_ONLY))
    t_out = v.output_type(OUTPUT)
    if t_in in _NUMERIC:
        v.require(t_out in _NUMERIC, f"cannot cast {t_in.name} to {t_out.name}")
        version = HalVersion.V1_2
    else:
        v.require(t_out == t_in, f"{t_in.name} can only be cast to itself, not {t_out.name}")
        version = HalVersion.V1_3
    in_dims, out_dims = v.input_dims(INPUT), v.outputs[OUTPUT].dimensions
    if in_dims and out_dims and math.prod(out_dims) != 0:
        v.require(in_dims == out_dims, f"output dimensions {list(out_dims)} differ from input {list(in_dims)}")
    return version


def _float_to_int(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Truncate toward zero, saturating (and NaN -> 0), without undefined casts."""
    with np.errstate(invalid="ignore"):
        y = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0))
    return np.clip(y, lo, hi).astype(np.int64)


def execute_cast(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    t_in, t_out = ctx.in_type(INPUT), ctx.out_type(OUTPUT)
    if t_in == t_out or t_out in FLOAT_TYPES:
        with np.errstate(over="ignore"):
            ctx.set_output(OUTPUT, x.astype(DTYPE[t_out]))
        return
    lo, hi = (0, 255) if t_out == T.TENSOR_QUANT8_ASYMM else (INT32_MIN, INT32_MAX)
    if t_in in FLOAT_TYPES:
        ctx.set_output(OUTPUT, _float_to_int(x, lo, hi))
    else:
        ctx.set_output(OUTPUT, np.clip(x.astype(np.int64), lo, hi))


register(Op.QUANTIZE, validate=validate_quantize, execute=execute_quantize)
register(Op.DEQUANTIZE, validate=validate_dequantize, execute=execute_dequantize)
register(Op.CAST, validate=validate_cast, execute=execute_cast)

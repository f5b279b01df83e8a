"""Activation operations: RELU, RELU1, RELU6, LOGISTIC, TANH, ELU, HARD_SWISH.

types.hal: RELU/RELU1/RELU6 take one tensor (any rank <= 4 before 1.3) and keep
the input's scale and zero point for quantized types.

LOGISTIC and TANH have fixed quantized output parameters (1/256 and 1/128 with
the zero points types.hal names). Quantized LOGISTIC, TANH and HARD_SWISH map
each of the 256 possible input codes once (a lookup table per operand
quantization), so the per-element work is one gather.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from nnhal.core.enums import FusedActivationFunc, HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.errors import OP_FAILED, fail
from nnhal.server.executor.ops._activations import CLIP, FUSED_BOUNDS, activation_range_quant, scalar32, sigmoid
from nnhal.server.executor.ops._fixed_point import (
    INT32_MAX,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
    saturating_rounding_multiply_by_pot,
    trunc_div_pot,
)
from nnhal.server.executor.ops._validation import same_quant
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    QUANT8_TYPES,
    T,
    float_scalar_type,
    qrange,
    round_half_away,
    static_shapes,
    to_compute,
    version_for_types,
)
from nnhal.server.executor.registry import Call, FastKernel, StaticKernel, register

INPUT = 0
OUTPUT = 0

_RELU_FUNC = {
    OperationType.RELU: FusedActivationFunc.RELU,
    OperationType.RELU1: FusedActivationFunc.RELU1,
    OperationType.RELU6: FusedActivationFunc.RELU6,
}


def validate_relu(v: ValidationContext) -> HalVersion:
    v.expect_counts(1, 1)
    t = v.expect_input_type_in(INPUT, (*FLOAT_TYPES, *QUANT8_TYPES))
    v.expect_types([t], [t])
    rank = v.input_rank(INPUT)
    version = version_for_types([t])
    if rank is None or rank > 4:
        version = max(version, HalVersion.V1_2 if rank is None else HalVersion.V1_3)
    if t in QUANT8_TYPES:
        v.require(
            same_quant(v.outputs[OUTPUT], v.inputs[INPUT]),
            "quantized output must have the input's scale and zero point",
        )
    return version


def execute_relu(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    func = _RELU_FUNC[ctx.op_type]
    t = ctx.in_type(INPUT)
    if t in QUANT8_TYPES:
        lo, hi = activation_range_quant(func, ctx.scale(INPUT), ctx.zero_point(INPUT), t)
        ctx.set_output(OUTPUT, np.clip(x, lo, hi))
    else:
        lo_f, hi_f = FUSED_BOUNDS[func]
        ctx.set_output(OUTPUT, np.clip(x, lo_f, hi_f))


def _bindable_shape(v: ValidationContext) -> tuple[int, ...] | None:
    """The shape of an element-wise float32 operation a bound kernel may run: its input's,
    static and the output's too; None otherwise."""
    shape = v.input_dims(INPUT)
    if v.input_type(INPUT) != T.TENSOR_FLOAT32 or not static_shapes(shape) or v.outputs[OUTPUT].dimensions != shape:
        return None
    return shape


def bind_relu(v: ValidationContext, state: object) -> FastKernel | None:
    """Float32 with a static shape: one clamp into the output buffer, nothing re-checked."""
    shape = _bindable_shape(v)
    if shape is None:
        return None
    lo, hi = (scalar32(b) for b in FUSED_BOUNDS[_RELU_FUNC[v.op_type]])

    def run(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        x = inputs[INPUT]
        if x is None or x.shape != shape:
            return None
        out: np.ndarray = CLIP(x, lo, hi, out=buffers[OUTPUT])
        return [out]

    return run


def emit_relu(v: ValidationContext, state: object) -> StaticKernel | None:
    """``bind_relu``'s kernel as one fixed call."""
    shape = _bindable_shape(v)
    if shape is None:
        return None
    lo, hi = (scalar32(b) for b in FUSED_BOUNDS[_RELU_FUNC[v.op_type]])

    def emit(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray]) -> tuple[Call, ...] | None:
        x = inputs[INPUT]
        if x is None or x.shape != shape:
            return None
        return (partial(CLIP, x, lo, hi, buffers[OUTPUT]),)

    return emit


for _op in _RELU_FUNC:
    register(_op, validate=validate_relu, execute=execute_relu, bind=bind_relu, emit=emit_relu)


# -- LOGISTIC / TANH ---------------------------------------------------------------
#: Fixed output (scale, zero point) per quantized type; the scale is a float32 value.
_FIXED_OUTPUT: dict[OperationType, dict[T, tuple[float, int]]] = {
    OperationType.LOGISTIC: {T.TENSOR_QUANT8_ASYMM: (1.0 / 256, 0), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 256, -128)},
    OperationType.TANH: {T.TENSOR_QUANT8_ASYMM: (1.0 / 128, 128), T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0 / 128, 0)},
}
#: Integer bits of the fixed-point input both kernels evaluate on (Q4.27).
_INPUT_INTEGER_BITS = 4


def validate_sigmoid_like(v: ValidationContext) -> HalVersion:
    v.expect_counts(1, 1)
    t = v.expect_input_type_in(INPUT, (*FLOAT_TYPES, *QUANT8_TYPES))
    v.expect_types([t], [t])
    v.expect_rank(INPUT, 4, at_most=True)
    version = version_for_types([t])
    if v.op_type == OperationType.TANH and t == T.TENSOR_QUANT8_ASYMM:
        version = max(version, HalVersion.V1_2)
    if t in QUANT8_TYPES:
        scale, zero_point = _FIXED_OUTPUT[v.op_type][t]
        out = v.outputs[OUTPUT]
        v.require(
            np.float32(out.scale) == np.float32(scale) and out.zero_point == zero_point,
            f"quantized output must have scale {scale} and zero point {zero_point}",
        )
    return version


def _codes(t: T) -> np.ndarray:
    lo, hi = qrange(t)
    return np.arange(lo, hi + 1, dtype=np.int64)


def _lookup(x: np.ndarray, table: np.ndarray, t: T) -> np.ndarray:
    return table[x.astype(np.int64) - qrange(t)[0]]


def _sigmoid_like_table(op: OperationType, scale: float, zero_point: int, t: T) -> np.ndarray:
    """Output code for every input code, computed on the reference's Q4.27 input.

    Inputs beyond the representable radius saturate; the rest are evaluated in
    double and rounded to the fixed output scale (the reference evaluates the
    same function in Q0.31 fixed point, so results agree to the last code).
    """
    real_multiplier = float(np.float32(scale)) * float(1 << (31 - _INPUT_INTEGER_BITS))
    if not real_multiplier > 1.0:
        fail(f"{op.name}: input scale {scale} is too small", OP_FAILED)
    multiplier, left_shift = quantize_multiplier(real_multiplier)
    radius = math.floor(((1 << _INPUT_INTEGER_BITS) - 1) * (1 << (31 - _INPUT_INTEGER_BITS)) / (1 << left_shift))
    centered = _codes(t) - zero_point
    fixed_q4 = multiply_by_quantized_multiplier(centered, multiplier, left_shift)
    real = fixed_q4.astype(np.float64) / float(1 << (31 - _INPUT_INTEGER_BITS))
    lo, hi = qrange(t)
    _, out_zp = _FIXED_OUTPUT[op][t]
    if op == OperationType.LOGISTIC:
        levels = np.minimum(np.floor(256.0 / (1.0 + np.exp(-real)) + 0.5), 255)
    else:
        levels = round_half_away(np.tanh(real) * 128.0)
    table = np.clip(levels + out_zp, lo, hi)
    table = np.where(centered <= -radius, lo, np.where(centered >= radius, hi, table))
    return table.astype(np.int64)


_FLOAT_FUNC: dict[OperationType, Callable[[np.ndarray], np.ndarray]] = {
    OperationType.LOGISTIC: sigmoid,
    OperationType.TANH: np.tanh,
}


def execute_sigmoid_like(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    t = ctx.in_type(INPUT)
    if t in QUANT8_TYPES:
        table = _sigmoid_like_table(ctx.op_type, ctx.scale(INPUT), ctx.zero_point(INPUT), t)
        ctx.set_output(OUTPUT, _lookup(x, table, t))
    else:
        with np.errstate(all="ignore"):
            ctx.set_output(OUTPUT, _FLOAT_FUNC[ctx.op_type](to_compute(x)))


def bind_sigmoid_like(v: ValidationContext, state: object) -> FastKernel | None:
    """Float32 with a static shape: the general kernel's ufuncs, in place in the output buffer
    (LOGISTIC: negate, exp, add 1, reciprocal: 1 divided by it); nothing re-checked."""
    shape = _bindable_shape(v)
    if shape is None:
        return None
    if v.op_type == OperationType.TANH:

        def tanh(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
            x = inputs[INPUT]
            if x is None or x.shape != shape:
                return None
            out: np.ndarray = np.tanh(x, out=buffers[OUTPUT])
            return [out]

        return tanh

    one = scalar32(1)

    def logistic(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        x = inputs[INPUT]
        if x is None or x.shape != shape:
            return None
        out: np.ndarray = np.negative(x, buffers[OUTPUT])
        np.exp(out, out)
        np.add(one, out, out)
        np.reciprocal(out, out)  # 1 / out: the same division, without broadcasting the 1
        return [out]

    return logistic


def emit_sigmoid_like(v: ValidationContext, state: object) -> StaticKernel | None:
    """``bind_sigmoid_like``'s kernel as fixed calls (the same ufuncs in the same order)."""
    shape = _bindable_shape(v)
    if shape is None:
        return None
    tanh = v.op_type == OperationType.TANH
    one = scalar32(1)

    def emit(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray]) -> tuple[Call, ...] | None:
        x, out = inputs[INPUT], buffers[OUTPUT]
        if x is None or x.shape != shape:
            return None
        if tanh:
            return (partial(np.tanh, x, out),)
        return (
            partial(np.negative, x, out),
            partial(np.exp, out, out),
            partial(np.add, one, out, out),
            partial(np.reciprocal, out, out),
        )

    return emit


# -- ELU -----------------------------------------------------------------------
ALPHA = 1


def validate_elu(v: ValidationContext) -> HalVersion:
    v.expect_counts(2, 1)
    t = v.expect_input_type_in(INPUT, FLOAT_TYPES)
    v.expect_types([t, float_scalar_type(t)], [t])
    return HalVersion.V1_3


def execute_elu(ctx: ExecutionContext) -> None:
    x = to_compute(ctx.tensor(INPUT))
    alpha = np.float32(ctx.scalar(ALPHA))
    with np.errstate(over="ignore", invalid="ignore"):
        negative = np.minimum(np.float32(0), alpha * (np.exp(x) - np.float32(1)))
        ctx.set_output(OUTPUT, np.maximum(np.float32(0), x) + negative)


# -- HARD_SWISH ------------------------------------------------------------------
_INT16_MIN, _INT16_MAX = -(1 << 15), (1 << 15) - 1


def validate_hard_swish(v: ValidationContext) -> HalVersion:
    v.expect_counts(1, 1)
    t = v.expect_input_type_in(INPUT, (*FLOAT_TYPES, *QUANT8_TYPES))
    v.expect_types([t], [t])
    return HalVersion.V1_3


def _to_int16_multiplier(m32: int) -> int:
    """Round a Q0.31 multiplier to Q0.15 (saturating near 1.0)."""
    if m32 >= INT32_MAX - (1 << 15):
        return _INT16_MAX
    return (m32 + (1 << 15)) >> 16


def _truncating_high_mul16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    res = trunc_div_pot(a * b, 15)
    return np.where((a == _INT16_MIN) & (b == _INT16_MIN), _INT16_MAX, res)


def _hard_swish_table(in_scale: float, in_zp: int, out_scale: float, out_zp: int, t: T) -> np.ndarray:
    """Output code for every input code, in the reference's 16-bit fixed point.

    The input is moved to a 2^7 finer scale; a "relu-ish" factor in [0, 1]
    (x rescaled so that 3.0 maps to 2^15, then moved from [-1, 1] to [0, 1]) multiplies
    the input already rescaled to the output scale. The multipliers are derived in
    float32 as the reference derives them.
    """
    hires_scale = np.float32(1.0 / 128.0) * np.float32(in_scale)
    out_m32, out_exp = quantize_multiplier(float(hires_scale / np.float32(out_scale)))
    if out_exp > 0:
        fail("HARD_SWISH: output scale is too small relative to the input scale", OP_FAILED)
    relu_m32, relu_exp = quantize_multiplier(float(hires_scale / np.float32(3.0 / 32768.0)))
    out_m16, relu_m16 = _to_int16_multiplier(out_m32), _to_int16_multiplier(relu_m32)

    hires = (_codes(t) - in_zp) * (1 << 7)
    preshift_out = saturating_rounding_doubling_high_mul(hires, out_m16, 16)
    reluish = hires
    if relu_exp > 0:
        reluish = saturating_rounding_multiply_by_pot(reluish, relu_exp - 1, 16)
    reluish = saturating_rounding_doubling_high_mul(reluish, relu_m16, 16)
    if relu_exp > 0:
        reluish = saturating_rounding_multiply_by_pot(reluish, 1, 16)
    elif relu_exp < 0:
        reluish = rounding_divide_by_pot(reluish, -relu_exp)
    reluish = (reluish + (1 << 15)) >> 1
    out = rounding_divide_by_pot(_truncating_high_mul16(reluish, preshift_out), -out_exp) + out_zp
    lo, hi = qrange(t)
    return np.asarray(np.clip(out, lo, hi), dtype=np.int64)


def execute_hard_swish(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    t = ctx.in_type(INPUT)
    if t in QUANT8_TYPES:
        table = _hard_swish_table(
            ctx.scale(INPUT), ctx.zero_point(INPUT), ctx.out_scale(OUTPUT), ctx.out_zero_point(OUTPUT), t
        )
        ctx.set_output(OUTPUT, _lookup(x, table, t))
        return
    xf = to_compute(x)
    six = np.float32(6)
    with np.errstate(all="ignore"):
        ctx.set_output(OUTPUT, xf * np.minimum(six, np.maximum(np.float32(0), xf + np.float32(3))) / six)


for _op in (OperationType.LOGISTIC, OperationType.TANH):
    register(
        _op,
        validate=validate_sigmoid_like,
        execute=execute_sigmoid_like,
        bind=bind_sigmoid_like,
        emit=emit_sigmoid_like,
    )
register(OperationType.ELU, validate=validate_elu, execute=execute_elu)
register(OperationType.HARD_SWISH, validate=validate_hard_swish, execute=execute_hard_swish)

"""Element-wise binary operations: ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, POW, PRELU.

All of them broadcast their two tensor inputs numpy-style (trailing dimensions
aligned, a dimension of 1 stretches, 0 pairs only with 0 or 1).

Quantized ADD/SUB rescale both inputs onto a common fixed-point scale (inputs
shifted left by 20 bits, then multiplied by multipliers smaller than one) before
requantizing the sum; MUL requantizes the integer product with one multiplier.
MAXIMUM/MINIMUM/SELECT-style ops requantize each input to the output's scale in
double precision (the reference's ``requantize``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from nnhal.core.enums import FusedActivationFunc, HalVersion, OperationType
from nnhal.core.errors import HalError
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.errors import INVALID
from nnhal.server.executor.ops._activations import (
    FUSED_BOUNDS,
    activation_range_quant,
    apply_activation,
    check_activation,
    clamp_calls,
    clamp_in_place,
)
from nnhal.server.executor.ops._fixed_point import (
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    quantize_multiplier_below_one,
)
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    QUANT8_TYPES,
    T,
    broadcast_shape,
    qrange,
    requantize_to,
    static_shapes,
    to_compute,
    version_for_types,
)
from nnhal.server.executor.registry import Call, FastKernel, StaticKernel, register

Op = OperationType

INPUT0 = 0
INPUT1 = 1
ACTIVATION = 2
OUTPUT = 0

#: ADD/SUB bring both inputs onto a shared scale with this much headroom.
_ADD_LEFT_SHIFT = 20


def _f32(v: float) -> np.float32:
    return np.float32(v)


def _activation_of(v: ValidationContext, index: int, tensor_type: T) -> None:
    act = v.constant_scalar(index)
    if act is None:
        return
    v.require(check_activation(act), f"unsupported fused activation {act}")
    if tensor_type == T.TENSOR_INT32:
        v.require(act == FusedActivationFunc.NONE, "TENSOR_INT32 requires fused activation NONE")


def _runtime_activation(ctx: ExecutionContext, index: int) -> int:
    act = int(ctx.scalar(index))
    # Unlike this family's other runtime checks (GENERAL_FAILURE), a bad activation code is invalid.
    if not check_activation(act):
        ctx.fail(f"unsupported fused activation {act}", INVALID)
    return act


# -- ADD / SUB / MUL / DIV -----------------------------------------------------------
_ARITH_TYPES: dict[OperationType, tuple[T, ...]] = {
    Op.ADD: (*FLOAT_TYPES, *QUANT8_TYPES, T.TENSOR_INT32),
    Op.SUB: (*FLOAT_TYPES, *QUANT8_TYPES, T.TENSOR_INT32),
    Op.MUL: (*FLOAT_TYPES, *QUANT8_TYPES, T.TENSOR_INT32),
    Op.DIV: (*FLOAT_TYPES, T.TENSOR_INT32),
}


def validate_arith(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 1)
    t = v.expect_input_type_in(INPUT0, _ARITH_TYPES[v.op_type])
    v.expect_types([t, t, T.INT32], [t])
    for i in (INPUT0, INPUT1):
        v.expect_rank(i, 4, at_most=True)
    _activation_of(v, ACTIVATION, t)
    version = version_for_types([t])
    if t == T.TENSOR_INT32:
        version = HalVersion.V1_3
    elif t == T.TENSOR_QUANT8_ASYMM and v.op_type == Op.SUB:
        version = max(version, HalVersion.V1_2)
    if t in QUANT8_TYPES and v.op_type == Op.MUL:
        a, b, out = v.inputs[INPUT0], v.inputs[INPUT1], v.outputs[OUTPUT]
        v.require(
            bool(_f32(out.scale) > _f32(a.scale) * _f32(b.scale)),
            "output scale must exceed the product of the input scales",
        )
    return version


def _int32_arith(op: OperationType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # int32 arithmetic wraps around as the reference's does in practice.
    a32, b32 = a.astype(np.int32), b.astype(np.int32)
    with np.errstate(over="ignore", divide="ignore"):
        if op == Op.ADD:
            return a32 + b32
        if op == Op.SUB:
            return a32 - b32
        if op == Op.MUL:
            return a32 * b32
        # Floor division; division by zero yields 0 instead of failing.
        safe = np.where(b32 == 0, np.int32(1), b32)
        return np.where(b32 == 0, np.int32(0), np.floor_divide(a32, safe))


_FLOAT_ARITH = {Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: np.divide}


def _float_arith(op: OperationType, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The result in a fresh array (the caller ignores floating-point errors: inf and NaN are results)."""
    return np.asarray(_FLOAT_ARITH[op](to_compute(a), to_compute(b)))


def _quant_add_sub(ctx: ExecutionContext, a: np.ndarray, b: np.ndarray, subtract: bool) -> np.ndarray:
    s1, s2, so = _f32(ctx.scale(INPUT0)), _f32(ctx.scale(INPUT1)), _f32(ctx.out_scale(OUTPUT))
    twice_max = float(2 * max(s1, s2))
    name = ctx.op_type.name
    m1, sh1 = quantize_multiplier_below_one(float(s1) / twice_max, name)
    m2, sh2 = quantize_multiplier_below_one(float(s2) / twice_max, name)
    mo, sho = quantize_multiplier_below_one(twice_max / float(np.float32((1 << _ADD_LEFT_SHIFT) * so)), name)
    if subtract:
        m2 = -m2
    x1 = (a.astype(np.int64) - ctx.zero_point(INPUT0)) << _ADD_LEFT_SHIFT
    x2 = (b.astype(np.int64) - ctx.zero_point(INPUT1)) << _ADD_LEFT_SHIFT
    total = multiply_by_quantized_multiplier(x1, m1, sh1) + multiply_by_quantized_multiplier(x2, m2, sh2)
    return multiply_by_quantized_multiplier(total, mo, sho) + ctx.out_zero_point(OUTPUT)


def _quant_mul(ctx: ExecutionContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    product_scale = _f32(ctx.scale(INPUT0)) * _f32(ctx.scale(INPUT1))
    real = float(product_scale) / float(_f32(ctx.out_scale(OUTPUT)))
    m, sh = quantize_multiplier_below_one(real, ctx.op_type.name)
    prod = (a.astype(np.int64) - ctx.zero_point(INPUT0)) * (b.astype(np.int64) - ctx.zero_point(INPUT1))
    return multiply_by_quantized_multiplier(prod, m, sh) + ctx.out_zero_point(OUTPUT)


def execute_arith(ctx: ExecutionContext) -> None:
    a, b = ctx.tensor(INPUT0), ctx.tensor(INPUT1)
    shape = a.shape if a.shape == b.shape else broadcast_shape(ctx.op_type, a.shape, b.shape)
    act = _runtime_activation(ctx, ACTIVATION)
    t = ctx.in_type(INPUT0)
    op = ctx.op_type
    if math.prod(shape) == 0:
        ctx.set_output(OUTPUT, np.zeros(shape, dtype=a.dtype))
        return
    if t == T.TENSOR_INT32:
        ctx.require(act == FusedActivationFunc.NONE, "TENSOR_INT32 requires fused activation NONE", INVALID)
        ctx.set_output(OUTPUT, _int32_arith(op, a, b))
    elif t in QUANT8_TYPES:
        acc = _quant_mul(ctx, a, b) if op == Op.MUL else _quant_add_sub(ctx, a, b, op == Op.SUB)
        lo, hi = activation_range_quant(act, ctx.out_scale(OUTPUT), ctx.out_zero_point(OUTPUT), t)
        ctx.set_output(OUTPUT, np.clip(acc, lo, hi))
    else:
        with np.errstate(all="ignore"):  # inf and NaN are results; float16 outputs may overflow to inf
            ctx.set_output(OUTPUT, apply_activation(_float_arith(op, a, b), act))


#: A bound kernel keeps a constant operand broadcast to the output's shape when that copy is at
#: most this large: a ufunc that broadcasts costs several times one that does not on small tensors.
WIDEN_BYTES = 16 << 10


def _widened(value: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray | None:
    """Constant ``value`` broadcast to ``shape`` as an array of its own, when it is not of that
    shape already and the copy is at most WIDEN_BYTES; else None. Each element of the result is
    computed from the same pair of values either way."""
    if value is None or value.shape == shape or math.prod(shape) * value.itemsize > WIDEN_BYTES:
        return None
    return np.ascontiguousarray(np.broadcast_to(value, shape))


@dataclass(frozen=True, slots=True)
class _Bound:
    """What a float32 ADD / SUB / MUL / DIV with static shapes is bound to: its ufunc, its
    activation, the shapes its operands come in (a widened constant replaces its operand)."""

    ufunc: np.ufunc
    act: int
    sa: tuple[int, ...]
    sb: tuple[int, ...]
    wide_a: np.ndarray | None
    wide_b: np.ndarray | None


def _bound(v: ValidationContext) -> _Bound | None:
    if v.input_type(INPUT0) != T.TENSOR_FLOAT32 or v.op_type not in _FLOAT_ARITH:
        return None
    act = v.constant_scalar(ACTIVATION)
    sa, sb, so = v.input_dims(INPUT0), v.input_dims(INPUT1), v.outputs[OUTPUT].dimensions
    if act not in FUSED_BOUNDS or not static_shapes(sa, sb, so):
        return None
    try:
        if broadcast_shape(v.op_type, sa, sb) != so:
            return None
    except HalError:
        return None  # the general kernel reports it, at execution as before
    wide_a, wide_b = _widened(v.constant(INPUT0), so), _widened(v.constant(INPUT1), so)
    return _Bound(
        _FLOAT_ARITH[v.op_type],
        act,
        sa if wide_a is None else so,
        sb if wide_b is None else so,
        wide_a,
        wide_b,
    )


def bind_arith(v: ValidationContext, state: object) -> FastKernel | None:
    """Float32 ADD / SUB / MUL / DIV with a constant activation and static, non-empty shapes:
    the ufunc and the activation's clamp in place, nothing re-checked."""
    bound = _bound(v)
    if bound is None:
        return None
    ufunc, sa, sb, wide_a, wide_b = bound.ufunc, bound.sa, bound.sb, bound.wide_a, bound.wide_b
    clamp = clamp_in_place(bound.act)

    def run(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        a = inputs[INPUT0] if wide_a is None else wide_a
        b = inputs[INPUT1] if wide_b is None else wide_b
        if a is None or b is None or a.shape != sa or b.shape != sb:
            return None
        out: np.ndarray = ufunc(a, b, buffers[OUTPUT])  # out, given positionally: a little cheaper
        if clamp is not None:
            clamp(out)
        return [out]

    return run


def emit_arith(v: ValidationContext, state: object) -> StaticKernel | None:
    """``bind_arith``'s kernel as fixed calls: the ufunc, then the clamp."""
    bound = _bound(v)
    if bound is None:
        return None

    def emit(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray]) -> tuple[Call, ...] | None:
        a = inputs[INPUT0] if bound.wide_a is None else bound.wide_a
        b = inputs[INPUT1] if bound.wide_b is None else bound.wide_b
        if a is None or b is None or a.shape != bound.sa or b.shape != bound.sb:
            return None
        out = buffers[OUTPUT]
        return (partial(bound.ufunc, a, b, out), *clamp_calls(bound.act, out))

    return emit


# -- MAXIMUM / MINIMUM -----------------------------------------------------------------
_MINMAX_TYPES = (*FLOAT_TYPES, T.TENSOR_INT32, *QUANT8_TYPES)


def _validate_same_type_pair(v: ValidationContext, allowed: tuple[T, ...]) -> HalVersion:
    """Two inputs and the output of one type among ``allowed`` (the 1.2 binary operations)."""
    v.expect_counts(2, 1)
    t = v.expect_input_type_in(INPUT0, allowed)
    v.expect_types([t, t], [t])
    return version_for_types([t], HalVersion.V1_2)


def validate_min_max(v: ValidationContext) -> HalVersion:
    return _validate_same_type_pair(v, _MINMAX_TYPES)


def execute_min_max(ctx: ExecutionContext) -> None:
    a, b = ctx.tensor(INPUT0), ctx.tensor(INPUT1)
    broadcast_shape(ctx.op_type, a.shape, b.shape)
    t = ctx.in_type(INPUT0)
    if t in QUANT8_TYPES:
        so, zo = ctx.out_scale(OUTPUT), ctx.out_zero_point(OUTPUT)
        a = requantize_to(a, ctx.scale(INPUT0), ctx.zero_point(INPUT0), so, zo, t)
        b = requantize_to(b, ctx.scale(INPUT1), ctx.zero_point(INPUT1), so, zo, t)
    # Written as std::max / std::min are: the first operand wins ties and NaN comparisons.
    if ctx.op_type == Op.MAXIMUM:
        out = np.where(a < b, b, a)
    else:
        out = np.where(b < a, b, a)
    ctx.set_output(OUTPUT, out)


# -- POW -----------------------------------------------------------------------
def validate_pow(v: ValidationContext) -> HalVersion:
    return _validate_same_type_pair(v, FLOAT_TYPES)


def execute_pow(ctx: ExecutionContext) -> None:
    base, exponent = to_compute(ctx.tensor(INPUT0)), to_compute(ctx.tensor(INPUT1))
    broadcast_shape(ctx.op_type, base.shape, exponent.shape)
    with np.errstate(all="ignore"):
        ctx.set_output(OUTPUT, np.power(base, exponent))


# -- PRELU -----------------------------------------------------------------------
def validate_prelu(v: ValidationContext) -> HalVersion:
    return _validate_same_type_pair(v, (*FLOAT_TYPES, *QUANT8_TYPES))


def execute_prelu(ctx: ExecutionContext) -> None:
    x, alpha = ctx.tensor(INPUT0), ctx.tensor(INPUT1)
    broadcast_shape(ctx.op_type, x.shape, alpha.shape)
    t = ctx.in_type(INPUT0)
    if t not in QUANT8_TYPES:
        xf, af = to_compute(x), to_compute(alpha)
        with np.errstate(all="ignore"):
            if np.isfinite(af).all():
                # min(x, 0) * alpha + max(x, 0): the same values for a finite alpha, and three
                # times faster than np.where on a broadcast alpha (real models' per-channel PRELU).
                out = np.minimum(xf, 0) * af
                out += np.maximum(xf, 0)
                ctx.set_output(OUTPUT, out)
            else:  # 0 * inf would be NaN where x >= 0 must give x
                ctx.set_output(OUTPUT, np.where(xf >= 0, xf, xf * af))
        return
    sx, sa, so = _f32(ctx.scale(INPUT0)), _f32(ctx.scale(INPUT1)), _f32(ctx.out_scale(OUTPUT))
    # The positive-side ratio is a float division; the negative side divides in double.
    m_pos, sh_pos = quantize_multiplier(float(sx / so))
    m_neg, sh_neg = quantize_multiplier(float(sx * sa) / float(so))
    xi = x.astype(np.int64) - ctx.zero_point(INPUT0)
    ai = alpha.astype(np.int64) - ctx.zero_point(INPUT1)
    pos = multiply_by_quantized_multiplier(xi, m_pos, sh_pos)
    neg = multiply_by_quantized_multiplier(xi * ai, m_neg, sh_neg)
    out = np.where(xi >= 0, pos, neg) + ctx.out_zero_point(OUTPUT)
    lo, hi = qrange(t)
    ctx.set_output(OUTPUT, np.clip(out, lo, hi))


for _op in _ARITH_TYPES:
    register(_op, validate=validate_arith, execute=execute_arith, bind=bind_arith, emit=emit_arith)
register(Op.MAXIMUM, validate=validate_min_max, execute=execute_min_max)
register(Op.MINIMUM, validate=validate_min_max, execute=execute_min_max)
register(Op.POW, validate=validate_pow, execute=execute_pow)
register(Op.PRELU, validate=validate_prelu, execute=execute_prelu)

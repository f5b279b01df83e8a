"""gemmlowp fixed-point functions, vectorised: exp on negative values, logistic,
tanh, and the inverse square root multiplier of TFLite ``QuantUtils``.

Raw values are int64 arrays holding 16- or 32-bit fixed-point numbers with a
given count of integer bits (``ib``); results wrap or saturate as the C++ raw
types do, so the quantized recurrent kernels match the reference bit for bit.
"""

from __future__ import annotations

import numpy as np

from nnhal.server.executor.ops._fixed_point import (
    INT32_MAX,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul as mul,
    saturating_rounding_multiply_by_pot,
    trunc_div_pot,
    wrap,
)


def rescale(x: np.ndarray, src_ib: int, dst_ib: int, bits: int) -> np.ndarray:
    """gemmlowp Rescale: the same real value with ``dst_ib`` integer bits instead of ``src_ib``."""
    return saturating_rounding_multiply_by_pot(x, src_ib - dst_ib, bits)


def constant(int32_value: int, bits: int) -> int:
    """A gemmlowp constant given as a 32-bit raw value, rescaled to the raw type."""
    if bits == 32:
        return int32_value
    return int(rounding_divide_by_pot(np.array(int32_value, np.int64), 32 - bits))


def one(ib: int, bits: int) -> int:
    """The raw value of 1 (saturated to the largest value below it when ``ib`` is 0)."""
    return (1 << (bits - 1)) - 1 if ib == 0 else 1 << (bits - 1 - ib)


def _add_saturating_if_16(a: np.ndarray, b: np.ndarray, bits: int) -> np.ndarray:
    s = a + b
    if bits == 16:
        return np.asarray(np.clip(s, -32768, 32767))
    return wrap(s, bits)


def _exp_on_quarter_interval(a: np.ndarray, bits: int) -> np.ndarray:
    """exp(a) for a in [-1/4, 0), F0 in and out."""
    const_term = constant(1895147668, bits)
    one_third = constant(715827883, bits)
    x = wrap(a + (1 << (bits - 1 - 3)), bits)
    x2 = mul(x, x, bits)
    x3 = mul(x2, x, bits)
    x4 = mul(x2, x2, bits)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = wrap(mul(wrap(x4_over_4 + x3, bits), one_third, bits) + x2, bits)
    poly = rounding_divide_by_pot(poly, 1)
    const = np.array(const_term, np.int64)
    return _add_saturating_if_16(const, mul(const, wrap(x + poly, bits), bits), bits)


_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative(a: np.ndarray, ib: int, bits: int) -> np.ndarray:
    """exp(a) for a <= 0 given with ``ib`` integer bits; F0 result."""
    fb = bits - 1 - ib
    quarter = 1 << (fb - 2)
    a_mod = wrap((a & (quarter - 1)) - quarter, bits)
    result = _exp_on_quarter_interval(rescale(a_mod, ib, 0, bits), bits)
    remainder = wrap(a_mod - a, bits)
    for exponent, multiplier in _EXP_BARREL:
        if ib > exponent:
            bit = np.int64(1 << (fb + exponent))
            result = np.where((remainder & bit) != 0, mul(result, constant(multiplier, bits), bits), result)
    if ib > 5:
        clamp = constant(-(1 << (36 - ib)), bits)
        result = np.where(a < clamp, np.int64(0), result)
    return np.where(a == 0, np.int64(one(0, bits)), result)


def _rounding_half_sum(a: np.ndarray, b: int) -> np.ndarray:
    s = a + b
    return trunc_div_pot(s + np.where(s >= 0, 1, -1), 1)


def _newton_reciprocal(a: np.ndarray, bits: int) -> np.ndarray:
    """x ~ 1 / ((1 + a) / 2) in F2, three Newton-Raphson steps (a in F0)."""
    half_den = _rounding_half_sum(a, one(0, bits))
    c48_17 = constant(1515870810, bits)
    c_neg32_17 = constant(-1010580540, bits)
    one2 = one(2, bits)
    x = wrap(c48_17 + mul(half_den, c_neg32_17, bits), bits)
    for _ in range(3):
        one_minus = wrap(one2 - mul(half_den, x, bits), bits)
        x = wrap(x + rescale(mul(x, one_minus, bits), 4, 2, bits), bits)
    return x


def fx_logistic(a: np.ndarray, ib: int, bits: int = 16) -> np.ndarray:
    """gemmlowp::logistic on raw values with ``ib`` integer bits; F0 raw result."""
    a = np.asarray(a, np.int64)
    positive = a > 0
    abs_a = np.where(positive, a, wrap(-a, bits))
    e = exp_on_negative(wrap(-abs_a, bits), ib, bits)
    result_pos = rescale(_newton_reciprocal(e, bits), 1, 0, bits)
    result_neg = wrap(one(0, bits) - result_pos, bits)
    half = constant(1 << 30, bits)
    return np.where(a == 0, np.int64(half), np.where(positive, result_pos, result_neg))


def fx_tanh(a: np.ndarray, ib: int, bits: int = 16) -> np.ndarray:
    """gemmlowp::tanh on raw values with ``ib`` integer bits; F0 raw result."""
    a = np.asarray(a, np.int64)
    negative = a < 0
    n = np.where(negative, a, wrap(-a, bits))
    e = exp_on_negative(n, ib + 1, bits)
    t = rescale(wrap(_newton_reciprocal(e, bits) - one(2, bits), bits), 2, 0, bits)
    return np.where(a == 0, np.int64(0), np.where(negative, wrap(-t, bits), t))


def inv_sqrt_multiplier(value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GetInvSqrtQuantizedMultiplierExp(value, reverse_shift=-1), per element: (multiplier, shift)."""
    value = np.asarray(value, np.int64)
    small = value <= 1
    v = np.where(small, np.int64(1 << 28), value)
    shift = np.full(v.shape, 11, np.int64)
    for _ in range(2):
        big = v >= (1 << 29)
        v = np.where(big, v // 4, v)
        shift += big
    bit_length = np.frexp(v.astype(np.float64))[1].astype(np.int64)
    max_left_shift_bits = (32 - bit_length) - 1
    left_pairs = max_left_shift_bits // 2 - 1
    shift -= left_pairs
    v = v << (2 * left_pairs)
    fixed_input = v >> 1
    half_input = rounding_divide_by_pot(fixed_input, 1)
    half_three = np.array((1 << 28) + (1 << 27), np.int64)
    x = np.full(v.shape, 1 << 28, np.int64)
    for _ in range(5):
        x3 = rescale(mul(mul(x, x, 32), x, 32), 9, 3, 32)
        x = rescale(wrap(mul(half_three, x, 32) - mul(half_input, x3, 32), 32), 6, 3, 32)
    x = mul(x, 1518500250, 32)
    neg = shift < 0
    x = np.where(neg, wrap(x << np.where(neg, -shift, 0), 32), x)
    shift = np.where(neg, 0, shift)
    shift = -shift
    return np.where(small, np.int64(INT32_MAX), x), np.where(small, np.int64(0), shift)

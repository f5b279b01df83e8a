"""Integer fixed-point arithmetic as the reference computes it (gemmlowp and TFLite
``QuantUtils``): multipliers, rounding shifts and requantization.

Values are int64 numpy arrays holding 16- or 32-bit raw values; the helpers
wrap or saturate exactly where the C++ types do and round half away from zero
where gemmlowp does. Scalar multipliers and shifts take a fast path; arrays of
them (per element or per channel) broadcast.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from nnhal.server.executor.errors import OP_FAILED, fail
from nnhal.server.executor.ops.common import round_away

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

#: An integer or an array of them (multipliers, shifts).
IntOrArray = Any


def wrap(x: np.ndarray, bits: int) -> np.ndarray:
    """Two's-complement wrap to ``bits`` (the C++ cast back to the raw type)."""
    half = np.int64(1 << (bits - 1))
    mask = np.int64((1 << bits) - 1)
    return ((np.asarray(x, np.int64) + half) & mask) - half


def trunc_div_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """C++ integer division by 2^exponent (truncation toward zero)."""
    return np.where(x >= 0, x >> exponent, -((-x) >> exponent))


def saturating_rounding_doubling_high_mul(a: IntOrArray, b: IntOrArray, bits: int = 32) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul of 16- or 32-bit raw values."""
    a = np.asarray(a, np.int64)
    ab = a * np.asarray(b, np.int64)
    k = bits - 1
    nudge = np.where(ab >= 0, np.int64(1 << (k - 1)), np.int64(1 - (1 << (k - 1))))
    res = trunc_div_pot(ab + nudge, k)
    lowest = -(1 << k)
    # Only lowest * lowest overflows; a scalar multiplier rules it out without a pass.
    if np.ndim(b) == 0 and int(b) != lowest:
        return res
    return np.where((a == lowest) & (np.asarray(b) == lowest), np.int64((1 << k) - 1), res)


def rounding_divide_by_pot(x: np.ndarray, exponent: IntOrArray) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT (round half away from zero); ``exponent`` >= 0, scalar or array."""
    x = np.asarray(x, dtype=np.int64)
    if np.ndim(exponent) == 0:
        exponent = int(exponent)
        if exponent == 0:
            return x
        mask = np.int64((1 << exponent) - 1)
    else:
        exponent = np.asarray(exponent, np.int64)
        mask = (np.int64(1) << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0).astype(np.int64)
    return np.asarray((x >> exponent) + (remainder > threshold).astype(np.int64))


def saturating_rounding_multiply_by_pot(x: np.ndarray, exponent: int, bits: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingMultiplyByPOT: saturating left shift or rounding right shift."""
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (bits - 1 - exponent)) - 1
    result = wrap(x * np.int64(1 << exponent), bits)
    result = np.where(x > threshold, np.int64((1 << (bits - 1)) - 1), result)
    return np.where(x < -threshold, np.int64(-(1 << (bits - 1))), result)


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: IntOrArray, shift: IntOrArray) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier: round(x * qm * 2^(shift-31)), scalar or per-element qm and shift."""
    if np.ndim(multiplier) == 0 and np.ndim(shift) == 0:
        left, right = max(int(shift), 0), max(-int(shift), 0)
        scaled = np.asarray(x, dtype=np.int64) * np.int64(1 << left)
        return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(scaled, int(multiplier)), right)
    shifts = np.asarray(shift, np.int64)
    scaled = np.asarray(x, np.int64) * (np.int64(1) << np.maximum(shifts, 0))
    product = saturating_rounding_doubling_high_mul(scaled, np.asarray(multiplier, np.int64))
    return rounding_divide_by_pot(product, np.maximum(-shifts, 0))


def quantize_multiplier(real: float) -> tuple[int, int]:
    """(quantized multiplier in Q0.31, shift) with real = qm * 2^(shift - 31).

    A positive shift means a left shift (TFLite ``QuantizeMultiplier``).
    """
    if real == 0.0:
        return 0, 0
    if not math.isfinite(real):
        fail(f"effective scale {real!r} is not finite", OP_FAILED)
    q, shift = math.frexp(real)
    if shift > 31:
        # The kernels shift int64 values left by ``shift``: past 31 the product leaves
        # int64 (the reference's int32 arithmetic cannot represent it either).
        fail(f"effective scale {real!r} is too large (needs a left shift of {shift} > 31)", OP_FAILED)
    q_fixed = int(round_away(q * (1 << 31)))
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def quantize_multiplier_below_one(real: float, what: str) -> tuple[int, int]:
    """QuantizeMultiplierSmallerThanOneExp: (multiplier, shift <= 0) for 0 < real < 1.

    Anything else is GENERAL_FAILURE naming ``what`` (the operation).
    """
    if not 0.0 < real < 1.0:
        fail(f"{what}: multiplier {real!r} is outside (0, 1)", OP_FAILED)
    qm, shift = quantize_multiplier(real)
    if shift > 0:
        fail(f"{what}: multiplier {real!r} needs a left shift", OP_FAILED)
    return qm, shift


def channel_multipliers(in_scale: float, filter_scales: np.ndarray, out_scale: float) -> tuple[np.ndarray, np.ndarray]:
    """GetQuantizedConvolutionMultipler + QuantizeMultiplier per channel (float product, then double)."""
    qm = np.empty(filter_scales.shape, np.int64)
    sh = np.empty(filter_scales.shape, np.int64)
    for k, fs in enumerate(filter_scales.astype(np.float32)):
        real = float(np.float32(in_scale) * fs) / float(np.float32(out_scale))
        qm[k], sh[k] = quantize_multiplier(real)
    return qm, sh


def requantize(
    acc: np.ndarray,
    multipliers: np.ndarray | np.integer,
    shifts: np.ndarray | np.integer,
    inplace: bool = False,
    zero_point: int = 0,
) -> np.ndarray:
    """MultiplyByQuantizedMultiplier plus ``zero_point``, per channel (last axis) or scalar,
    for positive multipliers: the GEMM kernels' fast path.

    Bit-exact with the reference in fewer passes, on floor (arithmetic) shifts: the
    reference's nudge-and-truncate of x / 2^31 equals floor((x + 2^30) / 2^31) for
    either sign, and rounding half away from zero of h / 2^r equals
    floor((h + 2^(r-1) - [h < 0]) / 2^r); adding zero_point * 2^r before that shift
    adds zero_point after it. Multipliers are positive, so the saturating case (both
    INT32_MIN) cannot occur.
    """
    shifts = np.asarray(shifts, np.int64)
    left = np.maximum(shifts, 0)
    right = np.maximum(-shifts, 0)
    a = acc if inplace and acc.dtype == np.int64 else acc.astype(np.int64, copy=True)
    if np.any(left):
        a <<= left
    a *= multipliers
    a += 1 << 30
    a >>= 31
    if not np.any(right):
        if zero_point:
            a += zero_point
        return a
    negative = a >> 63  # -1 where negative, else 0
    if not np.all(right):
        negative &= -(right > 0).astype(np.int64)  # channels without a right shift round nothing
    a += negative
    a += ((np.int64(1) << right) >> 1) + (np.int64(zero_point) << right)
    a >>= right
    return a


def checked_log2(x: float) -> int | None:
    """CheckedLog2 in float32 arithmetic; None when x is not a power of two."""
    if not x > 0 or not math.isfinite(x):
        return None
    x_log2 = np.float32(np.log(np.float32(x))) * (np.float32(1.0) / np.float32(np.log(np.float32(2.0))))
    rounded = float(round_away(float(x_log2)))
    if abs(float(x_log2) - rounded) >= 1e-3:
        return None
    return int(rounded)


def f32_scale(*factors: float, divide_by: float) -> float:
    """a * b / c evaluated in float32 as the reference does."""
    acc = np.float32(factors[0])
    for f in factors[1:]:
        acc = np.float32(acc * np.float32(f))
    return float(np.float32(acc / np.float32(divide_by)))

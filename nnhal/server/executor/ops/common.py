"""Shared numpy bases for kernels: quantization arithmetic (as the reference computes
it), fused activations, float16 handling and version helpers.

Fixed-point helpers mirror gemmlowp / TFLite ``QuantUtils`` exactly (rounding
half away from zero, saturation), vectorised over int64 arrays.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from nnhal.core.enums import FusedActivationFunc, HalVersion, OperandType
from nnhal.core.operand_types import DTYPE

T = OperandType
INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

FLOAT_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
QUANT8_TYPES = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)

#: The HAL version each tensor operand type first appears in an operation signature.
_TYPE_VERSION: dict[OperandType, HalVersion] = {
    T.TENSOR_FLOAT16: HalVersion.V1_2,
    T.FLOAT16: HalVersion.V1_2,
    T.TENSOR_QUANT8_ASYMM_SIGNED: HalVersion.V1_3,
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL: HalVersion.V1_2,
    T.TENSOR_QUANT16_ASYMM: HalVersion.V1_2,
    T.TENSOR_QUANT16_SYMM: HalVersion.V1_2,
    T.TENSOR_QUANT8_SYMM: HalVersion.V1_2,
    T.TENSOR_BOOL8: HalVersion.V1_2,
    T.BOOL: HalVersion.V1_2,
}


def version_for_types(types: Iterable[OperandType], base: HalVersion = HalVersion.V1_0) -> HalVersion:
    """The least version at which operands of these types can appear (at least ``base``)."""
    v = base
    for t in types:
        v = max(v, _TYPE_VERSION.get(t, HalVersion.V1_0))
    return v


def qrange(t: OperandType) -> tuple[int, int]:
    """The representable integer range of a quantized operand type."""
    info = np.iinfo(DTYPE[t])
    return int(info.min), int(info.max)


# -- fixed-point arithmetic ----------------------------------------------------
def quantize_multiplier(real: float) -> tuple[int, int]:
    """(quantized multiplier in Q0.31, shift) with real = qm * 2^(shift - 31).

    A positive shift means a left shift (TFLite ``QuantizeMultiplier``).
    """
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    q_fixed = int(round_away(q * (1 << 31)))
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return q_fixed, shift


def round_away(x: float) -> float:
    """std::round: half away from zero."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def saturating_rounding_doubling_high_mul(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingDoublingHighMul on int64 arrays of int32 values."""
    a = np.asarray(a, dtype=np.int64)
    ab = a * np.int64(b)
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    t = ab + nudge
    # C++ integer division truncates toward zero.
    res = np.where(t >= 0, t >> 31, -((-t) >> 31))
    if b == INT32_MIN:
        res = np.where(a == INT32_MIN, np.int64(INT32_MAX), res)
    return res


def rounding_divide_by_pot(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp RoundingDivideByPOT (round half away from zero)."""
    x = np.asarray(x, dtype=np.int64)
    if exponent == 0:
        return x
    mask = np.int64((1 << exponent) - 1)
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0).astype(np.int64)
    return (x >> exponent) + (remainder > threshold).astype(np.int64)


def multiply_by_quantized_multiplier(x: np.ndarray, multiplier: int, shift: int) -> np.ndarray:
    """TFLite MultiplyByQuantizedMultiplier: round(x * qm * 2^(shift-31))."""
    left = shift if shift > 0 else 0
    right = -shift if shift < 0 else 0
    x = np.asarray(x, dtype=np.int64) * np.int64(1 << left)
    return rounding_divide_by_pot(saturating_rounding_doubling_high_mul(x, multiplier), right)


def requantize(acc: np.ndarray, real_multiplier: float, out_zero_point: int) -> np.ndarray:
    """acc * real_multiplier + zp in the reference's fixed point (int64 result)."""
    qm, shift = quantize_multiplier(real_multiplier)
    return multiply_by_quantized_multiplier(acc, qm, shift) + out_zero_point


# -- activations -------------------------------------------------------------
_FLOAT_BOUNDS: dict[int, tuple[float, float]] = {
    FusedActivationFunc.NONE: (-math.inf, math.inf),
    FusedActivationFunc.RELU: (0.0, math.inf),
    FusedActivationFunc.RELU1: (-1.0, 1.0),
    FusedActivationFunc.RELU6: (0.0, 6.0),
}


def check_activation(act: int | None) -> bool:
    return act is None or act in _FLOAT_BOUNDS


def apply_activation(x: np.ndarray, act: int) -> np.ndarray:
    """Fused activation on a float array (in place when possible)."""
    lo, hi = _FLOAT_BOUNDS[act]
    if lo == -math.inf and hi == math.inf:
        return x
    return np.clip(x, lo, hi, out=x if x.flags.writeable else None)


def activation_range_quant(act: int, scale: float, zero_point: int, t: OperandType) -> tuple[int, int]:
    """Quantized clamp bounds for a fused activation (CalculateActivationRange)."""
    qmin, qmax = qrange(t)
    lo, hi = _FLOAT_BOUNDS[act]

    def q(v: float) -> int:
        return zero_point + int(round_away(v / scale))

    a = qmin if lo == -math.inf else max(qmin, q(lo))
    b = qmax if hi == math.inf else min(qmax, q(hi))
    return a, b


# -- (de)quantization -----------------------------------------------------------
def dequantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return (x.astype(np.float32) - np.float32(zero_point)) * np.float32(scale)


def quantize(x: np.ndarray, scale: float, zero_point: int, t: OperandType) -> np.ndarray:
    """Round half away from zero, add zp, saturate to the type's range."""
    lo, hi = qrange(t)
    q = _round_away_arr(np.asarray(x, np.float32) / np.float32(scale))
    return np.asarray(np.clip(q + zero_point, lo, hi).astype(DTYPE[t]))


def _round_away_arr(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.where(x >= 0, np.floor(x + 0.5), -np.floor(-x + 0.5)))


round_half_away = _round_away_arr


def to_compute(x: np.ndarray) -> np.ndarray:
    """Float16 inputs are computed in float32 (results cast back by set_output)."""
    return x.astype(np.float32) if x.dtype == np.float16 else x

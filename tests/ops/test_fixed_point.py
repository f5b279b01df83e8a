"""Fixed-point helpers (_fixed_point, _fixed_point_math) against float and integer references."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.errors import GeneralFailure
from nnhal.server.executor.ops._fixed_point import (
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    quantize_multiplier_below_one,
    requantize,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
    wrap,
)
from nnhal.server.executor.ops._fixed_point_math import fx_logistic, fx_tanh


def sig(x: np.ndarray) -> np.ndarray:
    return np.asarray(1 / (1 + np.exp(-x)))


def test_fixed_point_logistic_and_tanh_track_float() -> None:
    raw = np.arange(-32768, 32768, 13)
    real = raw / 2.0**12  # three integer bits
    assert np.abs(fx_logistic(raw, 3) / 32768 - sig(real)).max() < 5e-4
    assert np.abs(fx_tanh(raw, 3) / 32768 - np.tanh(real)).max() < 5e-4
    assert fx_logistic(np.array([0]), 3)[0] == 1 << 14


def _round_half_away_exact(num: np.ndarray, den: int) -> np.ndarray:
    """num / den rounded half away from zero, in exact integer arithmetic."""
    q, r = np.divmod(np.abs(num), den)
    return np.asarray(np.sign(num) * (q + (2 * r >= den)))


def test_rounding_divide_by_pot_rounds_half_away_for_scalar_and_array_exponents() -> None:
    x = np.arange(-1000, 1001, dtype=np.int64)
    for exponent in range(0, 6):
        want = _round_half_away_exact(x, 1 << exponent)
        np.testing.assert_array_equal(rounding_divide_by_pot(x, exponent), want)
        np.testing.assert_array_equal(rounding_divide_by_pot(x, np.full(x.shape, exponent)), want)


def test_saturating_rounding_doubling_high_mul_saturates_only_lowest_times_lowest() -> None:
    lo32, lo16 = -(2**31), -(2**15)
    assert saturating_rounding_doubling_high_mul(np.array([lo32]), lo32)[0] == 2**31 - 1
    assert saturating_rounding_doubling_high_mul(np.array([lo16]), np.array([lo16]), 16)[0] == 2**15 - 1
    a = np.array([3, -3, 1 << 30, -(1 << 30), -(1 << 30) - 5], np.int64)
    # a * b / 2^31 to the nearest integer, ties upward (gemmlowp's nudge-and-truncate).
    want = (a * (1 << 30) + (1 << 30)) >> 31
    np.testing.assert_array_equal(saturating_rounding_doubling_high_mul(a, 1 << 30), want)


@pytest.mark.parametrize("real", [1e-6, 0.0123, 0.5, 0.75, 1.0, 3.3, 1234.5])
def test_quantize_multiplier_represents_the_real_multiplier(real: float) -> None:
    qm, shift = quantize_multiplier(real)
    assert 1 << 30 <= qm < 1 << 31
    assert abs(qm * 2.0 ** (shift - 31) - real) <= real * 2.0**-30


def test_multiply_by_quantized_multiplier_scalar_and_per_element_paths_agree() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(-(1 << 20), 1 << 20, 500)
    reals = rng.uniform(1e-4, 4.0, 500)
    pairs = [quantize_multiplier(float(r)) for r in reals]
    qm = np.array([p[0] for p in pairs])
    shift = np.array([p[1] for p in pairs])
    per_element = multiply_by_quantized_multiplier(x, qm, shift)
    scalar = np.array([multiply_by_quantized_multiplier(np.array(v), m, s) for v, m, s in zip(x, qm, shift)])
    np.testing.assert_array_equal(per_element, scalar.reshape(-1))
    assert np.abs(per_element - x * reals).max() <= 1


def test_fast_requantize_is_bit_exact_with_the_reference_formula() -> None:
    rng = np.random.default_rng(1)
    acc = rng.integers(-(1 << 24), 1 << 24, (64, 6))
    reals = [1e-5, 3e-3, 0.2, 0.9, 1.5, 7.0]  # right shifts, none, and left shifts
    pairs = [quantize_multiplier(r) for r in reals]
    qm = np.array([p[0] for p in pairs], np.int64)
    shift = np.array([p[1] for p in pairs], np.int64)
    for zero_point in (0, -128, 7):
        want = multiply_by_quantized_multiplier(acc, qm, shift) + zero_point
        np.testing.assert_array_equal(requantize(acc, qm, shift, zero_point=zero_point), want)


def test_quantize_multiplier_below_one_is_general_failure_outside_the_open_interval() -> None:
    assert quantize_multiplier_below_one(0.25, "ADD")[1] <= 0
    for real in (0.0, 1.0, 2.0):
        with pytest.raises(GeneralFailure, match="ADD: multiplier"):
            quantize_multiplier_below_one(real, "ADD")


def test_wrap_is_twos_complement() -> None:
    np.testing.assert_array_equal(wrap(np.array([127, 128, -129, 255, 256]), 8), [127, -128, 127, -1, 0])

"""FULLY_CONNECTED: float and quantized results against numpy matrix products, flattening
of higher-rank inputs, the HAL version of a use, and rejected operands."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import GeneralFailure, InvalidArgument
from nnhal.core.types import Operand
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F = T.TENSOR_FLOAT32
Q8 = T.TENSOR_QUANT8_ASYMM
I32 = scalar(T.INT32)
Pair = tuple[Operand, object]


def fc_inputs(x: np.ndarray, w: np.ndarray, b: np.ndarray, act: int = 0, t: T = F) -> list[Pair]:
    return [(tensor(t, x.shape), x), (tensor(t, w.shape), w), (tensor(t, b.shape), b), (I32, act)]


@pytest.mark.parametrize("act,clamp", [(0, (-np.inf, np.inf)), (1, (0, np.inf)), (2, (-1, 1)), (3, (0, 6))])
def test_float_matches_the_matrix_product(act: int, clamp: tuple[float, float]) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5)).astype(np.float32) * 3
    w = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    ins = fc_inputs(x, w, b, act)
    (got,) = run(Op.FULLY_CONNECTED, ins, [tensor(F)])
    want = np.clip(x.astype(np.float64) @ w.T + b, *clamp)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert validate(Op.FULLY_CONNECTED, ins, [tensor(F)]) == HalVersion.V1_0


def test_higher_rank_input_is_flattened_to_batches_of_input_size() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 2, 3, 2)).astype(np.float32)  # 24 values = 4 batches of 6
    w = rng.standard_normal((3, 6)).astype(np.float32)
    b = np.zeros(3, np.float32)
    (got,) = run(Op.FULLY_CONNECTED, fc_inputs(x, w, b), [tensor(F)])
    assert got.shape == (4, 3)
    np.testing.assert_allclose(got, x.reshape(4, 6) @ w.T, rtol=1e-5, atol=1e-5)


def test_quantized_matches_the_real_valued_product_to_one_step() -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (2, 8)).astype(np.uint8)
    w = rng.integers(0, 256, (3, 8)).astype(np.uint8)
    b = rng.integers(-500, 500, 3).astype(np.int32)
    sx, zx, sw, zw, so, zo = 0.05, 120, 0.02, 130, 0.4, 100
    ins: list[Pair] = [
        (tensor(Q8, x.shape, sx, zx), x),
        (tensor(Q8, w.shape, sw, zw), w),
        (tensor(T.TENSOR_INT32, b.shape, sx * sw, 0), b),
        (I32, 0),
    ]
    out = tensor(Q8, (2, 3), so, zo)
    (got,) = run(Op.FULLY_CONNECTED, ins, [out])
    real = ((x.astype(np.int64) - zx) @ (w.astype(np.int64) - zw).T + b) * sx * sw
    want = np.clip(np.round(real / so) + zo, 0, 255)
    assert np.abs(got.astype(np.int64) - want).max() <= 1
    assert validate(Op.FULLY_CONNECTED, ins, [out]) == HalVersion.V1_0
    # An output scale not above input scale x weights scale is a 1.2 use.
    assert validate(Op.FULLY_CONNECTED, ins, [tensor(Q8, (2, 3), sx * sw, zo)]) == HalVersion.V1_2


def test_weights_and_input_ranks_are_checked() -> None:
    x, b = np.zeros((2, 4), np.float32), np.zeros(2, np.float32)
    with pytest.raises(InvalidArgument, match="rank 2"):
        validate(Op.FULLY_CONNECTED, fc_inputs(x, np.zeros((2, 4, 1), np.float32), b), [tensor(F)])
    with pytest.raises(InvalidArgument, match="rank 2 to 4"):
        validate(Op.FULLY_CONNECTED, fc_inputs(np.zeros(4, np.float32), np.zeros((2, 4), np.float32), b), [tensor(F)])


def test_constant_activation_must_be_a_fused_activation() -> None:
    ins = fc_inputs(np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32), np.zeros(2, np.float32), act=9)
    with pytest.raises(InvalidArgument, match="invalid fused activation 9"):
        validate(Op.FULLY_CONNECTED, ins, [tensor(F)])


def test_runtime_shapes_that_do_not_fit_fail_the_execution() -> None:
    w = np.zeros((2, 4), np.float32)
    x = np.zeros((2, 3), np.float32)
    ins: list[Pair] = [(tensor(F), x), (tensor(F, w.shape), w), (tensor(F, (2,)), np.zeros(2, np.float32)), (I32, 0)]
    with pytest.raises(GeneralFailure, match="FULLY_CONNECTED: 6 input elements are not a multiple of input size 4"):
        run(Op.FULLY_CONNECTED, ins, [tensor(F)])
    x = np.zeros((2, 4), np.float32)
    ins = [(tensor(F), x), (tensor(F, w.shape), w), (tensor(F), np.zeros(3, np.float32)), (I32, 0)]
    with pytest.raises(GeneralFailure, match=r"FULLY_CONNECTED: bias has shape \[3\], expected \[2\]"):
        run(Op.FULLY_CONNECTED, ins, [tensor(F)])

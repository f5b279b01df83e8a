"""SOFTMAX, LOG_SOFTMAX, L2_NORMALIZATION, LOCAL_RESPONSE_NORMALIZATION, INSTANCE_NORMALIZATION:
results against small numpy references, and rejected operands."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import GeneralFailure, InvalidArgument
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F = T.TENSOR_FLOAT32
F32 = scalar(T.FLOAT32)
I32 = scalar(T.INT32)
BOOL = scalar(T.BOOL)


def softmax(x: np.ndarray, beta: float, axis: int) -> np.ndarray:
    e = np.exp(beta * (x - x.max(axis=axis, keepdims=True)))
    return np.asarray(e / e.sum(axis=axis, keepdims=True))


@pytest.fixture
def x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_along_any_axis(x: np.ndarray, axis: int) -> None:
    ins = [(tensor(F, x.shape), x), (F32, 0.7), (I32, axis)]
    (got,) = run(Op.SOFTMAX, ins, [tensor(F)])
    np.testing.assert_allclose(got, softmax(x.astype(np.float64), 0.7, axis), rtol=1e-5, atol=1e-6)


def test_softmax_2d_default_axis_is_1_0() -> None:
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], np.float32)
    ins = [(tensor(F, x.shape), x), (F32, 1.0)]
    assert validate(Op.SOFTMAX, ins, [tensor(F, x.shape)]) == HalVersion.V1_0
    (got,) = run(Op.SOFTMAX, ins, [tensor(F, x.shape)])
    np.testing.assert_allclose(got, softmax(x.astype(np.float64), 1.0, -1), rtol=1e-6)


def test_quantized_softmax_rounds_to_the_fixed_output_scale() -> None:
    codes = np.array([[100, 128, 160, 200]], np.uint8)
    real = (codes.astype(np.float64) - 128) * 0.05
    ins = [(tensor(T.TENSOR_QUANT8_ASYMM, codes.shape, 0.05, 128), codes), (F32, 1.0)]
    out = tensor(T.TENSOR_QUANT8_ASYMM, codes.shape, 1.0 / 256, 0)
    (got,) = run(Op.SOFTMAX, ins, [out])
    want = np.clip(np.round(softmax(real, 1.0, -1) * 256), 0, 255)
    assert np.abs(got.astype(np.int64) - want).max() <= 1


def test_log_softmax(x: np.ndarray) -> None:
    ins = [(tensor(F, x.shape), x), (F32, 2.0), (I32, 1)]
    (got,) = run(Op.LOG_SOFTMAX, ins, [tensor(F)])
    np.testing.assert_allclose(got, np.log(softmax(x.astype(np.float64), 2.0, 1)), rtol=1e-5, atol=1e-5)


def test_l2_normalization_float_and_quantized() -> None:
    x = np.array([[3.0, 4.0, 0.0], [0.0, 0.0, 0.0]], np.float32)
    (got,) = run(Op.L2_NORMALIZATION, [(tensor(F, x.shape), x)], [tensor(F)])
    np.testing.assert_allclose(got, [[0.6, 0.8, 0.0], [0.0, 0.0, 0.0]], rtol=1e-6)
    codes = np.array([[131, 132, 128]], np.uint8)  # (3, 4, 0) around zero point 128
    qin = tensor(T.TENSOR_QUANT8_ASYMM, codes.shape, 0.5, 128)
    (q,) = run(Op.L2_NORMALIZATION, [(qin, codes)], [tensor(T.TENSOR_QUANT8_ASYMM, codes.shape, 1.0 / 128, 128)])
    np.testing.assert_array_equal(q, [[128 + round(0.6 * 128), 128 + round(0.8 * 128), 128]])


def lrn_reference(x: np.ndarray, radius: int, bias: float, alpha: float, beta: float) -> np.ndarray:
    out = np.empty_like(x, dtype=np.float64)
    depth = x.shape[-1]
    for c in range(depth):
        window = x[..., max(0, c - radius) : min(depth, c + radius + 1)].astype(np.float64)
        out[..., c] = x[..., c] / (bias + alpha * (window * window).sum(axis=-1)) ** beta
    return out


def test_local_response_normalization_matches_a_direct_window_sum() -> None:
    x = np.random.default_rng(1).standard_normal((1, 2, 2, 6)).astype(np.float32)
    ins = [(tensor(F, x.shape), x), (I32, 2), (F32, 1.5), (F32, 0.3), (F32, 0.75)]
    (got,) = run(Op.LOCAL_RESPONSE_NORMALIZATION, ins, [tensor(F)])
    np.testing.assert_allclose(got, lrn_reference(x, 2, 1.5, 0.3, 0.75), rtol=1e-5)


def test_instance_normalization_nhwc_and_nchw() -> None:
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 2)).astype(np.float32)
    mean = x.mean(axis=(1, 2), keepdims=True, dtype=np.float64)
    var = x.astype(np.float64).var(axis=(1, 2), keepdims=True)
    want = (x - mean) * 2.0 / np.sqrt(var + 1e-3) + 0.5
    ins = [(tensor(F, x.shape), x), (F32, 2.0), (F32, 0.5), (F32, 1e-3), (BOOL, False)]
    (got,) = run(Op.INSTANCE_NORMALIZATION, ins, [tensor(F)])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    ins = [(tensor(F, nchw.shape), nchw), (F32, 2.0), (F32, 0.5), (F32, 1e-3), (BOOL, True)]
    (got_nchw,) = run(Op.INSTANCE_NORMALIZATION, ins, [tensor(F)])
    np.testing.assert_allclose(got_nchw, want.transpose(0, 3, 1, 2), rtol=1e-4, atol=1e-5)


def test_softmax_rank_above_4_is_invalid() -> None:
    with pytest.raises(InvalidArgument, match="rank 1 to 4"):
        validate(Op.SOFTMAX, [(tensor(F, (1, 1, 1, 1, 2)), None), (F32, 1.0)], [tensor(F)])


def test_quantized_softmax_output_must_have_the_fixed_quantization() -> None:
    ins = [(tensor(T.TENSOR_QUANT8_ASYMM, (1, 4), 0.05, 128), None), (F32, 1.0)]
    with pytest.raises(InvalidArgument, match="scale 1/256"):
        validate(Op.SOFTMAX, ins, [tensor(T.TENSOR_QUANT8_ASYMM, (1, 4), 0.05, 128)])


def test_instance_normalization_needs_rank_4_and_log_softmax_float() -> None:
    ins = [(tensor(F, (2, 3, 4)), None), (F32, 1.0), (F32, 0.0), (F32, 1e-3), (BOOL, False)]
    with pytest.raises(InvalidArgument, match="rank 4"):
        validate(Op.INSTANCE_NORMALIZATION, ins, [tensor(F)])
    q = T.TENSOR_QUANT8_ASYMM
    with pytest.raises(InvalidArgument, match="unsupported type"):
        validate(Op.LOG_SOFTMAX, [(tensor(q, (1, 4), 0.1, 0), None), (F32, 1.0), (I32, -1)], [tensor(q)])


def test_runtime_parameters_out_of_range_fail_the_execution() -> None:
    x = np.ones((2, 3), np.float32)
    with pytest.raises(GeneralFailure, match="SOFTMAX: axis 2 out of range for rank 2"):
        run(Op.SOFTMAX, [(tensor(F, x.shape), x), (F32, 1.0), (I32, 2)], [tensor(F)])
    ins = [(tensor(F, x.shape), x), (I32, -1), (F32, 1.0), (F32, 1.0), (F32, 0.5)]
    with pytest.raises(GeneralFailure, match="LOCAL_RESPONSE_NORMALIZATION: radius must be >= 0"):
        run(Op.LOCAL_RESPONSE_NORMALIZATION, ins, [tensor(F)])

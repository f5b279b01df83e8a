"""AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D: results against a direct per-window numpy
reference (padding never counts), both padding forms, layouts, quantized rounding, and
rejected operands."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import GeneralFailure, InvalidArgument
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F = T.TENSOR_FLOAT32
I32 = scalar(T.INT32)
BOOL = scalar(T.BOOL)

_REDUCE: dict[Op, Callable[[np.ndarray], float]] = {
    Op.AVERAGE_POOL_2D: lambda w: float(w.mean()),
    Op.MAX_POOL_2D: lambda w: float(w.max()),
    Op.L2_POOL_2D: lambda w: float(np.sqrt((w * w).mean())),
}


def direct_pool(op: Op, x: np.ndarray, k: int, stride: int, pad: tuple[int, int, int, int]) -> np.ndarray:
    """NHWC pooling over the in-bounds taps of each window (pad: top, bottom, left, right)."""
    n, h, w, c = x.shape
    top, bottom, left, right = pad
    oh, ow = (h + top + bottom - k) // stride + 1, (w + left + right - k) // stride + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * stride - top, j * stride - left
            window = x[:, max(r0, 0) : min(r0 + k, h), max(c0, 0) : min(c0 + k, w), :].astype(np.float64)
            for b in range(n):
                for ch in range(c):
                    out[b, i, j, ch] = _REDUCE[op](window[b, :, :, ch])
    return out


@pytest.mark.parametrize("op", list(_REDUCE))
def test_explicit_padding_matches_direct_pooling(op: Op) -> None:
    x = np.random.default_rng(0).standard_normal((2, 5, 6, 3)).astype(np.float32)
    ins = [(tensor(F, x.shape), x)] + [(I32, v) for v in (1, 0, 1, 1, 2, 2, 3, 3, 0)]  # l, r, t, b, strides, filter
    (got,) = run(op, ins, [tensor(F)])
    np.testing.assert_allclose(got, direct_pool(op, x, 3, 2, (1, 1, 1, 0)), rtol=1e-5, atol=1e-6)


def test_implicit_same_padding_in_nchw_needs_1_2() -> None:
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 4)).astype(np.float32)  # NCHW
    ins = [(tensor(F, x.shape), x)] + [(I32, v) for v in (1, 2, 2, 3, 3, 0)] + [(BOOL, True)]
    (got,) = run(Op.MAX_POOL_2D, ins, [tensor(F)])
    # SAME with a 3x3 window and stride 2 over 4 pixels pads 0 before and 1 after.
    want = direct_pool(Op.MAX_POOL_2D, x.transpose(0, 2, 3, 1), 3, 2, (0, 1, 0, 1)).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert validate(Op.MAX_POOL_2D, ins, [tensor(F)]) == HalVersion.V1_2


def test_fused_relu6_clamps_the_average() -> None:
    x = np.full((1, 2, 2, 1), 10.0, np.float32)
    ins = [(tensor(F, x.shape), x)] + [(I32, v) for v in (2, 1, 1, 2, 2, 3)]  # VALID, 2x2, RELU6
    (got,) = run(Op.AVERAGE_POOL_2D, ins, [tensor(F)])
    np.testing.assert_array_equal(got, [[[[6.0]]]])


def test_quantized_average_rounds_half_away_from_zero() -> None:
    codes = np.array([1, 2, 3, 5, 250, 251, 252, 254], np.uint8).reshape(1, 2, 4, 1)
    q = tensor(T.TENSOR_QUANT8_ASYMM, codes.shape, 0.5, 0)
    ins = [(q, codes)] + [(I32, v) for v in (2, 2, 2, 2, 2, 0)]  # VALID, stride 2, 2x2 windows
    (got,) = run(Op.AVERAGE_POOL_2D, ins, [tensor(T.TENSOR_QUANT8_ASYMM, (), 0.5, 0)])
    # (1 + 2 + 250 + 251) / 4 = 126 exactly; (3 + 5 + 252 + 254) / 4 = 128.5 -> 129.
    np.testing.assert_array_equal(got.reshape(-1), [126, 129])
    (mx,) = run(Op.MAX_POOL_2D, ins, [tensor(T.TENSOR_QUANT8_ASYMM, (), 0.5, 0)])
    np.testing.assert_array_equal(mx.reshape(-1), [251, 254])


def test_input_must_have_rank_4() -> None:
    ins = [(tensor(F, (1, 4, 4)), None)] + [(I32, v) for v in (1, 1, 1, 2, 2, 0)]
    with pytest.raises(InvalidArgument, match="rank 4"):
        validate(Op.AVERAGE_POOL_2D, ins, [tensor(F)])


def test_quantized_output_must_keep_the_input_quantization_and_l2_is_float_only() -> None:
    q = T.TENSOR_QUANT8_ASYMM
    ins = [(tensor(q, (1, 4, 4, 1), 0.5, 3), None)] + [(I32, v) for v in (1, 1, 1, 2, 2, 0)]
    with pytest.raises(InvalidArgument, match="scale and zero point"):
        validate(Op.MAX_POOL_2D, ins, [tensor(q, (), 0.25, 3)])
    with pytest.raises(InvalidArgument, match="unsupported type"):
        validate(Op.L2_POOL_2D, ins, [tensor(q, (), 0.5, 3)])


@pytest.mark.parametrize(
    "params,message",
    [
        ((3, 1, 1, 2, 2, 0), "padding code must be 1"),
        ((2, 0, 1, 2, 2, 0), "strides and filter sizes must be >= 1"),
        ((2, 1, 1, 5, 5, 0), "output would be 0x0"),
    ],
)
def test_runtime_parameters_that_cannot_pool_fail_the_execution(params: tuple[int, ...], message: str) -> None:
    x = np.zeros((1, 4, 4, 1), np.float32)
    ins = [(tensor(F, x.shape), x)] + [(I32, v) for v in params]
    with pytest.raises(GeneralFailure, match=f"AVERAGE_POOL_2D: {message}"):
        run(Op.AVERAGE_POOL_2D, ins, [tensor(F)])

"""CONV_2D / DEPTHWISE_CONV_2D / GROUPED_CONV_2D / TRANSPOSE_CONV_2D / FULLY_CONNECTED:
hand-computed results (against a direct numpy reference), padding forms, layouts and
rejected inputs."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType
from nnhal.core.errors import GeneralFailure, InvalidArgument
from nnhal.core.types import Operand, SymmPerChannelQuantParams
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

Op = OperationType
I32 = scalar(T.INT32)
BOOL = scalar(T.BOOL)


def direct_conv(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: tuple[int, int, int, int]) -> np.ndarray:
    """Textbook NHWC convolution (explicit padding top, bottom, left, right)."""
    xp = np.pad(x, ((0, 0), (pad[0], pad[1]), (pad[2], pad[3]), (0, 0)))
    n, h, wd, _ = xp.shape
    o, kh, kw, _ = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, oh, ow, o), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, i * stride : i * stride + kh, j * stride : j * stride + kw, :]
            out[:, i, j, :] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    biased: np.ndarray = out + b
    return biased


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_explicit_padding_matches_direct(stride: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 7, 6, 3)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    want = direct_conv(x, w, b, stride, (1, 1, 1, 1))
    ins: list[tuple[Operand, object]] = [
        (tensor(T.TENSOR_FLOAT32, x.shape), x),
        (tensor(T.TENSOR_FLOAT32, w.shape), w),
        (tensor(T.TENSOR_FLOAT32, b.shape), b),
    ]
    ins += [(I32, v) for v in (1, 1, 1, 1, stride, stride, 0)]
    (got,) = run(Op.CONV_2D, ins, [tensor(T.TENSOR_FLOAT32)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv_implicit_same_nchw_and_dilation_need_1_2() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)  # NCHW
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    b = np.zeros(2, np.float32)
    ins: list[tuple[Operand, object]] = [
        (tensor(T.TENSOR_FLOAT32, x.shape), x),
        (tensor(T.TENSOR_FLOAT32, w.shape), w),
        (tensor(T.TENSOR_FLOAT32, b.shape), b),
    ]
    ins += [(I32, 1), (I32, 1), (I32, 1), (I32, 0), (BOOL, True)]
    (got,) = run(Op.CONV_2D, ins, [tensor(T.TENSOR_FLOAT32)])
    want = direct_conv(x.transpose(0, 2, 3, 1), w, b, 1, (1, 1, 1, 1)).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert validate(Op.CONV_2D, ins, [tensor(T.TENSOR_FLOAT32)]) == HalVersion.V1_2


def test_conv_per_channel_quant() -> None:
    x = np.array([[[[10, 20]]]], np.uint8)  # 1x1x1x2, zero point 10
    w = np.array([[[[1, 2]]], [[[3, -1]]]], np.int8)  # 2 output channels
    b = np.array([0, 0], np.int32)
    cq = SymmPerChannelQuantParams((0.5, 0.25), 0)
    ins = [
        (tensor(T.TENSOR_QUANT8_ASYMM, x.shape, 1.0, 10), x),
        (tensor(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, w.shape, 0.0, 0, cq), w),
        (tensor(T.TENSOR_INT32, b.shape), b),
    ]
    ins += [(I32, v) for v in (0, 0, 0, 0, 1, 1, 0)]
    (got,) = run(Op.CONV_2D, ins, [tensor(T.TENSOR_QUANT8_ASYMM, (), 1.0, 0)])
    # channel 0: (0*1 + 10*2) * 0.5 = 10; channel 1: (0*3 + 10*-1) * 0.25 = -2.5 -> clamp 0
    assert got.reshape(-1).tolist() == [10, 0]


def test_depthwise_multiplier_and_fully_connected() -> None:
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 2, 2, 1)
    w = np.array([1, 2], np.float32).reshape(1, 1, 1, 2)  # multiplier 2
    ins = [
        (tensor(T.TENSOR_FLOAT32, x.shape), x),
        (tensor(T.TENSOR_FLOAT32, w.shape), w),
        (tensor(T.TENSOR_FLOAT32, (2,)), np.zeros(2)),
    ]
    ins += [(I32, v) for v in (2, 1, 1, 2, 0)]  # VALID, strides 1, multiplier 2, no activation
    (got,) = run(Op.DEPTHWISE_CONV_2D, ins, [tensor(T.TENSOR_FLOAT32)])
    np.testing.assert_array_equal(got[..., 0], x[..., 0])
    np.testing.assert_array_equal(got[..., 1], 2 * x[..., 0])
    fx = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    fw = np.array([[1, 0, -1], [2, 2, 2]], np.float32)
    fins = [
        (tensor(T.TENSOR_FLOAT32, fx.shape), fx),
        (tensor(T.TENSOR_FLOAT32, fw.shape), fw),
        (tensor(T.TENSOR_FLOAT32, (2,)), [0.5, 0]),
        (I32, 1),
    ]
    (fc,) = run(Op.FULLY_CONNECTED, fins, [tensor(T.TENSOR_FLOAT32)])
    np.testing.assert_array_equal(fc, [[0.0, 12.0], [0.0, 30.0]])  # RELU clamps -1.5 and -1.5


def test_transpose_conv_inverts_the_stride() -> None:
    x = np.ones((1, 2, 2, 1), np.float32)
    w = np.ones((1, 2, 2, 1), np.float32)
    ins = [
        (tensor(T.TENSOR_FLOAT32, x.shape), x),
        (tensor(T.TENSOR_FLOAT32, w.shape), w),
        (tensor(T.TENSOR_FLOAT32, (1,)), [0.0]),
    ]
    ins += [(I32, v) for v in (0, 0, 0, 0, 2, 2, 0)] + [(BOOL, False)]
    (got,) = run(Op.TRANSPOSE_CONV_2D, ins, [tensor(T.TENSOR_FLOAT32)])
    np.testing.assert_array_equal(got, np.ones((1, 4, 4, 1), np.float32))


@pytest.mark.parametrize(
    "op,count",
    [
        (Op.CONV_2D, 6),
        (Op.DEPTHWISE_CONV_2D, 7),
        (Op.GROUPED_CONV_2D, 10),
        (Op.TRANSPOSE_CONV_2D, 10),
        (Op.FULLY_CONNECTED, 3),
    ],
)
def test_wrong_input_count_is_invalid(op: OperationType, count: int) -> None:
    ins = [(tensor(T.TENSOR_FLOAT32, (1, 2, 2, 1)), None)] * 3 + [(I32, 0)] * (count - 3)
    with pytest.raises(InvalidArgument):
        validate(op, ins[:count], [tensor(T.TENSOR_FLOAT32)])


def test_float_bias_type_mismatch_is_invalid() -> None:
    ins: list[tuple[Operand, object]] = [
        (tensor(T.TENSOR_FLOAT32, (1, 2, 2, 1)), None),
        (tensor(T.TENSOR_FLOAT32, (1, 1, 1, 1)), None),
        (tensor(T.TENSOR_INT32, (1,)), None),
    ]
    ins += [(I32, 1)] * 4
    with pytest.raises(InvalidArgument, match="bias"):
        validate(Op.CONV_2D, ins, [tensor(T.TENSOR_FLOAT32)])


@pytest.mark.parametrize("op", [Op.CONV_2D, Op.DEPTHWISE_CONV_2D])
def test_a_bias_of_the_wrong_length_at_run_time_fails_with_a_status(op: Op) -> None:
    """Found by make fuzz: a bias whose dims the model left unknown was broadcast (ValueError)."""
    x = np.ones((1, 2, 2, 1), np.float32)
    w = np.ones((1, 1, 1, 2), np.float32) if op == Op.DEPTHWISE_CONV_2D else np.ones((2, 1, 1, 1), np.float32)
    ins = [
        (tensor(T.TENSOR_FLOAT32, x.shape), x),
        (tensor(T.TENSOR_FLOAT32, w.shape), w),
        (tensor(T.TENSOR_FLOAT32, (3,)), np.zeros(3)),
    ]
    ins += [(I32, v) for v in ((2, 1, 1, 2, 0) if op == Op.DEPTHWISE_CONV_2D else (2, 1, 1, 0))]
    with pytest.raises(GeneralFailure, match="bias has shape"):
        run(op, ins, [tensor(T.TENSOR_FLOAT32)])


@pytest.mark.parametrize(
    ("stride", "dilation", "dtype"),
    [
        ((2, 2), (1, 1), np.float32),
        ((1, 3), (1, 1), np.float32),
        ((2, 2), (2, 2), np.int32),
        ((3, 2), (1, 3), np.int32),
    ],
)
def test_depthwise_sums_over_column_phases_match_the_taps(
    stride: tuple[int, int], dilation: tuple[int, int], dtype: type
) -> None:
    """Strided depthwise sums over whole rows of column phases (outputs of ROW_TAPS_MIN positions
    and more) equal the sum of the taps, for every phase a stride and a dilation make."""
    from nnhal.server.executor.ops._conv_core import ROW_TAPS_MIN, Geometry, depthwise_sum, out_hw

    rng = np.random.default_rng(7)
    kh, kw, c = 3, 4, 5
    xp: np.ndarray = rng.integers(-20, 20, size=(2, 60, 47, c)).astype(dtype)
    wt: np.ndarray = rng.integers(-9, 9, size=(kh, kw, c)).astype(dtype)
    g = Geometry(0, 0, 0, 0, stride[0], stride[1], dilation[0], dilation[1], 0, False)
    oh, ow = out_hw(g, (60, 47), (kh, kw))
    assert oh * ow >= ROW_TAPS_MIN
    expected = np.zeros((2, oh, ow, c), np.int64)
    for i in range(kh):
        for j in range(kw):
            r0, c0 = i * dilation[0], j * dilation[1]
            taps = xp[:, r0 : r0 + (oh - 1) * stride[0] + 1 : stride[0], c0 : c0 + (ow - 1) * stride[1] + 1 : stride[1]]
            expected += taps.astype(np.int64) * wt[i, j].astype(np.int64)
    got = depthwise_sum(xp, wt, g, oh, ow, True)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected.astype(dtype))
    windows = depthwise_sum(xp, wt, g, oh, ow, False)
    np.testing.assert_array_equal(windows, expected.astype(dtype))

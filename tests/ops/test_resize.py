"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR: results against a per-pixel numpy reference
of the reference kernels' coordinate rules (size and scale forms, align_corners,
half_pixel_centers, layouts), and rejected operands."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import GeneralFailure, InvalidArgument
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F = T.TENSOR_FLOAT32
I32 = scalar(T.INT32)
F32 = scalar(T.FLOAT32)
BOOL = scalar(T.BOOL)


def bilinear_reference(x: np.ndarray, out_h: int, out_w: int, align: bool, half: bool) -> np.ndarray:
    """Per output pixel: source coordinate, its two neighbours (clamped) and their weights."""
    n, h, w, c = x.shape

    def axis(out: int, size: int) -> list[tuple[int, int, float]]:
        scale = (size - 1) / (out - 1) if align and out > 1 else size / out
        taps = []
        for o in range(out):
            src = (o + 0.5) * scale - 0.5 if half else o * scale
            lo, hi = max(math.floor(src), 0), min(math.ceil(src), size - 1)
            taps.append((lo, hi, src - lo))
        return taps

    out = np.zeros((n, out_h, out_w, c))
    for i, (y0, y1, dy) in enumerate(axis(out_h, h)):
        for j, (x0, x1, dx) in enumerate(axis(out_w, w)):
            out[:, i, j] = (
                x[:, y0, x0] * (1 - dy) * (1 - dx)
                + x[:, y1, x0] * dy * (1 - dx)
                + x[:, y0, x1] * (1 - dy) * dx
                + x[:, y1, x1] * dy * dx
            )
    return out


@pytest.mark.parametrize("align,half", [(False, False), (True, False), (False, True)])
def test_bilinear_matches_the_per_pixel_reference(align: bool, half: bool) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 2)).astype(np.float32)
    ins = [(tensor(F, x.shape), x), (I32, 7), (I32, 5), (BOOL, False), (BOOL, align), (BOOL, half)]
    (got,) = run(Op.RESIZE_BILINEAR, ins, [tensor(F)])
    assert got.shape == (2, 5, 7, 2)
    np.testing.assert_allclose(got, bilinear_reference(x, 5, 7, align, half), rtol=1e-5, atol=1e-5)
    assert validate(Op.RESIZE_BILINEAR, ins, [tensor(F)]) == HalVersion.V1_3


def test_bilinear_align_corners_keeps_the_corners_and_interpolates_linearly() -> None:
    x = np.array([[0.0, 2.0], [4.0, 6.0]], np.float32).reshape(1, 2, 2, 1)
    ins = [(tensor(F, x.shape), x), (I32, 3), (I32, 3), (BOOL, False), (BOOL, True)]
    (got,) = run(Op.RESIZE_BILINEAR, ins, [tensor(F)])
    np.testing.assert_allclose(got[0, :, :, 0], [[0, 1, 2], [2, 3, 4], [4, 5, 6]])


def test_bilinear_scale_form_in_nchw() -> None:
    x = np.random.default_rng(1).standard_normal((1, 2, 3, 3)).astype(np.float32)  # NCHW
    ins = [(tensor(F, x.shape), x), (F32, 1.5), (F32, 2.0), (BOOL, True)]
    (got,) = run(Op.RESIZE_BILINEAR, ins, [tensor(F)])
    # Output size floor(3 * 1.5) = 4 wide, 6 high.
    want = bilinear_reference(x.transpose(0, 2, 3, 1), 6, 4, False, False).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert validate(Op.RESIZE_BILINEAR, ins, [tensor(F)]) == HalVersion.V1_2


def test_quantized_bilinear_rounds_to_nearest() -> None:
    codes = np.array([[10, 21]], np.uint8).reshape(1, 1, 2, 1)
    q = tensor(T.TENSOR_QUANT8_ASYMM, codes.shape, 0.5, 0)
    (got,) = run(Op.RESIZE_BILINEAR, [(q, codes), (I32, 4), (I32, 1)], [tensor(T.TENSOR_QUANT8_ASYMM, (), 0.5, 0)])
    # Sources 0, 0.5, 1, 1.5 (the last clamps): 10, 15.5 -> 16, 21, 21.
    np.testing.assert_array_equal(got.reshape(-1), [10, 16, 21, 21])


def test_nearest_neighbor_upscaling_repeats_pixels() -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 2, 2, 1)
    ins = [(tensor(F, x.shape), x), (I32, 4), (I32, 4), (BOOL, False)]
    (got,) = run(Op.RESIZE_NEAREST_NEIGHBOR, ins, [tensor(F)])
    np.testing.assert_array_equal(got[0, :, :, 0], np.repeat(np.repeat(x[0, :, :, 0], 2, axis=0), 2, axis=1))


def test_nearest_neighbor_align_corners_rounds_the_source() -> None:
    x = np.arange(3, dtype=np.float32).reshape(1, 1, 3, 1)
    ins = [(tensor(F, x.shape), x), (I32, 5), (I32, 1), (BOOL, False), (BOOL, True), (BOOL, False)]
    (got,) = run(Op.RESIZE_NEAREST_NEIGHBOR, ins, [tensor(F)])
    # Scale (3 - 1) / (5 - 1) = 0.5: sources 0, 0.5, 1, 1.5, 2 round half away to 0, 1, 1, 2, 2.
    np.testing.assert_array_equal(got.reshape(-1), [0, 1, 1, 2, 2])


def test_input_must_have_rank_4_and_scalars_their_type() -> None:
    with pytest.raises(InvalidArgument, match="rank 4"):
        validate(Op.RESIZE_BILINEAR, [(tensor(F, (2, 2, 1)), None), (I32, 4), (I32, 4)], [tensor(F)])
    with pytest.raises(InvalidArgument, match="output size/scale"):
        validate(Op.RESIZE_BILINEAR, [(tensor(F, (1, 2, 2, 1)), None), (BOOL, 4), (BOOL, 4)], [tensor(F)])


def test_runtime_parameters_that_cannot_resize_fail_the_execution() -> None:
    x = np.zeros((1, 2, 2, 1), np.float32)
    both = [(tensor(F, x.shape), x), (I32, 4), (I32, 4), (BOOL, False), (BOOL, True), (BOOL, True)]
    with pytest.raises(GeneralFailure, match="RESIZE_BILINEAR: align_corners and half_pixel_centers"):
        run(Op.RESIZE_BILINEAR, both, [tensor(F)])
    with pytest.raises(GeneralFailure, match="RESIZE_NEAREST_NEIGHBOR: output size 4x0 must be positive"):
        run(Op.RESIZE_NEAREST_NEIGHBOR, [(tensor(F, x.shape), x), (I32, 0), (I32, 4), (BOOL, False)], [tensor(F)])


@pytest.mark.parametrize("op", [Op.RESIZE_BILINEAR, Op.RESIZE_NEAREST_NEIGHBOR])
@pytest.mark.parametrize("bad", [math.nan, math.inf, 3e38])
def test_non_finite_or_unrepresentable_scales_fail_the_execution(op: Op, bad: float) -> None:
    """Found by the fuzz campaign: a NaN scale raised ValueError converting to int ("internal error")."""
    x = np.ones((1, 1, 2, 2), np.float32)
    ins = [(tensor(F, [1, 1, 2, 2]), x), (scalar(T.FLOAT32), bad), (scalar(T.FLOAT32), 2.0), (scalar(T.BOOL), True)]
    with pytest.raises((GeneralFailure, InvalidArgument), match=r"finite|too large"):
        run(op, ins, [tensor(F, [1, 1, 4, 4])])

"""HEATMAP_MAX_KEYPOINT: the sub-pixel peak, float and quantized."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import InvalidArgument
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F = T.TENSOR_FLOAT32


Q16 = T.TENSOR_QUANT16_ASYMM


I32 = T.TENSOR_INT32


def test_heatmap_max_keypoint_subpixel_peak() -> None:
    heatmap = [0, 1, 0, 1, 4, 2, 0, 1, 0]  # 3x3, one keypoint
    ins = [(tensor(F, [1, 3, 3, 1]), heatmap), (tensor(F, [1, 4]), [0, 0, 6, 6]), (scalar(T.BOOL), False)]
    score, keypoint = run(Op.HEATMAP_MAX_KEYPOINT, ins, [tensor(F, [1, 1]), tensor(F, [1, 1, 2])])
    # b = (-0.5, 0), A = diag(-5, -6): delta = (0.1, 0), score = 4 + 0.05 - 0.025.
    assert score.reshape(-1)[0] == pytest.approx(4.025, rel=1e-5)
    np.testing.assert_allclose(keypoint.reshape(-1), [3.2, 3.0], rtol=1e-5)


def test_heatmap_max_keypoint_quant_signed() -> None:
    x = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [1, 1, 3, 3], 0.5, -128)
    boxes = tensor(Q16, [1, 4], 0.125, 0)
    out_score = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [1, 1], 0.5, -128)
    out_kp = tensor(Q16, [1, 1, 2], 0.125, 0)
    codes = [-128, -126, -128, -126, -120, -126, -128, -126, -128]  # 0, 1, 0 / 1, 4, 1 / 0, 1, 0
    ins = [(x, codes), (boxes, [0, 0, 48, 48]), (scalar(T.BOOL), True)]
    assert validate(Op.HEATMAP_MAX_KEYPOINT, ins, [out_score, out_kp]) == HalVersion.V1_3
    score, keypoint = run(Op.HEATMAP_MAX_KEYPOINT, ins, [out_score, out_kp])
    assert score.tolist() == [[-120]]
    assert keypoint.reshape(-1).tolist() == [24, 24]
    with pytest.raises(InvalidArgument):
        validate(Op.HEATMAP_MAX_KEYPOINT, ins, [out_score, tensor(Q16, [1, 1, 2], 0.25, 0)])

"""AXIS_ALIGNED_BBOX_TRANSFORM: hand-computed boxes and rejected inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import InvalidArgument
from tests.ops.elementwise_runner import T, run, tensor, validate

F = T.TENSOR_FLOAT32


Q16 = T.TENSOR_QUANT16_ASYMM


I32 = T.TENSOR_INT32


def test_bbox_transform_float_and_quant() -> None:
    ins = [
        (tensor(F, [1, 4]), [0, 0, 10, 10]),
        (tensor(F, [1, 8]), [0, 0, 0, 0, 0.1, 0, math.log(2.0), 0]),
        (tensor(I32, [1]), [0]),
        (tensor(F, [1, 2]), [20, 20]),
    ]
    (y,) = run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, [tensor(F, [1, 8])])
    np.testing.assert_allclose(y.reshape(-1), [0, 0, 10, 10, 0, 0, 16, 10], atol=1e-5)

    deltas = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [1, 4], 0.05, 0)
    qins = [
        (tensor(Q16, [1, 4], 0.125, 0), [0, 0, 80, 80]),
        (deltas, [2, 0, 0, 0]),
        (tensor(I32, [1]), [0]),
        (tensor(Q16, [1, 2], 0.125, 0), [160, 160]),
    ]
    out = tensor(Q16, [1, 4], 0.125, 0)
    assert validate(Op.AXIS_ALIGNED_BBOX_TRANSFORM, qins, [out]) == HalVersion.V1_3
    (y,) = run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, qins, [out])
    assert y.reshape(-1).tolist() == [8, 0, 88, 80]


def test_bbox_transform_validation() -> None:
    ins = [(tensor(F, [1, 4]), None), (tensor(F, [1, 4]), None), (tensor(I32, [1]), None)]
    with pytest.raises(InvalidArgument):
        validate(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, [tensor(F, [1, 4])])
    ins.append((tensor(F, [1, 2]), None))
    with pytest.raises(InvalidArgument):
        validate(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, [tensor(T.TENSOR_FLOAT16, [1, 4])])

"""BOX_WITH_NMS_LIMIT: hard and soft suppression results and rejected inputs."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import OperationType as Op
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Operand
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F = T.TENSOR_FLOAT32


Q16 = T.TENSOR_QUANT16_ASYMM


I32 = T.TENSOR_INT32


_NMS_SCORES = [[0.1, 0.9], [0.1, 0.8], [0.1, 0.7]]


_NMS_BOXES = [
    [0, 0, 1, 1, 0, 0, 10, 10],
    [0, 0, 1, 1, 1, 1, 11, 11],  # IoU with the first = 81 / 119
    [0, 0, 1, 1, 20, 20, 30, 30],
]


def _nms_inputs(
    score_thr: float, max_det: int, kernel: int, iou: float, nms_thr: float
) -> list[tuple[Operand, object]]:
    return [
        (tensor(F, [3, 2]), _NMS_SCORES),
        (tensor(F, [3, 8]), _NMS_BOXES),
        (tensor(I32, [3]), [0, 0, 0]),
        (scalar(T.FLOAT32), score_thr),
        (scalar(T.INT32), max_det),
        (scalar(T.INT32), kernel),
        (scalar(T.FLOAT32), iou),
        (scalar(T.FLOAT32), 0.5),
        (scalar(T.FLOAT32), nms_thr),
    ]


def _nms_outputs() -> list[Operand]:
    return [tensor(F, [0]), tensor(F, [0, 4]), tensor(I32, [0]), tensor(I32, [0])]


def test_box_with_nms_limit_hard_and_linear() -> None:
    scores, boxes, classes, batches = run(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(0.0, -1, 0, 0.5, 0.1), _nms_outputs())
    np.testing.assert_allclose(scores, [0.9, 0.7])
    assert boxes.tolist() == [[0, 0, 10, 10], [20, 20, 30, 30]]
    assert classes.tolist() == [1, 1] and batches.tolist() == [0, 0]

    scores, boxes, _, _ = run(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(0.0, -1, 1, 0.5, 0.1), _nms_outputs())
    np.testing.assert_allclose(scores, [0.9, 0.7, 0.8 * (1 - 81 / 119)], rtol=1e-5)
    assert boxes[2].tolist() == [1, 1, 11, 11]

    scores, _, _, _ = run(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(0.0, 1, 2, 0.5, 0.1), _nms_outputs())
    np.testing.assert_allclose(scores, [0.9])


def test_box_with_nms_limit_no_detections() -> None:
    outs = run(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(0.95, -1, 0, 0.5, 0.1), _nms_outputs())
    assert [o.shape for o in outs] == [(0,), (0, 4), (0,), (0,)]


def test_box_with_nms_limit_validation() -> None:
    outs = _nms_outputs()
    outs[2] = tensor(F, [0])
    with pytest.raises(InvalidArgument):
        validate(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(0.0, -1, 0, 0.5, 0.1), outs)
    with pytest.raises(InvalidArgument):
        validate(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(0.0, -1, 3, 0.5, 0.1), _nms_outputs())

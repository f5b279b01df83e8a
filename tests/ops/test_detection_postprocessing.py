"""DETECTION_POSTPROCESSING: regular and fast paths, rejected inputs."""

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


def _postprocess_inputs(regular: bool) -> list[tuple[Operand, object]]:
    return [
        (tensor(F, [1, 2, 3]), [[0, 0.9, 0.1], [0, 0.8, 0.7]]),
        (tensor(F, [1, 2, 4]), [0] * 8),
        (tensor(F, [2, 4]), [[5, 5, 10, 10], [5, 5, 10, 10]]),
        *[(scalar(T.FLOAT32), 1.0) for _ in range(4)],
        (scalar(T.BOOL), regular),
        (scalar(T.INT32), 3),
        (scalar(T.INT32), 1),
        (scalar(T.INT32), 1),
        (scalar(T.FLOAT32), 0.0),
        (scalar(T.FLOAT32), 0.5),
        (scalar(T.BOOL), False),
    ]


def _postprocess_outputs() -> list[Operand]:
    return [tensor(F, [1, 3]), tensor(F, [1, 3, 4]), tensor(I32, [1, 3]), tensor(I32, [1])]


def test_detection_postprocessing_regular_and_fast() -> None:
    scores, boxes, classes, counts = run(Op.DETECTION_POSTPROCESSING, _postprocess_inputs(True), _postprocess_outputs())
    np.testing.assert_allclose(scores, [[0.9, 0.7, 0]])
    assert classes.tolist() == [[0, 1, 0]] and counts.tolist() == [2]
    assert boxes[0, :2].tolist() == [[0, 0, 10, 10], [0, 0, 10, 10]]

    scores, _, classes, counts = run(Op.DETECTION_POSTPROCESSING, _postprocess_inputs(False), _postprocess_outputs())
    np.testing.assert_allclose(scores, [[0.9, 0, 0]])
    assert classes.tolist() == [[0, 0, 0]] and counts.tolist() == [1]


def test_detection_postprocessing_validation() -> None:
    ins = _postprocess_inputs(True)
    ins[0] = (tensor(T.TENSOR_QUANT8_ASYMM, [1, 2, 3], 0.1, 0), None)
    with pytest.raises(InvalidArgument):
        validate(Op.DETECTION_POSTPROCESSING, ins, _postprocess_outputs())
    ins = _postprocess_inputs(True)
    ins[8] = (scalar(T.INT32), 0)
    with pytest.raises(InvalidArgument):
        validate(Op.DETECTION_POSTPROCESSING, ins, _postprocess_outputs())

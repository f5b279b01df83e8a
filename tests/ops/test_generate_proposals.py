"""GENERATE_PROPOSALS: ordering by score and suppression."""

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


def _proposal_inputs(iou: float) -> list[tuple[Operand, object]]:
    return [
        (tensor(F, [1, 1, 1, 2]), [0.6, 0.9]),
        (tensor(F, [1, 1, 1, 8]), [0] * 8),
        (tensor(F, [2, 4]), [[0, 0, 4, 4], [0, 0, 8, 8]]),
        (tensor(F, [1, 2]), [10, 10]),
        (scalar(T.FLOAT32), 1.0),
        (scalar(T.FLOAT32), 1.0),
        (scalar(T.INT32), -1),
        (scalar(T.INT32), -1),
        (scalar(T.FLOAT32), iou),
        (scalar(T.FLOAT32), 1.0),
        (scalar(T.BOOL), False),
    ]


def test_generate_proposals_orders_by_score_and_suppresses() -> None:
    outs = [tensor(F, [0]), tensor(F, [0, 4]), tensor(I32, [0])]
    scores, boxes, batches = run(Op.GENERATE_PROPOSALS, _proposal_inputs(0.3), outs)  # IoU 0.25 keeps both
    np.testing.assert_allclose(scores, [0.9, 0.6])
    assert boxes.tolist() == [[0, 0, 8, 8], [0, 0, 4, 4]] and batches.tolist() == [0, 0]
    scores, _, _ = run(Op.GENERATE_PROPOSALS, _proposal_inputs(0.2), outs)
    np.testing.assert_allclose(scores, [0.9])
    bad = _proposal_inputs(0.3)
    bad[2] = (tensor(T.TENSOR_QUANT16_SYMM, [2, 4], 0.125), None)
    with pytest.raises(InvalidArgument):
        validate(Op.GENERATE_PROPOSALS, bad, outs)

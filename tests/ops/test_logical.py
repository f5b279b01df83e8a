"""LOGICAL_AND, LOGICAL_OR, LOGICAL_NOT, SELECT."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import OperationType as Op
from nnhal.core.errors import GeneralFailure, InvalidArgument
from tests.ops.elementwise_runner import T, run, tensor, validate

B8 = T.TENSOR_BOOL8


def test_and_or_broadcast_and_nonzero_bytes() -> None:
    a = tensor(B8, [2, 2])
    b = tensor(B8, [2])
    raw = np.array([0, 2, 1, 0], dtype=np.uint8).view(np.bool_)  # 2 is a true byte
    (y_and,) = run(Op.LOGICAL_AND, [(a, raw), (b, [True, True])], [a])
    (y_or,) = run(Op.LOGICAL_OR, [(a, raw), (b, [False, False])], [a])
    (y_not,) = run(Op.LOGICAL_NOT, [(a, raw)], [a])
    assert y_and.tolist() == [[False, True], [True, False]]
    assert y_or.tolist() == [[False, True], [True, False]]
    assert y_not.tolist() == [[True, False], [False, True]]


def test_logical_validation() -> None:
    f = tensor(T.TENSOR_FLOAT32, [2])
    b = tensor(B8, [2])
    with pytest.raises(InvalidArgument):
        validate(Op.LOGICAL_AND, [(f, None), (f, None)], [b])
    with pytest.raises(InvalidArgument):
        validate(Op.LOGICAL_OR, [(b, None)], [b])
    with pytest.raises(InvalidArgument):
        validate(Op.LOGICAL_NOT, [(b, None)], [f])


def test_select_float_and_quant8() -> None:
    c = tensor(B8, [3])
    f = tensor(T.TENSOR_FLOAT32, [3])
    (y,) = run(Op.SELECT, [(c, [True, False, True]), (f, [1, 2, 3]), (f, [4, 5, 6])], [f])
    assert y.tolist() == [1.0, 5.0, 3.0]
    a = tensor(T.TENSOR_QUANT8_ASYMM, [3], 1.0, 0)
    b = tensor(T.TENSOR_QUANT8_ASYMM, [3], 2.0, 100)
    out = tensor(T.TENSOR_QUANT8_ASYMM, [3], 0.5, 0)
    # a -> (2, 4, 6) real -> codes 4, 8, 12; b -> (-2, 0, 2) real -> 0 (saturated), 0, 4
    (q,) = run(Op.SELECT, [(c, [False, True, False]), (a, [2, 4, 6]), (b, [99, 100, 101])], [out])
    assert q.tolist() == [0, 8, 4]


def test_select_shapes_and_types() -> None:
    c = tensor(B8, [2])
    f = tensor(T.TENSOR_FLOAT32, [3])
    with pytest.raises(GeneralFailure):
        run(Op.SELECT, [(c, [True, False]), (f, [1, 2, 3]), (f, [4, 5, 6])], [tensor(T.TENSOR_FLOAT32)])
    i = tensor(T.TENSOR_INT32, [2])
    with pytest.raises(InvalidArgument):
        validate(Op.SELECT, [(c, None), (i, None), (tensor(T.TENSOR_FLOAT32, [2]), None)], [i])
    with pytest.raises(InvalidArgument):
        validate(Op.SELECT, [(c, None), (c, None), (c, None)], [c])

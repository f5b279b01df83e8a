"""EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL."""

from __future__ import annotations

import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import InvalidArgument
from tests.ops.elementwise_runner import T, run, tensor, validate

B8 = T.TENSOR_BOOL8


def test_quant8_compares_real_values() -> None:
    a = tensor(T.TENSOR_QUANT8_ASYMM, [3], 1.0, 0)
    b = tensor(T.TENSOR_QUANT8_ASYMM, [3], 0.5, 10)
    # a = (2, 4, 6); b = (2, 3, 7)
    (eq,) = run(Op.EQUAL, [(a, [2, 4, 6]), (b, [14, 16, 24])], [tensor(B8, [3])])
    (gt,) = run(Op.GREATER, [(a, [2, 4, 6]), (b, [14, 16, 24])], [tensor(B8, [3])])
    (le,) = run(Op.LESS_EQUAL, [(a, [2, 4, 6]), (b, [14, 16, 24])], [tensor(B8, [3])])
    assert eq.tolist() == [True, False, False]
    assert gt.tolist() == [False, True, False]
    assert le.tolist() == [True, False, True]


def test_broadcast_int32_and_bool8() -> None:
    i = tensor(T.TENSOR_INT32, [2, 2])
    j = tensor(T.TENSOR_INT32, [1])
    (ne,) = run(Op.NOT_EQUAL, [(i, [1, 2, 3, 4]), (j, [3])], [tensor(B8, [2, 2])])
    (ge,) = run(Op.GREATER_EQUAL, [(i, [1, 2, 3, 4]), (j, [3])], [tensor(B8, [2, 2])])
    (lt,) = run(Op.LESS, [(i, [1, 2, 3, 4]), (j, [3])], [tensor(B8, [2, 2])])
    assert ne.tolist() == [[True, True], [False, True]]
    assert ge.tolist() == [[False, False], [True, True]]
    assert lt.tolist() == [[True, True], [False, False]]
    b = tensor(B8, [2])
    (y,) = run(Op.GREATER, [(b, [True, False]), (b, [False, False])], [b])
    assert y.tolist() == [True, False]


def test_validation() -> None:
    f = tensor(T.TENSOR_FLOAT32, [2])
    with pytest.raises(InvalidArgument):
        validate(Op.EQUAL, [(f, None), (f, None)], [f])
    with pytest.raises(InvalidArgument):
        validate(Op.LESS, [(f, None)], [tensor(B8, [2])])
    with pytest.raises(InvalidArgument):
        validate(Op.GREATER, [(f, None), (tensor(T.TENSOR_INT32, [2]), None)], [tensor(B8, [2])])
    s8 = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [2], 1.0, 0)
    assert validate(Op.EQUAL, [(s8, None), (s8, None)], [tensor(B8, [2])]) == HalVersion.V1_3
    assert validate(Op.EQUAL, [(f, None), (f, None)], [tensor(B8, [2])]) == HalVersion.V1_2

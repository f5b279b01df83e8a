"""ABS, EXP, LOG, SQRT, RSQRT, SIN, NEG, FLOOR: validation and results."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import InvalidArgument
from tests.ops.elementwise_runner import T, run, tensor, validate


def test_int32_abs_and_neg() -> None:
    i = tensor(T.TENSOR_INT32, [3])
    (a,) = run(Op.ABS, [(i, [-3, 0, 7])], [i])
    (n,) = run(Op.NEG, [(i, [-3, 0, 7])], [i])
    assert a.tolist() == [3, 0, 7] and n.tolist() == [3, 0, -7]
    assert validate(Op.ABS, [(i, None)], [i]) == HalVersion.V1_3
    assert validate(Op.NEG, [(i, None)], [i]) == HalVersion.V1_2


def test_float16_math() -> None:
    h = tensor(T.TENSOR_FLOAT16, [2])
    expected: dict[Op, list[float]] = {
        Op.EXP: [1, math.e],
        Op.LOG: [-math.inf, 0],
        Op.SQRT: [0, 1],
        Op.SIN: [0, math.sin(1)],
        Op.FLOOR: [0, 1],
    }
    for op, want in expected.items():
        (y,) = run(op, [(h, [0, 1])], [h])
        assert y.dtype == np.float16
        np.testing.assert_allclose(y.astype(np.float32), want, rtol=1e-3)
    (r,) = run(Op.RSQRT, [(h, [4, 0.25])], [h])
    assert r.tolist() == [0.5, 2.0]


def test_floor_negative_and_rank_limit() -> None:
    f = tensor(T.TENSOR_FLOAT32, [2])
    (y,) = run(Op.FLOOR, [(f, [-1.5, 2.5])], [f])
    assert y.tolist() == [-2.0, 2.0]
    f5 = tensor(T.TENSOR_FLOAT32, [1, 1, 1, 1, 2])
    with pytest.raises(InvalidArgument):
        validate(Op.FLOOR, [(f5, None)], [f5])


def test_unsupported_types_and_counts() -> None:
    i = tensor(T.TENSOR_INT32, [2])
    q8 = tensor(T.TENSOR_QUANT8_ASYMM, [2], 0.5, 0)
    for op in (Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.SIN, Op.FLOOR):
        with pytest.raises(InvalidArgument):
            validate(op, [(i, None)], [i])
        if op != Op.RSQRT:  # RSQRT takes quant8 since feature level 7 (test_aidl_ops.py)
            with pytest.raises(InvalidArgument):
                validate(op, [(q8, None)], [q8])
    f = tensor(T.TENSOR_FLOAT32, [2])
    with pytest.raises(InvalidArgument):
        validate(Op.ABS, [(f, None), (f, None)], [f])
    with pytest.raises(InvalidArgument):
        validate(Op.NEG, [(f, None)], [i])

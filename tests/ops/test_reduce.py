"""MEAN, REDUCE_*, ARGMAX/ARGMIN, TOPK_V2: validation failures and hand-computed results."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import OperationType as Op
from nnhal.core.errors import InvalidArgument
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F32 = T.TENSOR_FLOAT32
I32 = T.TENSOR_INT32
S8 = T.TENSOR_QUANT8_ASYMM_SIGNED


def test_mean_quant_truncates_toward_zero() -> None:
    x = tensor(S8, [1, 3], 0.5, 0)
    (y,) = run(Op.MEAN, [(x, [[-1, -2, -2]]), (tensor(I32, [1]), [1]), (scalar(T.INT32), 0)], [tensor(S8, [], 0.5, 0)])
    # sum -5 / 3 = -1.67 -> -1 (C integer division)
    assert y.tolist() == [-1]
    (k,) = run(Op.MEAN, [(x, [[4, 5, 7]]), (tensor(I32, [2]), [-1, 1]), (scalar(T.INT32), 1)], [tensor(S8, [], 0.5, 0)])
    assert k.tolist() == [[5]]


def test_mean_float_and_errors() -> None:
    x = tensor(T.TENSOR_FLOAT16, [2, 2])
    (y,) = run(Op.MEAN, [(x, [[1, 2], [3, 5]]), (tensor(I32, [1]), [0]), (scalar(T.INT32), 0)], [tensor(x.type)])
    assert y.tolist() == [2, 3.5]
    with pytest.raises(InvalidArgument):
        run(Op.MEAN, [(x, [[1, 2], [3, 5]]), (tensor(I32, [1]), [2]), (scalar(T.INT32), 0)], [tensor(x.type)])
    with pytest.raises(InvalidArgument):
        validate(Op.MEAN, [(x, None), (tensor(I32, [1]), None), (scalar(T.BOOL), True)], [tensor(x.type)])


def test_reduce_family() -> None:
    x = np.array([[1, 0, 3], [4, 5, 6]], np.float32)
    axes = (tensor(I32, [1]), [1])
    keep = (scalar(T.BOOL), False)
    results = {
        op: run(op, [(tensor(F32, [2, 3]), x), axes, keep], [tensor(F32)])[0].tolist()
        for op in (Op.REDUCE_SUM, Op.REDUCE_PROD, Op.REDUCE_MAX, Op.REDUCE_MIN)
    }
    assert results == {Op.REDUCE_SUM: [4, 15], Op.REDUCE_PROD: [0, 120], Op.REDUCE_MAX: [3, 6], Op.REDUCE_MIN: [0, 4]}
    b = tensor(T.TENSOR_BOOL8, [2, 2])
    (a,) = run(Op.REDUCE_ALL, [(b, [[1, 1], [1, 0]]), (tensor(I32, [2]), [0, 1]), keep], [tensor(b.type)])
    (o,) = run(
        Op.REDUCE_ANY, [(b, [[0, 0], [1, 0]]), (tensor(I32, [1]), [1]), (scalar(T.BOOL), True)], [tensor(b.type)]
    )
    assert a.tolist() == [0] and o.tolist() == [[0], [1]]
    with pytest.raises(InvalidArgument):
        validate(Op.REDUCE_SUM, [(tensor(T.TENSOR_QUANT8_ASYMM, [2], 1.0, 0), None), axes, keep], [tensor(F32)])
    with pytest.raises(InvalidArgument):
        validate(Op.REDUCE_ALL, [(tensor(F32, [2]), None), axes, keep], [tensor(F32)])


def test_reduce_max_quant_empty_axis_gives_lowest() -> None:
    q = tensor(T.TENSOR_QUANT8_ASYMM, [2, 0], 1.0, 0)
    (y,) = run(
        Op.REDUCE_MAX,
        [(q, np.zeros((2, 0))), (tensor(I32, [1]), [1]), (scalar(T.BOOL), False)],
        [tensor(q.type, [], 1.0, 0)],
    )
    assert y.tolist() == [0, 0]


def test_argmax_argmin() -> None:
    x = tensor(I32, [2, 3])
    v = [[1, 7, 7], [5, -2, 5]]
    (mx,) = run(Op.ARGMAX, [(x, v), (scalar(T.INT32), -1)], [tensor(I32)])
    (mn,) = run(Op.ARGMIN, [(x, v), (scalar(T.INT32), 0)], [tensor(I32)])
    assert mx.tolist() == [1, 0] and mn.tolist() == [0, 1, 1]
    with pytest.raises(InvalidArgument):
        validate(Op.ARGMAX, [(x, None), (scalar(T.INT32), 0)], [tensor(F32)])
    with pytest.raises(InvalidArgument):
        validate(Op.ARGMIN, [(x, None), (scalar(T.INT32), 2)], [tensor(I32)])


def test_topk_ties_prefer_larger_index() -> None:
    x = tensor(T.TENSOR_QUANT8_ASYMM, [1, 4], 1.0, 0)
    vals, idx = run(Op.TOPK_V2, [(x, [[3, 9, 3, 1]]), (scalar(T.INT32), 3)], [tensor(x.type, [], 1.0, 0), tensor(I32)])
    assert vals.tolist() == [[9, 3, 3]] and idx.tolist() == [[1, 2, 0]]
    with pytest.raises(InvalidArgument):
        validate(Op.TOPK_V2, [(x, None), (scalar(T.INT32), 0)], [tensor(x.type, [], 1.0, 0), tensor(I32)])

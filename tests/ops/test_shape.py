"""RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE, CONCATENATION, SPLIT, RANK, FILL, TILE,
CHANNEL_SHUFFLE: validation failures and hand-computed results."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperandLifeTime, OperationType as Op
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Operand
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F32 = T.TENSOR_FLOAT32
I32 = T.TENSOR_INT32


def omitted(t: T) -> Operand:
    return Operand(type=t, lifetime=OperandLifeTime.NO_VALUE)


def test_reshape_infers_minus_one_and_rejects_bad_sizes() -> None:
    x = tensor(F32, [2, 3])
    (y,) = run(Op.RESHAPE, [(x, np.arange(6)), (tensor(I32, [2]), [3, -1])], [tensor(F32)])
    assert y.shape == (3, 2) and y.ravel().tolist() == list(range(6))
    with pytest.raises(InvalidArgument):
        run(Op.RESHAPE, [(x, np.arange(6)), (tensor(I32, [2]), [4, -1])], [tensor(F32)])
    with pytest.raises(InvalidArgument):
        validate(Op.RESHAPE, [(x, None), (tensor(T.TENSOR_FLOAT32, [2]), None)], [tensor(F32)])


def test_reshape_quant_output_must_keep_quantization() -> None:
    x = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [4], 0.5, 1)
    shape = (tensor(I32, [1]), None)
    assert (
        validate(Op.RESHAPE, [(x, None), shape], [tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [4], 0.5, 1)]) == HalVersion.V1_3
    )
    with pytest.raises(InvalidArgument):
        validate(Op.RESHAPE, [(x, None), shape], [tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [4], 0.25, 1)])


def test_squeeze_all_and_named_axes() -> None:
    x = tensor(F32, [1, 2, 1])
    (y,) = run(Op.SQUEEZE, [(x, [5, 6]), (omitted(I32), None)], [tensor(F32)])
    assert y.shape == (2,)
    (y,) = run(Op.SQUEEZE, [(x, [5, 6]), (tensor(I32, [1]), [-1])], [tensor(F32)])
    assert y.shape == (1, 2)
    (y,) = run(Op.SQUEEZE, [(tensor(F32, [1, 1]), [7]), (omitted(I32), None)], [tensor(F32)])
    assert y.shape == (1,)
    with pytest.raises(InvalidArgument):
        run(Op.SQUEEZE, [(x, [5, 6]), (tensor(I32, [1]), [1])], [tensor(F32)])


def test_expand_dims_int32_and_axis_range() -> None:
    x = tensor(I32, [2, 3])
    (y,) = run(Op.EXPAND_DIMS, [(x, np.arange(6)), (scalar(T.INT32), -1)], [tensor(I32)])
    assert y.shape == (2, 3, 1)
    with pytest.raises(InvalidArgument):
        validate(Op.EXPAND_DIMS, [(x, None), (scalar(T.INT32), 3)], [tensor(I32)])


def test_transpose_default_and_perm() -> None:
    x = tensor(T.TENSOR_FLOAT16, [2, 3])
    (y,) = run(Op.TRANSPOSE, [(x, np.arange(6)), (omitted(I32), None)], [tensor(T.TENSOR_FLOAT16)])
    assert y.tolist() == [[0, 3], [1, 4], [2, 5]]
    x3 = tensor(F32, [1, 2, 3])
    (y,) = run(Op.TRANSPOSE, [(x3, np.arange(6)), (tensor(I32, [3]), [2, 0, 1])], [tensor(F32)])
    assert y.shape == (3, 1, 2)
    with pytest.raises(InvalidArgument):
        run(Op.TRANSPOSE, [(x3, np.arange(6)), (tensor(I32, [3]), [0, 0, 1])], [tensor(F32)])


def test_concatenation_requantizes_inputs() -> None:
    a = tensor(T.TENSOR_QUANT8_ASYMM, [1, 2], 0.5, 0)
    b = tensor(T.TENSOR_QUANT8_ASYMM, [1, 1], 1.0, 10)
    out = tensor(T.TENSOR_QUANT8_ASYMM, [1, 3], 0.5, 0)
    (y,) = run(Op.CONCATENATION, [(a, [[4, 7]]), (b, [[13]]), (scalar(T.INT32), 1)], [out])
    # (13 - 10) * 1.0 / 0.5 = 6
    assert y.tolist() == [[4, 7, 6]]
    assert validate(Op.CONCATENATION, [(a, None), (b, None), (scalar(T.INT32), 1)], [out]) == HalVersion.V1_2


def test_concatenation_zero_sized_and_errors() -> None:
    a, b = tensor(F32, [0, 2]), tensor(F32, [2, 2])
    (y,) = run(Op.CONCATENATION, [(a, np.zeros((0, 2))), (b, [[1, 2], [3, 4]]), (scalar(T.INT32), 0)], [tensor(F32)])
    assert y.tolist() == [[1, 2], [3, 4]]
    with pytest.raises(InvalidArgument):
        validate(Op.CONCATENATION, [(a, None), (tensor(I32, [2, 2]), None), (scalar(T.INT32), 0)], [tensor(F32)])
    with pytest.raises(InvalidArgument):
        validate(Op.CONCATENATION, [(a, None)], [tensor(F32)])


def test_split() -> None:
    x = tensor(I32, [2, 4])
    outs = run(Op.SPLIT, [(x, np.arange(8)), (scalar(T.INT32), 1), (scalar(T.INT32), 2)], [tensor(I32), tensor(I32)])
    assert [o.tolist() for o in outs] == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]
    with pytest.raises(InvalidArgument):
        validate(Op.SPLIT, [(x, None), (scalar(T.INT32), 1), (scalar(T.INT32), 3)], [tensor(I32), tensor(I32)])


def test_rank_fill_tile() -> None:
    (r,) = run(Op.RANK, [(tensor(T.TENSOR_BOOL8, [1, 2, 3]), np.zeros(6))], [Operand(type=T.INT32)])
    assert int(r) == 3
    (f,) = run(Op.FILL, [(tensor(I32, [2]), [2, 1]), (scalar(T.FLOAT16), 1.5)], [tensor(T.TENSOR_FLOAT16)])
    assert f.dtype == np.float16 and f.tolist() == [[1.5], [1.5]]
    with pytest.raises(InvalidArgument):
        validate(Op.FILL, [(tensor(I32, [2]), None), (scalar(T.FLOAT32), 1.0)], [tensor(I32)])
    (t,) = run(Op.TILE, [(tensor(I32, [1, 2]), [[1, 2]]), (tensor(I32, [2]), [2, 2])], [tensor(I32)])
    assert t.tolist() == [[1, 2, 1, 2], [1, 2, 1, 2]]
    with pytest.raises(InvalidArgument):
        run(Op.TILE, [(tensor(I32, [1, 2]), [[1, 2]]), (tensor(I32, [1]), [2])], [tensor(I32)])


def test_channel_shuffle() -> None:
    x = tensor(F32, [1, 6])
    (y,) = run(Op.CHANNEL_SHUFFLE, [(x, np.arange(6)), (scalar(T.INT32), 2), (scalar(T.INT32), -1)], [tensor(F32)])
    assert y.tolist() == [[0, 3, 1, 4, 2, 5]]
    with pytest.raises(InvalidArgument):
        run(Op.CHANNEL_SHUFFLE, [(x, np.arange(6)), (scalar(T.INT32), 4), (scalar(T.INT32), 1)], [tensor(F32)])
    with pytest.raises(InvalidArgument):
        validate(Op.CHANNEL_SHUFFLE, [(x, None), (scalar(T.INT32), 0), (scalar(T.INT32), 1)], [tensor(F32)])

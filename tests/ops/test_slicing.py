"""SLICE, STRIDED_SLICE, GATHER, PAD, PAD_V2, SPACE_TO_DEPTH, DEPTH_TO_SPACE,
SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND: validation failures and hand-computed results."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperandLifeTime, OperationType as Op
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Operand
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F32 = T.TENSOR_FLOAT32
I32 = T.TENSOR_INT32
Q8 = T.TENSOR_QUANT8_ASYMM


def test_slice_minus_one_and_zero_sized() -> None:
    x = tensor(I32, [2, 3])
    (y,) = run(Op.SLICE, [(x, np.arange(6)), (tensor(I32, [2]), [1, 1]), (tensor(I32, [2]), [-1, -1])], [tensor(I32)])
    assert y.tolist() == [[4, 5]]
    (z,) = run(Op.SLICE, [(x, np.arange(6)), (tensor(I32, [2]), [0, 3]), (tensor(I32, [2]), [2, 0])], [tensor(I32)])
    assert z.shape == (2, 0)
    with pytest.raises(InvalidArgument):
        run(Op.SLICE, [(x, np.arange(6)), (tensor(I32, [2]), [0, 2]), (tensor(I32, [2]), [1, 2])], [tensor(I32)])
    with pytest.raises(InvalidArgument):
        validate(Op.SLICE, [(x, None), (tensor(F32, [2]), None), (tensor(I32, [2]), None)], [tensor(I32)])


def _strided(
    x: np.ndarray, begin: list[int], end: list[int], strides: list[int], masks: tuple[int, int, int]
) -> np.ndarray:
    n = len(begin)
    ins = [(tensor(F32, x.shape), x), (tensor(I32, [n]), begin), (tensor(I32, [n]), end), (tensor(I32, [n]), strides)]
    ins += [(scalar(T.INT32), m) for m in masks]
    return run(Op.STRIDED_SLICE, ins, [tensor(F32)])[0]


def test_strided_slice_masks_and_negative_stride() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert _strided(x, [0, 3], [3, 0], [1, -1], (0, 0, 0)).tolist() == x[:, 3:0:-1].tolist()
    assert _strided(x, [2, 0], [0, 4], [-1, 2], (0, 0, 0)).tolist() == x[2:0:-1, ::2].tolist()
    assert _strided(x, [5, -1], [0, 0], [-1, -1], (0, 1 << 1, 0)).tolist() == x[2:0:-1, ::-1].tolist()
    assert _strided(x, [1, 0], [2, 4], [1, 1], (0, 0, 1)).tolist() == [4, 5, 6, 7]
    assert _strided(x, [1, 2], [2, 3], [1, 1], (0, 0, 3)).tolist() == [6]
    with pytest.raises(InvalidArgument):
        _strided(x, [0, 0], [2, 4], [1, 1], (0, 0, 1))


def test_strided_slice_rejects_zero_stride_constant() -> None:
    strides = Operand(type=I32, dimensions=(1,), lifetime=OperandLifeTime.CONSTANT_COPY)
    ins: list[tuple[Operand, object]] = [(tensor(F32, [2]), None), (tensor(I32, [1]), None)]
    ins += [(tensor(I32, [1]), None), (strides, [0])] + [(scalar(T.INT32), 0)] * 3
    with pytest.raises(InvalidArgument):
        validate(Op.STRIDED_SLICE, ins, [tensor(F32)])


def test_gather_higher_rank_indices_and_bounds() -> None:
    x = tensor(Q8, [2, 3], 0.5, 3)
    idx = tensor(I32, [2, 2])
    (y,) = run(Op.GATHER, [(x, np.arange(6)), (scalar(T.INT32), 1), (idx, [[2, 0], [1, 1]])], [tensor(Q8, [], 0.5, 3)])
    assert y.shape == (2, 2, 2) and y[0].tolist() == [[2, 0], [1, 1]]
    (e,) = run(Op.GATHER, [(x, np.arange(6)), (scalar(T.INT32), 0), (tensor(I32, [0]), [])], [tensor(Q8, [], 0.5, 3)])
    assert e.shape == (0, 3)
    with pytest.raises(InvalidArgument):
        run(Op.GATHER, [(x, np.arange(6)), (scalar(T.INT32), 0), (tensor(I32, [1]), [2])], [tensor(Q8, [], 0.5, 3)])
    with pytest.raises(InvalidArgument):
        validate(Op.GATHER, [(x, None), (scalar(T.INT32), 0), (idx, None)], [tensor(Q8, [], 0.25, 3)])


def test_pad_uses_zero_point_and_pad_v2_value() -> None:
    x = tensor(Q8, [1, 2], 0.5, 7)
    pads = (tensor(I32, [2, 2]), [[0, 0], [1, 2]])
    (y,) = run(Op.PAD, [(x, [[1, 2]]), pads], [tensor(Q8, [], 0.5, 7)])
    assert y.tolist() == [[7, 1, 2, 7, 7]]
    assert validate(Op.PAD, [(x, None), (tensor(I32, [2, 2]), None)], [tensor(Q8, [], 0.5, 7)]) == HalVersion.V1_2
    s8 = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [2], 1.0, 0)
    (z,) = run(
        Op.PAD_V2, [(s8, [1, 2]), (tensor(I32, [1, 2]), [[1, 0]]), (scalar(T.INT32), -3)], [tensor(s8.type, [], 1.0, 0)]
    )
    assert z.tolist() == [-3, 1, 2]
    with pytest.raises(InvalidArgument):
        validate(Op.PAD_V2, [(s8, None), (tensor(I32, [1, 2]), None), (scalar(T.FLOAT32), 0.0)], [s8])
    with pytest.raises(InvalidArgument):
        run(Op.PAD, [(tensor(F32, [2]), [1, 2]), (tensor(I32, [1, 2]), [[-1, 0]])], [tensor(F32)])


def test_space_depth_round_trip_nchw() -> None:
    x = np.arange(16, dtype=np.float32).reshape(1, 4, 2, 2)  # NCHW
    flag = (scalar(T.BOOL), True)
    (d,) = run(Op.SPACE_TO_DEPTH, [(tensor(F32, x.shape), x), (scalar(T.INT32), 2), flag], [tensor(F32)])
    assert d.shape == (1, 16, 1, 1)
    (back,) = run(Op.DEPTH_TO_SPACE, [(tensor(F32, d.shape), d), (scalar(T.INT32), 2), flag], [tensor(F32)])
    assert back.tolist() == x.tolist()
    assert (
        validate(Op.DEPTH_TO_SPACE, [(tensor(F32, d.shape), None), (scalar(T.INT32), 2), flag], [tensor(F32)])
        == HalVersion.V1_2
    )
    with pytest.raises(InvalidArgument):
        validate(Op.SPACE_TO_DEPTH, [(tensor(F32, [1, 2, 2, 1]), None), (scalar(T.INT32), 0)], [tensor(F32)])


def test_space_to_depth_nhwc_values() -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 2, 2, 1)
    (y,) = run(Op.SPACE_TO_DEPTH, [(tensor(F32, x.shape), x), (scalar(T.INT32), 2)], [tensor(F32)])
    assert y.reshape(-1).tolist() == [0, 1, 2, 3]


def test_space_batch_round_trip_with_padding() -> None:
    x = np.arange(1, 7, dtype=np.uint8).reshape(1, 2, 3, 1)
    q = tensor(Q8, x.shape, 1.0, 9)
    block = (tensor(I32, [2]), [2, 2])
    (b,) = run(Op.SPACE_TO_BATCH_ND, [(q, x), block, (tensor(I32, [2, 2]), [[0, 0], [0, 1]])], [tensor(Q8, [], 1.0, 9)])
    assert b.shape == (4, 1, 2, 1)
    assert b.reshape(4, 2).tolist() == [[1, 3], [2, 9], [4, 6], [5, 9]]
    (s,) = run(Op.BATCH_TO_SPACE_ND, [(tensor(Q8, b.shape, 1.0, 9), b), block], [tensor(Q8, [], 1.0, 9)])
    assert s[:, :, :3].tolist() == x.tolist()
    with pytest.raises(InvalidArgument):
        validate(Op.BATCH_TO_SPACE_ND, [(tensor(Q8, [4, 1, 1, 1], 1.0, 9), None), (tensor(F32, [2]), None)], [q])

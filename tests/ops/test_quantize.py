"""QUANTIZE, DEQUANTIZE, CAST."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import SymmPerChannelQuantParams
from tests.ops.elementwise_runner import T, run, tensor, validate


def test_quantize_rounds_half_away_and_saturates() -> None:
    f = tensor(T.TENSOR_FLOAT32, [5])
    out = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [5], 0.5, -1)
    (y,) = run(Op.QUANTIZE, [(f, [0.25, -0.25, 1.0, 100.0, -100.0])], [out])
    assert y.tolist() == [0, -2, 1, 127, -128]
    assert validate(Op.QUANTIZE, [(f, None)], [out]) == HalVersion.V1_3
    with pytest.raises(InvalidArgument):
        validate(Op.QUANTIZE, [(f, None)], [tensor(T.TENSOR_INT32, [5])])


def test_dequantize_plain_and_per_channel() -> None:
    q = tensor(T.TENSOR_QUANT8_ASYMM, [3], 0.5, 10)
    (y,) = run(Op.DEQUANTIZE, [(q, [10, 12, 0])], [tensor(T.TENSOR_FLOAT32, [3])])
    assert y.tolist() == [0.0, 1.0, -5.0]
    assert validate(Op.DEQUANTIZE, [(q, None)], [tensor(T.TENSOR_FLOAT32, [3])]) == HalVersion.V1_0
    pc = tensor(T.TENSOR_QUANT8_SYMM_PER_CHANNEL, [2, 2], channel_quant=SymmPerChannelQuantParams((0.5, 2.0), 1))
    (z,) = run(Op.DEQUANTIZE, [(pc, [2, 2, -4, 1])], [tensor(T.TENSOR_FLOAT16, [2, 2])])
    assert z.dtype == np.float16 and z.tolist() == [[1.0, 4.0], [-2.0, 2.0]]
    with pytest.raises(InvalidArgument):
        validate(Op.DEQUANTIZE, [(tensor(T.TENSOR_FLOAT32, [2]), None)], [tensor(T.TENSOR_FLOAT32, [2])])


def test_cast_numeric() -> None:
    f = tensor(T.TENSOR_FLOAT32, [5])
    (u8,) = run(Op.CAST, [(f, [-3.5, 1.9, 254.7, 300.0, np.nan])], [tensor(T.TENSOR_QUANT8_ASYMM, [5], 1.0, 0)])
    (i32,) = run(Op.CAST, [(f, [-3.5, 1.9, 254.7, 3e10, np.nan])], [tensor(T.TENSOR_INT32, [5])])
    assert u8.tolist() == [0, 1, 254, 255, 0]
    assert i32.tolist() == [-3, 1, 254, 2**31 - 1, 0]
    i = tensor(T.TENSOR_INT32, [2])
    (h,) = run(Op.CAST, [(i, [3, -70000])], [tensor(T.TENSOR_FLOAT16, [2])])
    assert h[0] == 3 and np.isneginf(h[1])


def test_cast_identity_only_types_and_shapes() -> None:
    b = tensor(T.TENSOR_BOOL8, [2])
    (y,) = run(Op.CAST, [(b, [True, False])], [b])
    assert y.tolist() == [True, False]
    assert validate(Op.CAST, [(b, None)], [b]) == HalVersion.V1_3
    with pytest.raises(InvalidArgument):
        validate(Op.CAST, [(b, None)], [tensor(T.TENSOR_INT32, [2])])
    f = tensor(T.TENSOR_FLOAT32, [2, 3])
    with pytest.raises(InvalidArgument):
        validate(Op.CAST, [(f, None)], [tensor(T.TENSOR_INT32, [3, 2])])
    with pytest.raises(InvalidArgument):
        validate(Op.CAST, [(f, None), (f, None)], [tensor(T.TENSOR_INT32, [2, 3])])

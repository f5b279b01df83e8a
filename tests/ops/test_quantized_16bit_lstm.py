"""QUANTIZED_16BIT_LSTM: the reference unit test's goldens and rejected quantization."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Operand
from tests.ops.elementwise_runner import T, run, tensor, validate

Pair = tuple[Operand, object]


# QUANTIZED_16BIT_LSTM: the reference unit test's TFLite goldens (3 steps, 2 batches).
_Q16_W_IN = (
    [146, 250, 235, 171, 10, 218, 171, 108],
    [24, 50, 132, 179, 158, 110, 3, 169],
    [133, 34, 29, 49, 206, 109, 54, 183],
    [195, 187, 11, 99, 109, 10, 218, 48],
)


_Q16_W_REC = (
    [254, 206, 77, 168, 71, 20, 215, 6, 223, 7, 118, 225, 59, 130, 174, 26],
    [137, 240, 103, 52, 68, 51, 237, 112, 0, 220, 89, 23, 69, 4, 207, 253],
    [172, 60, 205, 65, 14, 0, 140, 168, 240, 223, 133, 56, 142, 64, 246, 216],
    [106, 214, 67, 23, 59, 158, 45, 3, 119, 132, 49, 205, 129, 218, 11, 98],
)


_Q16_BIAS = (
    [-7876, 13488, -726, 32839],
    [9206, -46884, -11693, -38724],
    [39481, 48624, 48976, -21419],
    [-58999, -17050, -41852, -40538],
)


_Q16_INPUT = ([[154, 166], [100, 200]], [[166, 179], [50, 150]], [[141, 141], [111, 222]])


_Q16_GOLDEN = (
    [[136, 150, 140, 115], [135, 152, 138, 112]],
    [[140, 151, 146, 112], [136, 156, 142, 112]],
    [[139, 153, 146, 114], [141, 154, 146, 108]],
)


def q16_inputs(x: object, prev_c: object, prev_out: object, weights_scale: float) -> list[Pair]:
    q8 = T.TENSOR_QUANT8_ASYMM
    bias_scale = weights_scale / 128
    ins: list[Pair] = [(tensor(q8, [2, 2], 1 / 128, 128), x)]
    ins += [(tensor(q8, [4, 2], weights_scale, 100), w) for w in _Q16_W_IN]
    ins += [(tensor(q8, [4, 4], weights_scale, 100), w) for w in _Q16_W_REC]
    ins += [(tensor(T.TENSOR_INT32, [4], bias_scale, 0), b) for b in _Q16_BIAS]
    ins += [(tensor(T.TENSOR_QUANT16_SYMM, [2, 4], 1 / 2048, 0), prev_c), (tensor(q8, [2, 4], 1 / 128, 128), prev_out)]
    return ins


Q16_OUTS: Sequence[Operand] = (
    tensor(T.TENSOR_QUANT16_SYMM, [2, 4], 1 / 2048, 0),
    tensor(T.TENSOR_QUANT8_ASYMM, [2, 4], 1 / 128, 128),
)


def test_quantized_16bit_lstm_goldens() -> None:
    weights_scale = float(np.float32(0.00408021))
    prev_out: object = np.full((2, 4), 128)
    prev_c: object = np.zeros((2, 4))
    for x, golden in zip(_Q16_INPUT, _Q16_GOLDEN):
        ins = q16_inputs(x, prev_c, prev_out, weights_scale)
        assert validate(Op.QUANTIZED_16BIT_LSTM, ins, Q16_OUTS) == HalVersion.V1_2
        prev_c, prev_out = run(Op.QUANTIZED_16BIT_LSTM, ins, Q16_OUTS)
        np.testing.assert_array_equal(prev_out, golden)


def test_quantized_16bit_lstm_rejects_wrong_input_quantization() -> None:
    ins = q16_inputs(np.zeros((2, 2)), np.zeros((2, 4)), np.zeros((2, 4)), 0.004)
    ins[0] = (tensor(T.TENSOR_QUANT8_ASYMM, [2, 2], 0.5, 128), np.zeros((2, 2)))
    with pytest.raises(InvalidArgument):
        validate(Op.QUANTIZED_16BIT_LSTM, ins, Q16_OUTS)

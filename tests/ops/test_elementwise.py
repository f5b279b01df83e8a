"""ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, POW, PRELU: validation and hand-computed results."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import GeneralFailure, InvalidArgument
from nnhal.core.types import Operand
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

NONE, RELU, RELU6 = 0, 1, 3


def act(value: int) -> tuple[Operand, object]:
    return scalar(T.INT32), value


def test_add_quant8_fixed_point() -> None:
    a = tensor(T.TENSOR_QUANT8_ASYMM, [2], 0.5, 0)
    out = tensor(T.TENSOR_QUANT8_ASYMM, [2], 1.0, 0)
    (y,) = run(Op.ADD, [(a, [2, 4]), (a, [6, 8]), act(NONE)], [out])
    assert y.tolist() == [4, 6]


def test_sub_quant8_signed_different_scales() -> None:
    a = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [2], 1.0, -10)
    b = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [2], 2.0, 0)
    out = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [2], 1.0, 5)
    # real: (10 - 6, 30 + 8) = (4, 38)
    (y,) = run(Op.SUB, [(a, [0, 20]), (b, [3, -4]), act(NONE)], [out])
    assert y.dtype == np.int8 and y.tolist() == [9, 43]


def test_add_int32_broadcast_and_versions() -> None:
    a = tensor(T.TENSOR_INT32, [2, 2])
    b = tensor(T.TENSOR_INT32, [2])
    out = tensor(T.TENSOR_INT32, [2, 2])
    (y,) = run(Op.ADD, [(a, [1, 2, 3, 4]), (b, [10, 20]), act(NONE)], [out])
    assert y.tolist() == [[11, 22], [13, 24]]
    assert validate(Op.ADD, [(a, None), (b, None), act(NONE)], [out]) == HalVersion.V1_3
    q8 = tensor(T.TENSOR_QUANT8_ASYMM, [2], 1.0, 0)
    assert validate(Op.SUB, [(q8, None), (q8, None), act(NONE)], [q8]) == HalVersion.V1_2
    assert validate(Op.ADD, [(q8, None), (q8, None), act(NONE)], [q8]) == HalVersion.V1_0


def test_int32_requires_no_activation() -> None:
    a = tensor(T.TENSOR_INT32, [2])
    with pytest.raises(InvalidArgument):
        validate(Op.MUL, [(a, None), (a, None), act(RELU)], [a])


def test_div_int32_floor_division() -> None:
    a = tensor(T.TENSOR_INT32, [5])
    (y,) = run(Op.DIV, [(a, [5, -5, 7, 3, -7]), (a, [2, 2, 0, -2, -2]), act(NONE)], [a])
    assert y.tolist() == [2, -3, 0, -2, 3]


def test_div_float_with_relu6() -> None:
    a = tensor(T.TENSOR_FLOAT32, [3])
    (y,) = run(Op.DIV, [(a, [1, -4, 30]), (a, [2, 2, 2]), act(RELU6)], [a])
    assert y.tolist() == [0.5, 0.0, 6.0]


def test_div_rejects_quant8() -> None:
    q8 = tensor(T.TENSOR_QUANT8_ASYMM, [2], 1.0, 0)
    with pytest.raises(InvalidArgument):
        validate(Op.DIV, [(q8, None), (q8, None), act(NONE)], [q8])


def test_mul_quant8() -> None:
    a = tensor(T.TENSOR_QUANT8_ASYMM, [2], 0.5, 128)
    b = tensor(T.TENSOR_QUANT8_ASYMM, [1], 0.25, 0)
    out = tensor(T.TENSOR_QUANT8_ASYMM, [2], 0.25, 100)
    (y,) = run(Op.MUL, [(a, [132, 120]), (b, [8]), act(NONE)], [out])
    assert y.tolist() == [116, 68]


def test_mul_quant8_output_scale_constraint() -> None:
    a = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [2], 0.5, 0)
    b = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [2], 0.25, 0)
    out = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [2], 0.1, 0)
    with pytest.raises(InvalidArgument):
        validate(Op.MUL, [(a, None), (b, None), act(NONE)], [out])


def test_arith_counts_and_rank() -> None:
    f = tensor(T.TENSOR_FLOAT32, [2])
    with pytest.raises(InvalidArgument):
        validate(Op.ADD, [(f, None), (f, None)], [f])
    f5 = tensor(T.TENSOR_FLOAT32, [1, 1, 1, 1, 2])
    with pytest.raises(InvalidArgument):
        validate(Op.ADD, [(f5, None), (f5, None), act(NONE)], [f5])


def test_zero_sized_and_mismatched_broadcast() -> None:
    a = tensor(T.TENSOR_FLOAT32, [0, 2])
    b = tensor(T.TENSOR_FLOAT32, [1, 2])
    (y,) = run(Op.ADD, [(a, np.zeros((0, 2))), (b, [1, 2]), act(NONE)], [tensor(T.TENSOR_FLOAT32, [0, 2])])
    assert y.shape == (0, 2)
    c = tensor(T.TENSOR_FLOAT32, [2, 3])
    d = tensor(T.TENSOR_FLOAT32, [2])
    with pytest.raises(GeneralFailure):
        run(Op.ADD, [(c, np.zeros(6)), (d, [1, 2]), act(NONE)], [tensor(T.TENSOR_FLOAT32)])


def test_add_float16_dynamic_output() -> None:
    a = tensor(T.TENSOR_FLOAT16, [2])
    (y,) = run(Op.ADD, [(a, [1.5, 60000]), (a, [0.25, 60000]), act(NONE)], [tensor(T.TENSOR_FLOAT16)])
    assert y.dtype == np.float16 and y[0] == 1.75 and np.isinf(y[1])


def test_maximum_minimum_quant8_requantize() -> None:
    a = tensor(T.TENSOR_QUANT8_ASYMM, [2], 1.0, 0)
    b = tensor(T.TENSOR_QUANT8_ASYMM, [2], 0.5, 0)
    out = tensor(T.TENSOR_QUANT8_ASYMM, [2], 0.5, 0)
    (hi,) = run(Op.MAXIMUM, [(a, [10, 2]), (b, [10, 10])], [out])
    (lo,) = run(Op.MINIMUM, [(a, [10, 2]), (b, [10, 10])], [out])
    assert hi.tolist() == [20, 10] and lo.tolist() == [10, 4]


def test_maximum_type_mismatch() -> None:
    with pytest.raises(InvalidArgument):
        validate(
            Op.MAXIMUM,
            [(tensor(T.TENSOR_FLOAT32, [2]), None), (tensor(T.TENSOR_INT32, [2]), None)],
            [tensor(T.TENSOR_FLOAT32, [2])],
        )


def test_pow_float16_broadcast() -> None:
    base = tensor(T.TENSOR_FLOAT16, [2])
    exponent = tensor(T.TENSOR_FLOAT16, [2, 1])
    (y,) = run(Op.POW, [(base, [2, 3]), (exponent, [2, 0.5])], [tensor(T.TENSOR_FLOAT16, [2, 2])])
    np.testing.assert_allclose(y.astype(np.float32), [[4, 9], [np.sqrt(2), np.sqrt(3)]], rtol=1e-3)


def test_pow_rejects_int32() -> None:
    i = tensor(T.TENSOR_INT32, [2])
    with pytest.raises(InvalidArgument):
        validate(Op.POW, [(i, None), (i, None)], [i])


def test_prelu_float_and_quant8() -> None:
    f = tensor(T.TENSOR_FLOAT32, [2])
    (y,) = run(Op.PRELU, [(f, [-2, 3]), (f, [0.5, 0.5])], [f])
    assert y.tolist() == [-1.0, 3.0]
    x = tensor(T.TENSOR_QUANT8_ASYMM, [2], 1.0, 128)
    alpha = tensor(T.TENSOR_QUANT8_ASYMM, [1], 0.5, 0)
    (q,) = run(Op.PRELU, [(x, [120, 130]), (alpha, [1])], [tensor(T.TENSOR_QUANT8_ASYMM, [2], 1.0, 128)])
    assert q.tolist() == [124, 130]


def test_prelu_rejects_int32_and_wrong_count() -> None:
    i = tensor(T.TENSOR_INT32, [2])
    with pytest.raises(InvalidArgument):
        validate(Op.PRELU, [(i, None), (i, None)], [i])
    f = tensor(T.TENSOR_FLOAT32, [2])
    with pytest.raises(InvalidArgument):
        validate(Op.PRELU, [(f, None)], [f])

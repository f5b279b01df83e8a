"""LOGISTIC, TANH, ELU, HARD_SWISH: validation and hand-computed results."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import InvalidArgument
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate


def test_logistic_quant8_fixed_output() -> None:
    x = tensor(T.TENSOR_QUANT8_ASYMM, [4], 0.5, 128)
    out = tensor(T.TENSOR_QUANT8_ASYMM, [4], 1.0 / 256, 0)
    (y,) = run(Op.LOGISTIC, [(x, [128, 130, 255, 0])], [out])
    # sigmoid(0) * 256 = 128; sigmoid(1) * 256 = 187.16; saturated ends.
    assert y.tolist() == [128, 187, 255, 0]


def test_logistic_rejects_wrong_output_quantization_and_rank() -> None:
    x = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [4], 0.5, 0)
    with pytest.raises(InvalidArgument):
        validate(Op.LOGISTIC, [(x, None)], [tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [4], 1.0 / 256, 0)])
    f5 = tensor(T.TENSOR_FLOAT32, [1, 1, 1, 1, 1])
    with pytest.raises(InvalidArgument):
        validate(Op.LOGISTIC, [(f5, None)], [f5])


def test_tanh_quant8_signed() -> None:
    x = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [4], 0.5, 0)
    out = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [4], 1.0 / 128, 0)
    (y,) = run(Op.TANH, [(x, [0, 2, -2, 127])], [out])
    assert y.tolist() == [0, 97, -97, 127]


def test_tanh_types_and_versions() -> None:
    q8 = tensor(T.TENSOR_QUANT8_ASYMM, [2], 0.5, 128)
    assert validate(Op.TANH, [(q8, None)], [tensor(T.TENSOR_QUANT8_ASYMM, [2], 1.0 / 128, 128)]) == HalVersion.V1_2
    q16 = tensor(T.TENSOR_QUANT16_SYMM, [2], 1.0 / 4096, 0)
    with pytest.raises(InvalidArgument):
        validate(Op.TANH, [(q16, None)], [q16])


def test_float_logistic_tanh() -> None:
    f = tensor(T.TENSOR_FLOAT16, [3])
    (s,) = run(Op.LOGISTIC, [(f, [0, 1, -100])], [f])
    (t,) = run(Op.TANH, [(f, [0, 1, -100])], [f])
    np.testing.assert_allclose(s.astype(np.float32), [0.5, 1 / (1 + math.exp(-1)), 0], atol=1e-3)
    np.testing.assert_allclose(t.astype(np.float32), [0, math.tanh(1), -1], atol=1e-3)


def test_elu_float32_and_alpha_type() -> None:
    x = tensor(T.TENSOR_FLOAT32, [2])
    (y,) = run(Op.ELU, [(x, [-1, 2]), (scalar(T.FLOAT32), 0.5)], [x])
    np.testing.assert_allclose(y, [0.5 * (math.exp(-1) - 1), 2], rtol=1e-6)
    h = tensor(T.TENSOR_FLOAT16, [2])
    with pytest.raises(InvalidArgument):
        validate(Op.ELU, [(h, None), (scalar(T.FLOAT32), 0.5)], [h])


def test_hard_swish_quant8_tracks_the_real_function() -> None:
    in_scale, in_zp, out_scale, out_zp = 0.05, 128, 0.03, 10
    codes = np.arange(256)
    x = tensor(T.TENSOR_QUANT8_ASYMM, [256], in_scale, in_zp)
    out = tensor(T.TENSOR_QUANT8_ASYMM, [256], out_scale, out_zp)
    (y,) = run(Op.HARD_SWISH, [(x, codes)], [out])
    real = (codes - in_zp) * in_scale
    expected = np.clip(np.round(real * np.clip(real + 3, 0, 6) / 6 / out_scale) + out_zp, 0, 255)
    assert np.max(np.abs(y.astype(np.int64) - expected)) <= 1


def test_hard_swish_float_and_invalid_type() -> None:
    f = tensor(T.TENSOR_FLOAT32, [4])
    (y,) = run(Op.HARD_SWISH, [(f, [-4, -1, 1, 4])], [f])
    np.testing.assert_allclose(y, [0, -1 / 3, 2 / 3, 4], rtol=1e-6)
    i = tensor(T.TENSOR_INT32, [2])
    with pytest.raises(InvalidArgument):
        validate(Op.HARD_SWISH, [(i, None)], [i])

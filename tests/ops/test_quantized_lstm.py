"""QUANTIZED_LSTM: rejected inputs and results against a float reference."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import OperandLifeTime, OperationType as Op
from nnhal.core.errors import GeneralFailure, InvalidArgument
from nnhal.core.types import Operand
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F32 = T.TENSOR_FLOAT32


Pair = tuple[Operand, object]


def omitted(t: T = F32) -> Pair:
    return Operand(type=t, lifetime=OperandLifeTime.NO_VALUE), None


def test_quantized_lstm_rejects_float_input() -> None:
    ins: list[Pair] = [(tensor(F32, [1, 2]), np.zeros((1, 2)))] + [omitted(T.TENSOR_QUANT8_SYMM)] * 31
    outs = [
        tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [1, 2]),
        tensor(T.TENSOR_QUANT16_SYMM, [1, 2]),
        tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [1, 2]),
    ]
    with pytest.raises(InvalidArgument):
        validate(Op.QUANTIZED_LSTM, ins, outs)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1 / (1 + np.exp(-x)))


def test_quantized_lstm_step_tracks_the_float_cell() -> None:
    """No CIFG, peephole, layer norm or projection: gates on Q3.12, cell state on 2^-11."""
    rng = np.random.default_rng(0)
    n_batch, n_input, n_units = 2, 3, 4
    s_x, z_x, s_h, s_w = 1 / 64, 5, 1 / 128, 1 / 32
    x = rng.integers(-100, 100, (n_batch, n_input)).astype(np.int8)
    h = rng.integers(-100, 100, (n_batch, n_units)).astype(np.int8)
    c = rng.integers(-2000, 2000, (n_batch, n_units)).astype(np.int16)
    w_x = [rng.integers(-40, 40, (n_units, n_input)).astype(np.int8) for _ in range(4)]
    w_h = [rng.integers(-40, 40, (n_units, n_units)).astype(np.int8) for _ in range(4)]
    bias = [rng.integers(-300, 300, n_units).astype(np.int32) for _ in range(4)]

    q8s, q8, q16 = T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM
    f32 = scalar(T.FLOAT32)
    ins: list[Pair] = [(tensor(q8s, x.shape, s_x, z_x), x)]
    ins += [(tensor(q8, w.shape, s_w, 0), w) for w in w_x]
    ins += [(tensor(q8, w.shape, s_w, 0), w) for w in w_h]
    ins += [omitted(q16)] * 3  # no peephole
    ins += [(tensor(T.TENSOR_INT32, b.shape, s_w * s_x, 0), b) for b in bias]
    ins += [omitted(q8), omitted(T.TENSOR_INT32)]  # no projection
    ins += [(tensor(q8s, h.shape, s_h, 0), h), (tensor(q16, c.shape, 2.0**-11, 0), c)]
    ins += [omitted(q16)] * 4  # no layer norm
    ins += [(f32, 0.0), (f32, 0.0)]  # no clipping
    ins += [(f32, 2.0**-12)] * 4  # Q3.12 gate inputs
    ins += [(scalar(T.INT32), 0), (f32, s_h)]
    outs = [tensor(q8s, h.shape, s_h, 0), tensor(q16, c.shape, 2.0**-11, 0), tensor(q8s, h.shape, s_h, 0)]
    out_state, cell, out = run(Op.QUANTIZED_LSTM, ins, outs)

    xr = (x.astype(np.float64) - z_x) * s_x
    hr = h.astype(np.float64) * s_h
    pre = [xr @ (wx * s_w).T + hr @ (wh * s_w).T + b * s_w * s_x for wx, wh, b in zip(w_x, w_h, bias)]
    i_gate, f_gate, g_cell, o_gate = _sigmoid(pre[0]), _sigmoid(pre[1]), np.tanh(pre[2]), _sigmoid(pre[3])
    c_new = f_gate * c * 2.0**-11 + i_gate * g_cell
    h_new = o_gate * np.tanh(c_new)
    assert np.abs(cell * 2.0**-11 - c_new).max() < 2e-3
    assert np.abs(out.astype(np.int64) - np.round(h_new / s_h)).max() <= 1
    np.testing.assert_array_equal(out_state, out)


def _case(inter_scale: float) -> tuple[list[Pair], list[Operand]]:
    """A valid one-step QLSTM (no CIFG, peephole, layer norm or projection) with the given gate scales."""
    n_batch, n_input, n_units = 1, 2, 2
    q8s, q8, q16 = T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM, T.TENSOR_QUANT16_SYMM
    f32 = scalar(T.FLOAT32)
    w = np.ones((n_units, n_input), np.int8)
    wh = np.ones((n_units, n_units), np.int8)
    ins: list[Pair] = [(tensor(q8s, [n_batch, n_input], 1 / 64, 0), np.ones((n_batch, n_input)))]
    ins += [(tensor(q8, w.shape, 1 / 32, 0), w)] * 4 + [(tensor(q8, wh.shape, 1 / 32, 0), wh)] * 4
    ins += [omitted(q16)] * 3
    ins += [(tensor(T.TENSOR_INT32, [n_units], 1 / 2048, 0), np.zeros(n_units))] * 4
    ins += [omitted(q8), omitted(T.TENSOR_INT32)]
    ins += [(tensor(q8s, [n_batch, n_units], 1 / 128, 0), np.zeros((n_batch, n_units)))]
    ins += [(tensor(q16, [n_batch, n_units], 2.0**-11, 0), np.zeros((n_batch, n_units)))]
    ins += [omitted(q16)] * 4 + [(f32, 0.0), (f32, 0.0)] + [(f32, inter_scale)] * 4
    ins += [(scalar(T.INT32), 0), (f32, 1 / 128)]
    outs = [tensor(q8s, [n_batch, n_units], 1 / 128, 0), tensor(q16, [n_batch, n_units], 2.0**-11, 0)]
    return ins, [*outs, tensor(q8s, [n_batch, n_units], 1 / 128, 0)]


@pytest.mark.parametrize("scale", [0.0, -1.0, float("inf"), float("nan")])
def test_quantized_lstm_rejects_invalid_constant_scales_at_validation(scale: float) -> None:
    ins, outs = _case(scale)
    with pytest.raises(InvalidArgument, match="must be finite and > 0"):
        validate(Op.QUANTIZED_LSTM, ins, outs)


def test_quantized_lstm_with_an_extreme_scale_fails_with_a_status_not_an_overflow() -> None:
    """Was OverflowError in multiply_by_quantized_multiplier ("internal error"): an effective
    scale needing a left shift past 31 bits is the kernel's documented GENERAL_FAILURE."""
    assert run(Op.QUANTIZED_LSTM, *_case(2.0**-12))  # the same case runs with a sane scale
    with pytest.raises(GeneralFailure, match="too large"):
        run(Op.QUANTIZED_LSTM, *_case(1e-30))

"""LSTM family: validation failures and results against hand-written formulas / goldens."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperandLifeTime
from nnhal.core.enums import OperationType as Op
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Operand
from nnhal.server.executor.ops._fixed_point_math import fx_logistic, fx_tanh
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F32 = T.TENSOR_FLOAT32
Pair = tuple[Operand, object]


def omitted(t: T = F32) -> Pair:
    return Operand(type=t, lifetime=OperandLifeTime.NO_VALUE), None


def sig(x: np.ndarray) -> np.ndarray:
    return np.asarray(1 / (1 + np.exp(-x)))


def reference_step(
    x: np.ndarray, h: np.ndarray, c: np.ndarray, w: dict[str, np.ndarray], cifg: bool, peephole: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The types.hal LSTM equations in float64 (tanh activation, no projection/clipping)."""

    def pre(g: str) -> np.ndarray:
        return np.asarray(x @ w["x" + g].T + h @ w["h" + g].T + w["b" + g])

    f = sig(pre("f") + (c * w["pf"] if peephole else 0))
    i = 1 - f if cifg else sig(pre("i") + (c * w["pi"] if peephole else 0))
    c_new = f * c + i * np.tanh(pre("c"))
    o = sig(pre("o") + (c_new * w["po"] if peephole else 0))
    return o * np.tanh(c_new), c_new


def random_weights(rng: np.random.Generator, n_in: int, n_units: int) -> dict[str, np.ndarray]:
    w: dict[str, np.ndarray] = {}
    for g in "ifco":
        w["x" + g] = rng.uniform(-0.5, 0.5, (n_units, n_in))
        w["h" + g] = rng.uniform(-0.5, 0.5, (n_units, n_units))
        w["b" + g] = rng.uniform(-0.5, 0.5, n_units)
        w["p" + g] = rng.uniform(-0.5, 0.5, n_units)
    return w


def cell_inputs(w: dict[str, np.ndarray], t: T, n_in: int, n_units: int, cifg: bool, peephole: bool) -> list[Pair]:
    """Inputs 1..17 of an LSTM (weights, peepholes, biases, no projection)."""

    def ten(a: np.ndarray) -> Pair:
        return tensor(t, a.shape), a

    ins: list[Pair] = []
    ins += [omitted(t) if (g == "i" and cifg) else ten(w["x" + g]) for g in "ifco"]
    ins += [omitted(t) if (g == "i" and cifg) else ten(w["h" + g]) for g in "ifco"]
    ins += [ten(w["p" + g]) if peephole and not (g == "i" and cifg) else omitted(t) for g in "ifo"]
    ins += [omitted(t) if (g == "i" and cifg) else ten(w["b" + g]) for g in "ifco"]
    ins += [omitted(t), omitted(t)]
    return ins


def lstm_case(
    rng: np.random.Generator, t: T, cifg: bool, peephole: bool, batch: int = 2, n_in: int = 3, units: int = 2
) -> tuple[list[Pair], list[Operand], dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    w = random_weights(rng, n_in, units)
    x = rng.uniform(-1, 1, (batch, n_in))
    h = rng.uniform(-1, 1, (batch, units))
    c = rng.uniform(-1, 1, (batch, units))
    clip_t = T.FLOAT32 if t == F32 else T.FLOAT16
    ins = [(tensor(t, x.shape), x), *cell_inputs(w, t, n_in, units, cifg, peephole)]
    ins += [(tensor(t, h.shape), h), (tensor(t, c.shape), c)]
    ins += [(scalar(T.INT32), 4), (scalar(clip_t), 0.0), (scalar(clip_t), 0.0)]
    gates = 3 if cifg else 4
    outs = [tensor(t, [batch, gates * units]), tensor(t, [batch, units]), tensor(t, [batch, units])]
    outs.append(tensor(t, [batch, units]))
    return ins, outs, w, x, h, c


def test_lstm_rejects_wrong_input_count() -> None:
    ins, outs, *_ = lstm_case(np.random.default_rng(0), F32, False, False)
    with pytest.raises(InvalidArgument):
        validate(Op.LSTM, ins[:22], outs)


def test_lstm_rejects_integer_input() -> None:
    ins, outs, *_ = lstm_case(np.random.default_rng(0), F32, False, False)
    ins[0] = (tensor(T.TENSOR_INT32, [2, 3]), np.zeros((2, 3)))
    with pytest.raises(InvalidArgument):
        validate(Op.LSTM, ins, outs)


def test_lstm_rejects_half_cifg() -> None:
    ins, outs, *_ = lstm_case(np.random.default_rng(0), F32, False, False)
    ins[5] = omitted()  # recurrent-to-input without input-to-input
    with pytest.raises(InvalidArgument):
        validate(Op.LSTM, ins, outs)


def test_lstm_matches_equations() -> None:
    ins, outs, w, x, h, c = lstm_case(np.random.default_rng(1), F32, False, False)
    assert validate(Op.LSTM, ins, outs) == HalVersion.V1_0
    scratch, h_out, c_out, out = run(Op.LSTM, ins, outs)
    h_ref, c_ref = reference_step(x, h, c, w, cifg=False, peephole=False)
    np.testing.assert_allclose(out, h_ref, atol=1e-5)
    np.testing.assert_allclose(h_out, h_ref, atol=1e-5)
    np.testing.assert_allclose(c_out, c_ref, atol=1e-5)
    assert scratch.shape == (2, 8)


def test_lstm_cifg_peephole_float16() -> None:
    ins, outs, w, x, h, c = lstm_case(np.random.default_rng(2), T.TENSOR_FLOAT16, True, True)
    assert validate(Op.LSTM, ins, outs) == HalVersion.V1_2
    _, _, c_out, out = run(Op.LSTM, ins, outs)
    assert out.dtype == np.float16
    h_ref, c_ref = reference_step(x, h, c, w, cifg=True, peephole=True)
    np.testing.assert_allclose(out.astype(np.float64), h_ref, atol=5e-3)
    np.testing.assert_allclose(c_out.astype(np.float64), c_ref, atol=5e-3)


def uni_case(
    w: dict[str, np.ndarray], xs: np.ndarray, h: np.ndarray, c: np.ndarray, time_major: bool, outputs: int
) -> tuple[list[Pair], list[Operand]]:
    units = h.shape[1]
    ins = [(tensor(F32, xs.shape), xs), *cell_inputs(w, F32, xs.shape[2], units, False, True)]
    ins += [(tensor(F32, h.shape), h), (tensor(F32, c.shape), c)]
    ins += [(scalar(T.INT32), 4), (scalar(T.FLOAT32), 0.0), (scalar(T.FLOAT32), 0.0), (scalar(T.BOOL), time_major)]
    ins += [omitted()] * 4
    out_shape = [*xs.shape[:2], units]
    outs = [tensor(F32, out_shape)] + [tensor(F32, h.shape)] * (outputs - 1)
    return ins, outs


def test_unidirectional_lstm_batch_major_with_state() -> None:
    rng = np.random.default_rng(3)
    w = random_weights(rng, 3, 2)
    xs = rng.uniform(-1, 1, (2, 4, 3))  # [batch, time, input]
    h0 = np.zeros((2, 2))
    c0 = np.zeros((2, 2))
    ins, outs = uni_case(w, xs, h0, c0, time_major=False, outputs=3)
    assert validate(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, outs) == HalVersion.V1_3
    out, h_last, c_last = run(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, ins, outs)
    h, c = h0, c0
    for t in range(4):
        h, c = reference_step(xs[:, t], h, c, w, cifg=False, peephole=True)
        np.testing.assert_allclose(out[:, t], h, atol=1e-5)
    np.testing.assert_allclose(h_last, h, atol=1e-5)
    np.testing.assert_allclose(c_last, c, atol=1e-5)


def bidi_case(
    fw: dict[str, np.ndarray], bw: dict[str, np.ndarray], xs: np.ndarray, units: int, merge: bool, outputs: int
) -> tuple[list[Pair], list[Operand]]:
    n_in = xs.shape[2]
    batch = xs.shape[1]
    zeros = np.zeros((batch, units))
    ins: list[Pair] = [(tensor(F32, xs.shape), xs)]
    ins += cell_inputs(fw, F32, n_in, units, False, False)
    ins += cell_inputs(bw, F32, n_in, units, False, False)
    ins += [(tensor(F32, zeros.shape), zeros)] * 4
    ins += [omitted()] * 9  # aux input and aux weights
    ins += [(scalar(T.INT32), 4), (scalar(T.FLOAT32), 0.0), (scalar(T.FLOAT32), 0.0)]
    ins += [(scalar(T.BOOL), merge), (scalar(T.BOOL), True)]
    ins += [omitted()] * 8
    assert len(ins) == 61
    n_time = xs.shape[0]
    outs = [tensor(F32, [n_time, batch, 2 * units if merge else units])]
    outs += [tensor(F32, [n_time, batch, units])] * (outputs - 1)
    return ins, outs


def test_bidirectional_lstm_merged_outputs() -> None:
    rng = np.random.default_rng(4)
    fw = random_weights(rng, 3, 2)
    bw = random_weights(rng, 3, 2)
    xs = rng.uniform(-1, 1, (3, 2, 3))  # time major
    ins, outs = bidi_case(fw, bw, xs, 2, merge=True, outputs=1)
    assert validate(Op.BIDIRECTIONAL_SEQUENCE_LSTM, ins, outs) == HalVersion.V1_2
    (merged,) = run(Op.BIDIRECTIONAL_SEQUENCE_LSTM, ins, outs)
    h = c = np.zeros((2, 2))
    for t in range(3):
        h, c = reference_step(xs[t], h, c, fw, cifg=False, peephole=False)
        np.testing.assert_allclose(merged[t, :, :2], h, atol=1e-5)
    h = c = np.zeros((2, 2))
    for t in reversed(range(3)):
        h, c = reference_step(xs[t], h, c, bw, cifg=False, peephole=False)
        np.testing.assert_allclose(merged[t, :, 2:], h, atol=1e-5)


def test_bidirectional_lstm_rejects_outputs_not_matching_merge() -> None:
    rng = np.random.default_rng(5)
    fw = random_weights(rng, 3, 2)
    ins, outs = bidi_case(fw, fw, rng.uniform(-1, 1, (3, 2, 3)), 2, merge=True, outputs=2)
    with pytest.raises(InvalidArgument):
        validate(Op.BIDIRECTIONAL_SEQUENCE_LSTM, ins, outs)


def test_quantized_lstm_rejects_float_input() -> None:
    ins: list[Pair] = [(tensor(F32, [1, 2]), np.zeros((1, 2)))] + [omitted(T.TENSOR_QUANT8_SYMM)] * 31
    outs = [
        tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [1, 2]),
        tensor(T.TENSOR_QUANT16_SYMM, [1, 2]),
        tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [1, 2]),
    ]
    with pytest.raises(InvalidArgument):
        validate(Op.QUANTIZED_LSTM, ins, outs)


def test_fixed_point_logistic_and_tanh_track_float() -> None:
    raw = np.arange(-32768, 32768, 13)
    real = raw / 2.0**12  # three integer bits
    assert np.abs(fx_logistic(raw, 3) / 32768 - sig(real)).max() < 5e-4
    assert np.abs(fx_tanh(raw, 3) / 32768 - np.tanh(real)).max() < 5e-4
    assert fx_logistic(np.array([0]), 3)[0] == 1 << 14


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

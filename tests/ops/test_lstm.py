"""LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_LSTM: validation failures and results
against hand-written formulas."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperandLifeTime, OperationType as Op
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Operand
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

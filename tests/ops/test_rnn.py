"""RNN family: validation failures and hand-computed results."""

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


def ten(a: np.ndarray, t: T = F32) -> Pair:
    return tensor(t, a.shape), a


def rnn_inputs(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray, h: np.ndarray, t: T = F32) -> list[Pair]:
    return [ten(x, t), ten(w, t), ten(r, t), ten(b, t), ten(h, t), (scalar(T.INT32), 1)]


def test_rnn_hand_computed() -> None:
    x = np.array([[1.0, 2.0]])
    w = np.array([[0.5, -1.0], [1.0, 1.0]])
    r = np.array([[1.0, 0.0], [0.0, 2.0]])
    b = np.array([0.5, -4.0])
    h = np.array([[1.0, 1.0]])
    outs = [tensor(F32, [1, 2]), tensor(F32, [1, 2])]
    ins = rnn_inputs(x, w, r, b, h)
    assert validate(Op.RNN, ins, outs) == HalVersion.V1_0
    state, out = run(Op.RNN, ins, outs)
    # unit 0: 0.5 - 2 + 1 + 0.5 = 0 ; unit 1: 1 + 2 + 2 - 4 = 1 ; RELU
    np.testing.assert_allclose(out, [[0.0, 1.0]])
    np.testing.assert_allclose(state, out)


def test_rnn_float16_version_and_dtype() -> None:
    x = np.array([[1.0, -2.0]])
    w = np.eye(2)
    outs = [tensor(T.TENSOR_FLOAT16, [1, 2]), tensor(T.TENSOR_FLOAT16, [1, 2])]
    ins = rnn_inputs(x, w, np.zeros((2, 2)), np.zeros(2), np.zeros((1, 2)), T.TENSOR_FLOAT16)
    assert validate(Op.RNN, ins, outs) == HalVersion.V1_2
    _, out = run(Op.RNN, ins, outs)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, [[1.0, 0.0]])


def test_rnn_rejects_missing_activation() -> None:
    x = np.zeros((1, 2))
    ins = rnn_inputs(x, np.eye(2), np.eye(2), np.zeros(2), np.zeros((1, 2)))[:5]
    with pytest.raises(InvalidArgument):
        validate(Op.RNN, ins, [tensor(F32, [1, 2]), tensor(F32, [1, 2])])


def reference_sequence(xs: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray, h: np.ndarray) -> np.ndarray:
    """Time-major reference with tanh activation: [T, B, U]."""
    out = []
    for x in xs:
        h = np.tanh(x @ w.T + h @ r.T + b)
        out.append(h)
    return np.stack(out)


def test_unidirectional_rnn_batch_major_with_state() -> None:
    rng = np.random.default_rng(0)
    xs = rng.uniform(-1, 1, (2, 3, 4))  # [batch, time, input]
    w, r, b = rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (3, 3)), rng.uniform(-1, 1, 3)
    h = rng.uniform(-1, 1, (2, 3))
    ins = [ten(xs), ten(w), ten(r), ten(b), ten(h), (scalar(T.INT32), 4), (scalar(T.INT32), 0)]
    outs = [tensor(F32, [2, 3, 3]), tensor(F32, [2, 3])]
    assert validate(Op.UNIDIRECTIONAL_SEQUENCE_RNN, ins, outs) == HalVersion.V1_3
    out, state = run(Op.UNIDIRECTIONAL_SEQUENCE_RNN, ins, outs)
    ref = reference_sequence(xs.transpose(1, 0, 2), w, r, b, h).transpose(1, 0, 2)
    np.testing.assert_allclose(out, ref, atol=1e-5)
    np.testing.assert_allclose(state, ref[:, -1], atol=1e-5)


def test_unidirectional_rnn_rejects_bool_time_major() -> None:
    xs = np.zeros((1, 1, 2))
    ins = [ten(xs), ten(np.eye(2)), ten(np.eye(2)), ten(np.zeros(2)), ten(np.zeros((1, 2)))]
    ins += [(scalar(T.INT32), 0), (scalar(T.BOOL), True)]
    with pytest.raises(InvalidArgument):
        validate(Op.UNIDIRECTIONAL_SEQUENCE_RNN, ins, [tensor(F32, [1, 1, 2])])


def test_bidirectional_rnn_merged_with_states() -> None:
    rng = np.random.default_rng(1)
    xs = rng.uniform(-1, 1, (3, 2, 4))  # time major
    fw = [rng.uniform(-1, 1, s) for s in ((3, 4), (3, 3), (3,), (2, 3))]
    bw = [rng.uniform(-1, 1, s) for s in ((2, 4), (2, 2), (2,), (2, 2))]
    ins = [ten(xs), *(ten(a) for a in fw), *(ten(a) for a in bw), omitted(), omitted(), omitted()]
    ins += [(scalar(T.INT32), 4), (scalar(T.BOOL), True), (scalar(T.BOOL), True)]
    outs = [tensor(F32, [3, 2, 5]), tensor(F32, [2, 3]), tensor(F32, [2, 2])]
    assert validate(Op.BIDIRECTIONAL_SEQUENCE_RNN, ins, outs) == HalVersion.V1_3
    merged, fw_state, bw_state = run(Op.BIDIRECTIONAL_SEQUENCE_RNN, ins, outs)
    fw_ref = reference_sequence(xs, *fw)
    bw_ref = reference_sequence(xs[::-1], *bw)[::-1]
    np.testing.assert_allclose(merged[:, :, :3], fw_ref, atol=1e-5)
    np.testing.assert_allclose(merged[:, :, 3:], bw_ref, atol=1e-5)
    np.testing.assert_allclose(fw_state, fw_ref[-1], atol=1e-5)
    np.testing.assert_allclose(bw_state, bw_ref[0], atol=1e-5)


def test_bidirectional_rnn_rejects_half_aux_weights() -> None:
    xs = np.zeros((1, 1, 2))
    cell = [ten(np.eye(2)), ten(np.eye(2)), ten(np.zeros(2)), ten(np.zeros((1, 2)))]
    ins = [ten(xs), *cell, *cell, ten(xs), ten(np.eye(2)), omitted()]
    ins += [(scalar(T.INT32), 0), (scalar(T.BOOL), True), (scalar(T.BOOL), False)]
    with pytest.raises(InvalidArgument):
        validate(Op.BIDIRECTIONAL_SEQUENCE_RNN, ins, [tensor(F32, [1, 1, 2]), tensor(F32, [1, 1, 2])])


def svdf_case(t: T, rank: int, bias: bool) -> tuple[list[Pair], list[Operand]]:
    x = np.array([[1.0, 2.0]])
    w_feature = np.array([[1.0, 0.0], [0.0, 1.0]])  # 2 filters
    w_time = np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])  # memory 3
    state = np.array([[10.0, 20.0, 30.0, 1.0, 2.0, 3.0]])  # [filter, memory] flattened
    units = 2 // rank
    ins = [ten(x, t), ten(w_feature, t), ten(w_time, t)]
    ins.append(ten(np.full(units, 0.5), t) if bias else omitted(t))
    ins += [ten(state, t), (scalar(T.INT32), rank), (scalar(T.INT32), 0)]
    outs = [tensor(t, [1, 6]), tensor(t, [1, units])]
    return ins, outs


def test_svdf_rank1_hand_computed() -> None:
    ins, outs = svdf_case(F32, 1, bias=False)
    assert validate(Op.SVDF, ins, outs) == HalVersion.V1_0
    state, out = run(Op.SVDF, ins, outs)
    # filter 0 memory [10, 20, 1] . [1, 2, 3] = 53 ; filter 1 memory [1, 2, 2] . [1, 1, 1] = 5
    np.testing.assert_allclose(out, [[53.0, 5.0]])
    np.testing.assert_allclose(state, [[20.0, 1.0, 0.0, 2.0, 2.0, 0.0]])


def test_svdf_rank2_float16_with_bias() -> None:
    ins, outs = svdf_case(T.TENSOR_FLOAT16, 2, bias=True)
    assert validate(Op.SVDF, ins, outs) == HalVersion.V1_2
    _, out = run(Op.SVDF, ins, outs)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32), [[58.5]])


def test_svdf_rejects_rank_not_dividing_filters() -> None:
    ins, outs = svdf_case(F32, 1, bias=False)
    ins[5] = (scalar(T.INT32), 3)
    with pytest.raises(InvalidArgument):
        validate(Op.SVDF, ins, outs)

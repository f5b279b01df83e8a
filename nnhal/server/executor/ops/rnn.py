"""Recurrent operations: RNN, UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_RNN and SVDF.

All are float32 / float16 (computed in float32). A basic RNN step is
``h = act(x W^T + aux A^T + h_prev R^T + b)``; the sequence variants compute
the input-side products of every time step in one GEMM and loop over time only
for the recurrent product.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import HalVersion, OperandLifeTime, OperandType, OperationType
from nnhal.core.errors import InvalidArgument
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops.common import FLOAT_TYPES, T
from nnhal.server.executor.ops.lstm import activation
from nnhal.server.executor.registry import register

Op = OperationType

#: Activations the reference RNN functor accepts (FuseCode plus tanh / sigmoid).
_ACTIVATIONS = (0, 1, 2, 3, 4, 6)


def _need(cond: bool, op: str, message: str) -> None:
    if not cond:
        raise InvalidArgument(f"{op}: {message}")


def _known_dims(v: ValidationContext, i: int) -> tuple[int, ...] | None:
    if v.is_omitted(i):
        return None
    dims = v.input_dims(i)
    if not dims or 0 in dims:
        return None
    return dims


def _presence(v: ValidationContext, i: int) -> bool | None:
    """Whether optional input ``i`` has a value; None when only the request can tell."""
    if v.is_omitted(i):
        return False
    if v.inputs[i].lifetime == OperandLifeTime.SUBGRAPH_INPUT:
        return None
    return True


def _check_rank(v: ValidationContext, i: int, rank: int) -> None:
    dims = _known_dims(v, i)
    if dims is not None:
        v.require(len(dims) == rank, f"input {i} must have rank {rank}, got {len(dims)}")


def _validate_types(v: ValidationContext, n_tensors: int, scalars: dict[int, OperandType]) -> OperandType:
    """Inputs 0..n_tensors-1 share the input's float type; outputs all have it too."""
    t = v.expect_input_type_in(0, FLOAT_TYPES)
    for i in range(n_tensors):
        if not v.is_omitted(i) and v.input_type(i) != t:
            v.fail(f"input {i} must be {t.name}, got {v.input_type(i).name}")
    for i, want in scalars.items():
        v.require(not v.is_omitted(i), f"required input {i} is omitted")
        if v.input_type(i) != want:
            v.fail(f"input {i} must be {want.name}, got {v.input_type(i).name}")
    for k in range(v.num_outputs):
        if v.output_type(k) != t:
            v.fail(f"output {k} must be {t.name}, got {v.output_type(k).name}")
    return t


def _check_activation(v: ValidationContext, i: int) -> None:
    value = v.constant_scalar(i)
    if value is not None:
        v.require(int(value) in _ACTIVATIONS, f"unsupported activation function {value}")


def _f32(ctx: ExecutionContext, i: int) -> np.ndarray:
    return ctx.tensor(i).astype(np.float32, copy=False)


def _act(ctx: ExecutionContext, i: int) -> int:
    code = int(ctx.scalar(i))
    _need(code in _ACTIVATIONS, ctx.op_type.name, f"unsupported activation function {code}")
    return code


def _cell_weights(
    ctx: ExecutionContext, w_i: int, r_i: int, b_i: int, h_i: int, n_input: int, n_batch: int, what: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Weights [U, I], recurrent weights [U, U], bias [U] and hidden state [B, U], checked."""
    op = ctx.op_type.name
    w, r, b, h = _f32(ctx, w_i), _f32(ctx, r_i), _f32(ctx, b_i), _f32(ctx, h_i)
    _need(w.ndim == 2, op, f"{what} weights must be 2-D")
    units = w.shape[0]
    _need(w.shape[1] == n_input, op, f"{what} weights must be [{units}, {n_input}], got {list(w.shape)}")
    _need(r.shape == (units, units), op, f"{what} recurrent weights must be [{units}, {units}]")
    _need(b.shape == (units,), op, f"{what} bias must be [{units}]")
    _need(h.shape == (n_batch, units), op, f"{what} hidden state must be [{n_batch}, {units}]")
    return w, r, b, h


def _run_rnn(
    pre: np.ndarray, recurrent: np.ndarray, h0: np.ndarray, act: int, reverse: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """pre [T, B, U] holds the input-side sums; returns (outputs [T, B, U], last hidden state)."""
    out = np.empty_like(pre)
    r_t = np.ascontiguousarray(recurrent.T)
    h = h0
    steps = range(pre.shape[0] - 1, -1, -1) if reverse else range(pre.shape[0])
    for t in steps:
        h = activation(pre[t] + h @ r_t, act).astype(np.float32, copy=False)
        out[t] = h
    return out, h


def _input_side(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """x [T, B, I] times w^T (+ b): [T, B, U]."""
    n_time, n_batch, n_in = x.shape
    pre = (x.reshape(n_time * n_batch, n_in) @ w.T).reshape(n_time, n_batch, w.shape[0])
    if b is not None:
        pre += b
    return np.asarray(pre)


def _to_time_major(a: np.ndarray, time_major: bool) -> np.ndarray:
    return a if time_major else a.transpose(1, 0, 2)


# =============================================================================
# RNN
# =============================================================================


def validate_rnn(v: ValidationContext) -> HalVersion:
    v.expect_counts(6, 2)
    t = _validate_types(v, 5, {5: T.INT32})
    for i in range(5):
        v.require(not v.is_omitted(i), f"required input {i} is omitted")
    for i, rank in ((0, 2), (1, 2), (2, 2), (3, 1), (4, 2)):
        _check_rank(v, i, rank)
    _check_activation(v, 5)
    return HalVersion.V1_2 if t == T.TENSOR_FLOAT16 else HalVersion.V1_0


def execute_rnn(ctx: ExecutionContext) -> None:
    op = ctx.op_type.name
    x = _f32(ctx, 0)
    _need(x.ndim == 2, op, f"input must be 2-D, got rank {x.ndim}")
    w, r, b, h = _cell_weights(ctx, 1, 2, 3, 4, x.shape[1], x.shape[0], "cell")
    out, _ = _run_rnn(_input_side(x[None], w, b), r, h, _act(ctx, 5))
    ctx.set_output(0, out[0])
    ctx.set_output(1, out[0])


# =============================================================================
# UNIDIRECTIONAL_SEQUENCE_RNN
# =============================================================================


def validate_uni_rnn(v: ValidationContext) -> HalVersion:
    v.expect_counts(7, (1, 2))
    _validate_types(v, 5, {5: T.INT32, 6: T.INT32})
    for i in range(5):
        v.require(not v.is_omitted(i), f"required input {i} is omitted")
    for i, rank in ((0, 3), (1, 2), (2, 2), (3, 1), (4, 2)):
        _check_rank(v, i, rank)
    _check_activation(v, 5)
    time_major = v.constant_scalar(6)
    if time_major is not None:
        v.require(time_major in (0, 1), f"time_major must be 0 or 1, got {time_major}")
    return HalVersion.V1_3 if v.num_outputs == 2 else HalVersion.V1_2


def execute_uni_rnn(ctx: ExecutionContext) -> None:
    op = ctx.op_type.name
    x = _f32(ctx, 0)
    _need(x.ndim == 3, op, f"input must be 3-D, got rank {x.ndim}")
    time_major = int(ctx.scalar(6))
    _need(time_major in (0, 1), op, f"time_major must be 0 or 1, got {time_major}")
    xt = _to_time_major(x, bool(time_major))
    w, r, b, h = _cell_weights(ctx, 1, 2, 3, 4, xt.shape[2], xt.shape[1], "cell")
    out, h_last = _run_rnn(_input_side(xt, w, b), r, h, _act(ctx, 5))
    ctx.set_output(0, _to_time_major(out, bool(time_major)))
    if len(ctx.out_operands) == 2:
        ctx.set_output(1, h_last)


# =============================================================================
# BIDIRECTIONAL_SEQUENCE_RNN
# =============================================================================


def validate_bidi_rnn(v: ValidationContext) -> HalVersion:
    v.expect_counts(15, (1, 2, 3, 4))
    _validate_types(v, 12, {12: T.INT32, 13: T.BOOL, 14: T.BOOL})
    for i in range(9):
        v.require(not v.is_omitted(i), f"required input {i} is omitted")
    for i, rank in ((0, 3), (1, 2), (2, 2), (3, 1), (4, 2), (5, 2), (6, 2), (7, 1), (8, 2), (9, 3), (10, 2), (11, 2)):
        _check_rank(v, i, rank)
    _check_activation(v, 12)
    fw_aux, bw_aux = _presence(v, 10), _presence(v, 11)
    if fw_aux is not None and bw_aux is not None:
        v.require(fw_aux == bw_aux, "forward and backward aux weights must be both given or both omitted")
    if fw_aux or bw_aux:
        v.require(_presence(v, 9) is not False, "aux weights given without an aux input")
    merge = v.constant_scalar(14)
    if merge is not None:
        allowed = (1, 3) if merge else (2, 4)
        v.require(v.num_outputs in allowed, f"{v.num_outputs} outputs do not match merge_outputs={bool(merge)}")
    return HalVersion.V1_3 if v.num_outputs in (3, 4) else HalVersion.V1_2


def execute_bidi_rnn(ctx: ExecutionContext) -> None:
    op = ctx.op_type.name
    x = _f32(ctx, 0)
    _need(x.ndim == 3, op, f"input must be 3-D, got rank {x.ndim}")
    time_major = bool(ctx.scalar(13))
    merge = bool(ctx.scalar(14))
    n_out = len(ctx.out_operands)
    _need(n_out in ((1, 3) if merge else (2, 4)), op, f"{n_out} outputs do not match merge_outputs={merge}")
    act = _act(ctx, 12)
    xt = _to_time_major(x, time_major)
    n_batch = xt.shape[1]

    def present(i: int) -> bool:
        return ctx.has(i) and ctx.tensor(i).size > 0

    has_aux, has_fw_aux_w, has_bw_aux_w = present(9), present(10), present(11)
    _need(
        has_fw_aux_w == has_bw_aux_w and (has_aux or not has_fw_aux_w),
        op,
        "unsupported combination of aux input and aux weights",
    )
    aux_t = None
    if has_aux:
        aux = _f32(ctx, 9)
        _need(aux.ndim == 3, op, "aux input must be 3-D")
        aux_t = _to_time_major(aux, time_major)
        _need(aux_t.shape[:2] == xt.shape[:2], op, "aux input must match the input's time and batch sizes")
    parallel = aux_t is not None and not has_fw_aux_w
    bw_x = aux_t if parallel else xt
    assert bw_x is not None

    fw_w, fw_r, fw_b, fw_h = _cell_weights(ctx, 1, 2, 3, 4, xt.shape[2], n_batch, "forward")
    bw_w, bw_r, bw_b, bw_h = _cell_weights(ctx, 5, 6, 7, 8, bw_x.shape[2], n_batch, "backward")
    fw_pre = _input_side(xt, fw_w, fw_b)
    bw_pre = _input_side(bw_x, bw_w, bw_b)
    if has_fw_aux_w:
        assert aux_t is not None
        fw_a, bw_a = _f32(ctx, 10), _f32(ctx, 11)
        n_aux = aux_t.shape[2]
        _need(fw_a.shape == (fw_w.shape[0], n_aux), op, "forward aux weights must be [fwNumUnits, auxInputSize]")
        _need(bw_a.shape == (bw_w.shape[0], n_aux), op, "backward aux weights must be [bwNumUnits, auxInputSize]")
        fw_pre += _input_side(aux_t, fw_a, None)
        bw_pre += _input_side(aux_t, bw_a, None)

    fw_out, fw_last = _run_rnn(fw_pre, fw_r, fw_h, act)
    bw_out, bw_last = _run_rnn(bw_pre, bw_r, bw_h, act, reverse=True)
    if merge:
        ctx.set_output(0, _to_time_major(np.concatenate([fw_out, bw_out], axis=2), time_major))
        first_state = 1
    else:
        ctx.set_output(0, _to_time_major(fw_out, time_major))
        ctx.set_output(1, _to_time_major(bw_out, time_major))
        first_state = 2
    if n_out in (3, 4):
        ctx.set_output(first_state, fw_last)
        ctx.set_output(first_state + 1, bw_last)


# =============================================================================
# SVDF
# =============================================================================


def validate_svdf(v: ValidationContext) -> HalVersion:
    v.expect_counts(7, 2)
    t = _validate_types(v, 5, {5: T.INT32, 6: T.INT32})
    for i in (0, 1, 2, 4):
        v.require(not v.is_omitted(i), f"required input {i} is omitted")
    for i, rank in ((0, 2), (1, 2), (2, 2), (3, 1), (4, 2)):
        _check_rank(v, i, rank)
    rank = v.constant_scalar(5)
    if rank is not None:
        v.require(rank > 0, f"rank must be positive, got {rank}")
        feature = _known_dims(v, 1)
        if feature is not None:
            v.require(feature[0] % rank == 0, "the number of filters must be a multiple of rank")
    _check_activation(v, 6)
    return HalVersion.V1_2 if t == T.TENSOR_FLOAT16 else HalVersion.V1_0


def execute_svdf(ctx: ExecutionContext) -> None:
    op = ctx.op_type.name
    x = _f32(ctx, 0)
    w_feature = _f32(ctx, 1)
    w_time = _f32(ctx, 2)
    state_in = _f32(ctx, 4)
    rank = int(ctx.scalar(5))
    act = _act(ctx, 6)
    _need(x.ndim == 2 and w_feature.ndim == 2 and w_time.ndim == 2, op, "input and weights must be 2-D")
    n_batch, n_input = x.shape
    n_filters = w_feature.shape[0]
    _need(rank > 0 and n_filters % rank == 0, op, "the number of filters must be a positive multiple of rank")
    n_units = n_filters // rank
    memory = w_time.shape[1]
    _need(w_feature.shape[1] == n_input, op, "weights_feature must match the input size")
    _need(w_time.shape[0] == n_filters, op, "weights_time must have one row per filter")
    _need(state_in.shape == (n_batch, memory * n_filters), op, f"state must be [{n_batch}, {memory * n_filters}]")
    bias = ctx.optional(3)
    if bias is not None and bias.size == 0:
        bias = None
    if bias is not None:
        _need(bias.shape == (n_units,), op, f"bias must be [{n_units}]")

    # The state is [batch, filter, memory]; the newest activation goes in the last slot.
    state = state_in.reshape(n_batch, n_filters, memory).copy()
    state[:, :, -1] = x @ w_feature.T
    per_filter = np.einsum("bfm,fm->bf", state, w_time)
    out = per_filter.reshape(n_batch, n_units, rank).sum(axis=2)
    if bias is not None:
        out = out + bias.astype(np.float32)
    out = activation(out.astype(np.float32, copy=False), act)
    # Shift the memory left by one slot for the next call.
    shifted = np.zeros_like(state)
    shifted[:, :, :-1] = state[:, :, 1:]
    ctx.set_output(0, shifted.reshape(n_batch, memory * n_filters))
    ctx.set_output(1, out)


register(Op.RNN, validate=validate_rnn, execute=execute_rnn)
register(Op.UNIDIRECTIONAL_SEQUENCE_RNN, validate=validate_uni_rnn, execute=execute_uni_rnn)
register(Op.BIDIRECTIONAL_SEQUENCE_RNN, validate=validate_bidi_rnn, execute=execute_bidi_rnn)
register(Op.SVDF, validate=validate_svdf, execute=execute_svdf)

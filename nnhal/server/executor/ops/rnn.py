"""Recurrent operations: RNN, UNIDIRECTIONAL_SEQUENCE_RNN, BIDIRECTIONAL_SEQUENCE_RNN and SVDF.

All are float32 / float16 (computed in float32). A basic RNN step is
``h = act(x W^T + aux A^T + h_prev R^T + b)``; the sequence variants compute
the input-side products of every time step in one GEMM and loop over time only
for the recurrent product.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.errors import INVALID
from nnhal.server.executor.ops._activations import cell_activation
from nnhal.server.executor.ops._recurrent import (
    check_cell_activation,
    check_merge_outputs,
    expect_float_types,
    runtime_cell_activation,
    runtime_merge_outputs,
    set_bidirectional_outputs,
    to_time_major,
)
from nnhal.server.executor.ops._validation import check_known_rank, known_dims, presence
from nnhal.server.executor.ops.common import T
from nnhal.server.executor.registry import register

Op = OperationType


def _f32(ctx: ExecutionContext, i: int) -> np.ndarray:
    return ctx.tensor(i).astype(np.float32, copy=False)


def _cell_weights(
    ctx: ExecutionContext, w_i: int, r_i: int, b_i: int, h_i: int, n_input: int, n_batch: int, what: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Weights [U, I], recurrent weights [U, U], bias [U] and hidden state [B, U], checked."""
    w, r, b, h = _f32(ctx, w_i), _f32(ctx, r_i), _f32(ctx, b_i), _f32(ctx, h_i)
    ctx.require(w.ndim == 2, f"{what} weights must be 2-D")
    units = w.shape[0]
    ctx.require(w.shape[1] == n_input, f"{what} weights must be [{units}, {n_input}], got {list(w.shape)}")
    ctx.require(r.shape == (units, units), f"{what} recurrent weights must be [{units}, {units}]")
    ctx.require(b.shape == (units,), f"{what} bias must be [{units}]")
    ctx.require(h.shape == (n_batch, units), f"{what} hidden state must be [{n_batch}, {units}]")
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
        h = cell_activation(pre[t] + h @ r_t, act).astype(np.float32, copy=False)
        out[t] = h
    return out, h


def _input_side(x: np.ndarray, w: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    """x [T, B, I] times w^T (+ b): [T, B, U]."""
    n_time, n_batch, n_in = x.shape
    pre = (x.reshape(n_time * n_batch, n_in) @ w.T).reshape(n_time, n_batch, w.shape[0])
    if b is not None:
        pre += b
    return np.asarray(pre)


# =============================================================================
# RNN
# =============================================================================


def validate_rnn(v: ValidationContext) -> HalVersion:
    v.expect_counts(6, 2)
    t = expect_float_types(v, range(5), ints=[5], required=range(6))
    for i, rank in ((0, 2), (1, 2), (2, 2), (3, 1), (4, 2)):
        check_known_rank(v, i, rank)
    check_cell_activation(v, 5)
    return HalVersion.V1_2 if t == T.TENSOR_FLOAT16 else HalVersion.V1_0


def execute_rnn(ctx: ExecutionContext) -> None:
    x = _f32(ctx, 0)
    ctx.require(x.ndim == 2, f"input must be 2-D, got rank {x.ndim}")
    w, r, b, h = _cell_weights(ctx, 1, 2, 3, 4, x.shape[1], x.shape[0], "cell")
    out, _ = _run_rnn(_input_side(x[None], w, b), r, h, runtime_cell_activation(ctx, 5))
    ctx.set_output(0, out[0])
    ctx.set_output(1, out[0])


# =============================================================================
# UNIDIRECTIONAL_SEQUENCE_RNN
# =============================================================================


def validate_uni_rnn(v: ValidationContext) -> HalVersion:
    v.expect_counts(7, (1, 2))
    expect_float_types(v, range(5), ints=[5, 6], required=range(7))
    for i, rank in ((0, 3), (1, 2), (2, 2), (3, 1), (4, 2)):
        check_known_rank(v, i, rank)
    check_cell_activation(v, 5)
    time_major = v.constant_scalar(6)
    if time_major is not None:
        v.require(time_major in (0, 1), f"time_major must be 0 or 1, got {time_major}")
    return HalVersion.V1_3 if v.num_outputs == 2 else HalVersion.V1_2


def execute_uni_rnn(ctx: ExecutionContext) -> None:
    x = _f32(ctx, 0)
    ctx.require(x.ndim == 3, f"input must be 3-D, got rank {x.ndim}")
    time_major = int(ctx.scalar(6))
    ctx.require(time_major in (0, 1), f"time_major must be 0 or 1, got {time_major}")
    xt = to_time_major(x, bool(time_major))
    w, r, b, h = _cell_weights(ctx, 1, 2, 3, 4, xt.shape[2], xt.shape[1], "cell")
    out, h_last = _run_rnn(_input_side(xt, w, b), r, h, runtime_cell_activation(ctx, 5))
    ctx.set_output(0, to_time_major(out, bool(time_major)))
    if len(ctx.out_operands) == 2:
        ctx.set_output(1, h_last)


# =============================================================================
# BIDIRECTIONAL_SEQUENCE_RNN
# =============================================================================


def validate_bidi_rnn(v: ValidationContext) -> HalVersion:
    v.expect_counts(15, (1, 2, 3, 4))
    expect_float_types(v, range(12), ints=[12], bools=[13, 14], required=[*range(9), 12, 13, 14])
    for i, rank in ((0, 3), (1, 2), (2, 2), (3, 1), (4, 2), (5, 2), (6, 2), (7, 1), (8, 2), (9, 3), (10, 2), (11, 2)):
        check_known_rank(v, i, rank)
    check_cell_activation(v, 12)
    fw_aux, bw_aux = presence(v, 10), presence(v, 11)
    if fw_aux is not None and bw_aux is not None:
        v.require(fw_aux == bw_aux, "forward and backward aux weights must be both given or both omitted")
    if fw_aux or bw_aux:
        v.require(presence(v, 9) is not False, "aux weights given without an aux input")
    check_merge_outputs(v, 14, 2)
    return HalVersion.V1_3 if v.num_outputs in (3, 4) else HalVersion.V1_2


def execute_bidi_rnn(ctx: ExecutionContext) -> None:
    x = _f32(ctx, 0)
    ctx.require(x.ndim == 3, f"input must be 3-D, got rank {x.ndim}")
    time_major = bool(ctx.scalar(13))
    merge = runtime_merge_outputs(ctx, 14, 2)
    act = runtime_cell_activation(ctx, 12)
    xt = to_time_major(x, time_major)
    n_batch = xt.shape[1]

    def present(i: int) -> bool:
        return ctx.has(i) and ctx.tensor(i).size > 0

    has_aux, has_fw_aux_w, has_bw_aux_w = present(9), present(10), present(11)
    ctx.require(
        has_fw_aux_w == has_bw_aux_w and (has_aux or not has_fw_aux_w),
        "unsupported combination of aux input and aux weights",
    )
    aux_t = None
    if has_aux:
        aux = _f32(ctx, 9)
        ctx.require(aux.ndim == 3, "aux input must be 3-D")
        aux_t = to_time_major(aux, time_major)
        ctx.require(aux_t.shape[:2] == xt.shape[:2], "aux input must match the input's time and batch sizes")
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
        ctx.require(fw_a.shape == (fw_w.shape[0], n_aux), "forward aux weights must be [fwNumUnits, auxInputSize]")
        ctx.require(bw_a.shape == (bw_w.shape[0], n_aux), "backward aux weights must be [bwNumUnits, auxInputSize]")
        fw_pre += _input_side(aux_t, fw_a, None)
        bw_pre += _input_side(aux_t, bw_a, None)

    fw_out, fw_last = _run_rnn(fw_pre, fw_r, fw_h, act)
    bw_out, bw_last = _run_rnn(bw_pre, bw_r, bw_h, act, reverse=True)
    set_bidirectional_outputs(ctx, fw_out, bw_out, time_major, merge, (fw_last, bw_last))


# =============================================================================
# SVDF
# =============================================================================


def validate_svdf(v: ValidationContext) -> HalVersion:
    v.expect_counts(7, 2)
    t = expect_float_types(v, range(5), ints=[5, 6], required=[0, 1, 2, 4, 5, 6])
    for i, rank in ((0, 2), (1, 2), (2, 2), (3, 1), (4, 2)):
        check_known_rank(v, i, rank)
    rank = v.constant_scalar(5)
    if rank is not None:
        v.require(rank > 0, f"rank must be positive, got {rank}")
        feature = known_dims(v, 1)
        if feature is not None:
            v.require(feature[0] % rank == 0, "the number of filters must be a multiple of rank")
    check_cell_activation(v, 6)
    return HalVersion.V1_2 if t == T.TENSOR_FLOAT16 else HalVersion.V1_0


def execute_svdf(ctx: ExecutionContext) -> None:
    x = _f32(ctx, 0)
    w_feature = _f32(ctx, 1)
    w_time = _f32(ctx, 2)
    state_in = _f32(ctx, 4)
    rank = int(ctx.scalar(5))
    act = runtime_cell_activation(ctx, 6)
    ctx.require(x.ndim == 2 and w_feature.ndim == 2 and w_time.ndim == 2, "input and weights must be 2-D")
    n_batch, n_input = x.shape
    n_filters = w_feature.shape[0]
    ctx.require(rank > 0 and n_filters % rank == 0, "the number of filters must be a positive multiple of rank")
    n_units = n_filters // rank
    memory = w_time.shape[1]
    ctx.require(w_feature.shape[1] == n_input, "weights_feature must match the input size")
    ctx.require(w_time.shape[0] == n_filters, "weights_time must have one row per filter")
    ctx.require(state_in.shape == (n_batch, memory * n_filters), f"state must be [{n_batch}, {memory * n_filters}]")
    bias = ctx.optional(3)
    if bias is not None and bias.size == 0:
        bias = None
    if bias is not None:
        ctx.require(bias.shape == (n_units,), f"bias must be [{n_units}]")

    # The state is [batch, filter, memory]; the newest activation goes in the last slot.
    state = state_in.reshape(n_batch, n_filters, memory).copy()
    state[:, :, -1] = x @ w_feature.T
    per_filter = np.einsum("bfm,fm->bf", state, w_time)
    out = per_filter.reshape(n_batch, n_units, rank).sum(axis=2)
    if bias is not None:
        out = out + bias.astype(np.float32)
    out = cell_activation(out.astype(np.float32, copy=False), act)
    # Shift the memory left by one slot for the next call.
    shifted = np.zeros_like(state)
    shifted[:, :, :-1] = state[:, :, 1:]
    ctx.set_output(0, shifted.reshape(n_batch, memory * n_filters))
    ctx.set_output(1, out)


# Runtime operands that do not fit the cell are the request's error: INVALID_ARGUMENT.
_register = partial(register, execution_failure=INVALID)
_register(Op.RNN, validate=validate_rnn, execute=execute_rnn)
_register(Op.UNIDIRECTIONAL_SEQUENCE_RNN, validate=validate_uni_rnn, execute=execute_uni_rnn)
_register(Op.BIDIRECTIONAL_SEQUENCE_RNN, validate=validate_bidi_rnn, execute=execute_bidi_rnn)
_register(Op.SVDF, validate=validate_svdf, execute=execute_svdf)

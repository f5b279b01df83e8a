"""Float LSTM operations: LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM and BIDIRECTIONAL_SEQUENCE_LSTM.

All three run the cell of ``_lstm_cell`` (float32, float16 computed in
float32); they differ in where their operands sit, in sequence handling and in
which states they output. The quantized variants are ``quantized_lstm``
(QUANTIZED_LSTM) and ``quantized_16bit_lstm``.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.errors import INVALID
from nnhal.server.executor.ops._lstm_cell import (
    BIDI_BW,
    BIDI_FW,
    LSTM_CELL,
    LSTM_CELL_V10,
    UNI_CELL,
    float_params,
    load_cell,
    run_cell,
    state_input,
    validate_cell_shapes,
)
from nnhal.server.executor.ops._recurrent import (
    check_cell_activation,
    check_constant_nonneg,
    check_merge_outputs,
    expect_float_types,
    runtime_merge_outputs,
    set_bidirectional_outputs,
    to_time_major,
)
from nnhal.server.executor.ops._validation import check_known_rank, known_dims
from nnhal.server.executor.ops.common import T
from nnhal.server.executor.registry import register

Op = OperationType

# Scalar and state operands of LSTM and UNIDIRECTIONAL_SEQUENCE_LSTM (the cell's tensors: _lstm_cell).
INPUT = 0
OUTPUT_STATE_IN = 18
CELL_STATE_IN = 19
ACTIVATION = 20
CELL_CLIP = 21
PROJ_CLIP = 22
TIME_MAJOR = 23  # UNIDIRECTIONAL_SEQUENCE_LSTM only

# BIDIRECTIONAL_SEQUENCE_LSTM's own operands.
BIDI_AUX_INPUT = 39
BIDI_AUX_WEIGHTS = (41, 42, 43, 45, 46, 47)
BIDI_FW_OUTPUT_STATE, BIDI_FW_CELL_STATE, BIDI_BW_OUTPUT_STATE, BIDI_BW_CELL_STATE = 35, 36, 37, 38
BIDI_ACTIVATION, BIDI_CELL_CLIP, BIDI_PROJ_CLIP, BIDI_MERGE_OUTPUTS, BIDI_TIME_MAJOR = 48, 49, 50, 51, 52


def _validate_scalars(v: ValidationContext, activation: int, cell_clip: int, proj_clip: int) -> None:
    check_cell_activation(v, activation)
    check_constant_nonneg(v, cell_clip, "cell clip")
    check_constant_nonneg(v, proj_clip, "projection clip")


# -- LSTM ------------------------------------------------------------------------
def validate_lstm(v: ValidationContext) -> HalVersion:
    v.expect_counts((23, 27), 4)
    tensors = list(range(20)) + (list(range(23, 27)) if v.num_inputs == 27 else [])
    required = (0, 2, 3, 4, 6, 7, 8, 13, 14, 15, 18, 19, 20, 21, 22)
    t = expect_float_types(v, tensors, ints=[ACTIVATION], floats=[CELL_CLIP, PROJ_CLIP], required=required)
    for i in (INPUT, OUTPUT_STATE_IN, CELL_STATE_IN):
        check_known_rank(v, i, 2)
    dims = known_dims(v, INPUT)
    validate_cell_shapes(v, LSTM_CELL if v.num_inputs == 27 else LSTM_CELL_V10, dims[1] if dims else None)
    _validate_scalars(v, ACTIVATION, CELL_CLIP, PROJ_CLIP)
    if t == T.TENSOR_FLOAT16 or v.num_inputs == 27:
        return HalVersion.V1_2
    return HalVersion.V1_0


def execute_lstm(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT).astype(np.float32, copy=False)
    ctx.require(x.ndim == 2, f"input must be 2-D, got rank {x.ndim}")
    n_batch, n_input = x.shape
    cell = load_cell(ctx, LSTM_CELL if len(ctx.inputs) == 27 else LSTM_CELL_V10, n_input, False)
    p = float_params(ctx, ACTIVATION, CELL_CLIP, PROJ_CLIP)
    h0 = state_input(ctx, OUTPUT_STATE_IN, (n_batch, cell.n_output), "output state")
    c0 = state_input(ctx, CELL_STATE_IN, (n_batch, cell.n_cell), "cell state")
    out, h, c, scratch = run_cell(cell, p, x[None], None, h0, c0)
    ctx.set_output(0, scratch)
    ctx.set_output(1, h)
    ctx.set_output(2, c)
    ctx.set_output(3, out[0])


# -- UNIDIRECTIONAL_SEQUENCE_LSTM --------------------------------------------------------
def validate_uni_lstm(v: ValidationContext) -> HalVersion:
    v.expect_counts(28, (1, 3))
    tensors = list(range(20)) + list(range(24, 28))
    required = (0, 2, 3, 4, 6, 7, 8, 13, 14, 15, 18, 19, 20, 21, 22, 23)
    expect_float_types(v, tensors, [ACTIVATION], [CELL_CLIP, PROJ_CLIP], [TIME_MAJOR], required)
    check_known_rank(v, INPUT, 3)
    check_known_rank(v, OUTPUT_STATE_IN, 2)
    check_known_rank(v, CELL_STATE_IN, 2)
    dims = known_dims(v, INPUT)
    validate_cell_shapes(v, UNI_CELL, dims[2] if dims else None)
    _validate_scalars(v, ACTIVATION, CELL_CLIP, PROJ_CLIP)
    return HalVersion.V1_3 if v.num_outputs == 3 else HalVersion.V1_2


def execute_uni_lstm(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT).astype(np.float32, copy=False)
    ctx.require(x.ndim == 3, f"input must be 3-D, got rank {x.ndim}")
    time_major = bool(ctx.scalar(TIME_MAJOR))
    xt = to_time_major(x, time_major)
    n_batch, n_input = xt.shape[1], xt.shape[2]
    cell = load_cell(ctx, UNI_CELL, n_input, False)
    p = float_params(ctx, ACTIVATION, CELL_CLIP, PROJ_CLIP)
    h0 = state_input(ctx, OUTPUT_STATE_IN, (n_batch, cell.n_output), "output state")
    c0 = state_input(ctx, CELL_STATE_IN, (n_batch, cell.n_cell), "cell state")
    out, h, c, _ = run_cell(cell, p, xt, None, h0, c0)
    ctx.set_output(0, to_time_major(out, time_major))
    if len(ctx.out_operands) == 3:
        ctx.set_output(1, h)
        ctx.set_output(2, c)


# -- BIDIRECTIONAL_SEQUENCE_LSTM ---------------------------------------------------------
def validate_bidi_lstm(v: ValidationContext) -> HalVersion:
    v.expect_counts(61, (1, 2, 5, 6))
    tensors = list(range(48)) + list(range(53, 61))
    required = (0, 2, 3, 4, 6, 7, 8, 13, 14, 15, 19, 20, 21, 23, 24, 25, 30, 31, 32, 35, 36, 37, 38)
    scalars = (BIDI_ACTIVATION, BIDI_CELL_CLIP, BIDI_PROJ_CLIP, BIDI_MERGE_OUTPUTS, BIDI_TIME_MAJOR)
    expect_float_types(
        v,
        tensors,
        [BIDI_ACTIVATION],
        [BIDI_CELL_CLIP, BIDI_PROJ_CLIP],
        [BIDI_MERGE_OUTPUTS, BIDI_TIME_MAJOR],
        (*required, *scalars),
    )
    check_known_rank(v, INPUT, 3)
    for i in (BIDI_FW_OUTPUT_STATE, BIDI_FW_CELL_STATE, BIDI_BW_OUTPUT_STATE, BIDI_BW_CELL_STATE):
        check_known_rank(v, i, 2)
    if not v.is_omitted(BIDI_AUX_INPUT):
        check_known_rank(v, BIDI_AUX_INPUT, 3)
    dims = known_dims(v, INPUT)
    n_input = dims[2] if dims else None
    validate_cell_shapes(v, BIDI_FW, n_input)
    validate_cell_shapes(v, BIDI_BW, n_input if v.is_omitted(BIDI_AUX_INPUT) else None)
    _validate_scalars(v, BIDI_ACTIVATION, BIDI_CELL_CLIP, BIDI_PROJ_CLIP)
    check_merge_outputs(v, BIDI_MERGE_OUTPUTS, 4)
    return HalVersion.V1_3 if v.num_outputs in (5, 6) else HalVersion.V1_2


def execute_bidi_lstm(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT).astype(np.float32, copy=False)
    ctx.require(x.ndim == 3, f"input must be 3-D, got rank {x.ndim}")
    time_major = bool(ctx.scalar(BIDI_TIME_MAJOR))
    merge = runtime_merge_outputs(ctx, BIDI_MERGE_OUTPUTS, 4)
    xt = to_time_major(x, time_major)
    n_batch, n_input = xt.shape[1], xt.shape[2]

    aux_in = ctx.optional(BIDI_AUX_INPUT)
    aux_in = None if aux_in is None or aux_in.size == 0 else aux_in.astype(np.float32, copy=False)
    has_aux_weights = any(ctx.has(i) and ctx.tensor(i).size for i in BIDI_AUX_WEIGHTS)
    ctx.require(aux_in is not None or not has_aux_weights, "aux weights given without an aux input")
    aux_t = None
    if aux_in is not None:
        ctx.require(aux_in.ndim == 3, "aux input must be 3-D")
        aux_t = to_time_major(aux_in, time_major)
        ctx.require(aux_t.shape[:2] == xt.shape[:2], "aux input must match the input's time and batch sizes")
    # An aux input without aux weights is the backward direction's own input ("parallel linking").
    parallel = aux_t is not None and not has_aux_weights

    fw = load_cell(ctx, BIDI_FW, n_input, has_aux_weights)
    bw_x = aux_t if parallel else xt
    assert bw_x is not None
    bw = load_cell(ctx, BIDI_BW, bw_x.shape[2], has_aux_weights)
    if has_aux_weights:
        assert aux_t is not None and fw.w_aux is not None and bw.w_aux is not None
        ctx.require(
            fw.w_aux.shape[1] == aux_t.shape[2] and bw.w_aux.shape[1] == aux_t.shape[2],
            "aux weights do not match the aux input size",
        )
    p = float_params(ctx, BIDI_ACTIVATION, BIDI_CELL_CLIP, BIDI_PROJ_CLIP)
    cross_aux = aux_t if has_aux_weights else None

    fw_h0 = state_input(ctx, BIDI_FW_OUTPUT_STATE, (n_batch, fw.n_output), "forward output state")
    fw_c0 = state_input(ctx, BIDI_FW_CELL_STATE, (n_batch, fw.n_cell), "forward cell state")
    bw_h0 = state_input(ctx, BIDI_BW_OUTPUT_STATE, (n_batch, bw.n_output), "backward output state")
    bw_c0 = state_input(ctx, BIDI_BW_CELL_STATE, (n_batch, bw.n_cell), "backward cell state")
    fw_out, fw_h, fw_c, _ = run_cell(fw, p, xt, cross_aux, fw_h0, fw_c0)
    bw_out, bw_h, bw_c, _ = run_cell(bw, p, bw_x, cross_aux, bw_h0, bw_c0, reverse=True)
    set_bidirectional_outputs(ctx, fw_out, bw_out, time_major, merge, (fw_h, fw_c, bw_h, bw_c))


# Runtime operands that do not fit the cell are the request's error: INVALID_ARGUMENT.
_register = partial(register, execution_failure=INVALID)
_register(Op.LSTM, validate=validate_lstm, execute=execute_lstm)
_register(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, validate=validate_uni_lstm, execute=execute_uni_lstm)
_register(Op.BIDIRECTIONAL_SEQUENCE_LSTM, validate=validate_bidi_lstm, execute=execute_bidi_lstm)

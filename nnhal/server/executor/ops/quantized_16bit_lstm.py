"""QUANTIZED_16BIT_LSTM (HAL 1.2): one LSTM step on 8-bit asymmetric activations with a
16-bit cell state, as the reference computes it (gemmlowp fixed point).

The quantization is fixed by the HAL: input and output at 1/128 with zero point
128, the cell state at 2^-11 (Q4.11); the four gates are one fused
fully-connected layer whose Q3.12 results feed gemmlowp's logistic and tanh.
Runtime operands of the wrong shape are the request's error: INVALID_ARGUMENT.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.errors import INVALID
from nnhal.server.executor.ops._fixed_point import (
    checked_log2,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul as fx_mul,
    wrap,
)
from nnhal.server.executor.ops._fixed_point_math import fx_logistic, fx_tanh, rescale
from nnhal.server.executor.ops._validation import check_known_rank
from nnhal.server.executor.ops.common import T
from nnhal.server.executor.registry import register

# -- operands (as the reference's QuantizedLSTM.h names them) ----------------------------
INPUT = 0
#: Per gate, in the order input, forget, cell, output.
INPUT_WEIGHTS = (1, 2, 3, 4)
RECURRENT_WEIGHTS = (5, 6, 7, 8)
GATE_BIASES = (9, 10, 11, 12)
PREV_CELL_STATE, PREV_OUTPUT = 13, 14
CELL_STATE_OUT, OUTPUT = 0, 1

INPUT_GATE, FORGET_GATE, CELL_GATE, OUTPUT_GATE = 0, 1, 2, 3
#: Gate order of the fused fully-connected layer: input, cell (modulation), forget, output.
_FUSED_ORDER = (INPUT_GATE, CELL_GATE, FORGET_GATE, OUTPUT_GATE)
#: Integer bits of the cell state (Q4.11).
_STATE_INTEGER_BITS = 4


def validate_q16_lstm(v: ValidationContext) -> HalVersion:
    v.expect_counts(15, 2)
    q8 = T.TENSOR_QUANT8_ASYMM
    v.expect_types([q8] * 9 + [T.TENSOR_INT32] * 4 + [T.TENSOR_QUANT16_SYMM, q8], [T.TENSOR_QUANT16_SYMM, q8])
    for i in range(15):
        v.require(not v.is_omitted(i), f"input {i} is required")
    for i in (INPUT, *INPUT_WEIGHTS, *RECURRENT_WEIGHTS, PREV_CELL_STATE, PREV_OUTPUT):
        check_known_rank(v, i, 2)
    for i in GATE_BIASES:
        check_known_rank(v, i, 1)
    _validate_quantization(v)
    return HalVersion.V1_2


def _validate_quantization(v: ValidationContext) -> None:
    """The fixed quantization the reference requires (input/output 1/128 at 128, etc.)."""
    ops = v.inputs
    x, cell, prev_out = ops[INPUT], ops[PREV_CELL_STATE], ops[PREV_OUTPUT]
    w0, b0 = ops[INPUT_WEIGHTS[0]], ops[GATE_BIASES[0]]
    v.require(x.scale == 1.0 / 128.0 and x.zero_point == 128, "input must have scale 1/128 and zero point 128")
    v.require(
        prev_out.scale == 1.0 / 128.0 and prev_out.zero_point == 128,
        "previous output must have scale 1/128 and zero point 128",
    )
    v.require(w0.scale != 0, "weights scale must be non-zero")
    for w in ops[INPUT_WEIGHTS[1] : RECURRENT_WEIGHTS[-1] + 1]:
        v.require(w.scale == w0.scale and w.zero_point == w0.zero_point, "all weights must share scale and zero point")
    v.require(b0.scale == w0.scale / 128.0, "bias scale must be the weights scale / 128")
    for b in ops[GATE_BIASES[0] : GATE_BIASES[-1] + 1]:
        v.require(b.scale == b0.scale and b.zero_point == 0, "all biases must share the scale, zero point 0")
    v.require(cell.zero_point == 0, "cell state zero point must be 0")
    shift = checked_log2(cell.scale) if cell.scale > 0 else None
    v.require(shift is not None and shift + 15 == _STATE_INTEGER_BITS, "cell state scale must be 2^-11")


def execute_q16_lstm(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT).astype(np.int64)
    prev_out = ctx.tensor(PREV_OUTPUT).astype(np.int64)
    prev_cell = ctx.tensor(PREV_CELL_STATE).astype(np.int64)
    ctx.require(x.ndim == 2 and prev_out.ndim == 2, "input and previous output must be 2-D")
    n_batch, n_input = x.shape
    n = prev_out.shape[1]
    ctx.require(prev_out.shape[0] == n_batch, "previous output batch size mismatch")
    ctx.require(prev_cell.shape == (n_batch, n), f"cell state must be [{n_batch}, {n}]")
    w_x, w_h, biases = [], [], []
    for g in _FUSED_ORDER:
        wx = ctx.tensor(INPUT_WEIGHTS[g]).astype(np.int64)
        wh = ctx.tensor(RECURRENT_WEIGHTS[g]).astype(np.int64)
        b = ctx.tensor(GATE_BIASES[g]).astype(np.int64)
        ctx.require(wx.shape == (n, n_input), "input weights must be [outputSize, inputSize]")
        ctx.require(wh.shape == (n, n), "recurrent weights must be [outputSize, outputSize]")
        ctx.require(b.shape == (n,), "biases must be [outputSize]")
        w_x.append(wx)
        w_h.append(wh)
        biases.append(b)
    # The reference lays the fused weights out as [recurrent | input] columns but
    # concatenates the activations as [input, previous output]; its goldens (and
    # TFLite's) depend on exactly this pairing, so it is kept.
    weights = np.concatenate([np.concatenate(w_h), np.concatenate(w_x)], axis=1) - ctx.zero_point(INPUT_WEIGHTS[0])
    concat = np.concatenate([x, prev_out], axis=1) - 128
    acc = concat @ weights.T + np.concatenate(biases)
    mult, shift = quantize_multiplier(4096 * ctx.scale(GATE_BIASES[0]))
    acc = np.clip(multiply_by_quantized_multiplier(wrap(acc, 32), mult, shift), -32768, 32767)
    input_gate = fx_logistic(acc[:, 0:n], 3)
    modulation = fx_tanh(acc[:, n : 2 * n], 3)
    forget_gate = fx_logistic(acc[:, 2 * n : 3 * n], 3)
    output_gate = fx_logistic(acc[:, 3 * n : 4 * n], 3)
    bits = _STATE_INTEGER_BITS
    in_times_mod = fx_mul(input_gate, modulation, 16)
    prev_times_forget = fx_mul(forget_gate, prev_cell, 16)
    new_state = np.clip(rescale(in_times_mod, 0, bits, 16) + prev_times_forget, -32768, 32767)
    out_activ = fx_mul(output_gate, fx_tanh(rescale(new_state, bits, 3, 16), 3), 16)
    out = 128 + np.clip(rounding_divide_by_pot(out_activ, 8), -128, 127)
    ctx.set_output(CELL_STATE_OUT, new_state)
    ctx.set_output(OUTPUT, out)


register(
    OperationType.QUANTIZED_16BIT_LSTM, validate=validate_q16_lstm, execute=execute_q16_lstm, execution_failure=INVALID
)

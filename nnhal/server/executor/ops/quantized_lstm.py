"""QUANTIZED_LSTM (HAL 1.3): one time step of an LSTM on 8-bit signed inputs, 8-bit
symmetric weights and a 16-bit cell state, in the reference's integer arithmetic
(TFLite's integer LSTM: gemmlowp fixed point, QuantUtils' layer normalization).

Optional parts as in the float cell: CIFG (no input gate), peephole weights,
layer normalization, projection and clipping. Gates are computed on Q3.12
pre-activations; the cell state has a power-of-two scale of at most 2^-9.
Runtime operands that do not fit the cell are the request's error:
INVALID_ARGUMENT, as for the float variants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nnhal.core.enums import HalVersion, OperandType, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.errors import INVALID
from nnhal.server.executor.ops._fixed_point import (
    INT32_MAX,
    checked_log2,
    f32_scale,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    wrap,
)
from nnhal.server.executor.ops._fixed_point_math import fx_logistic, fx_tanh, inv_sqrt_multiplier
from nnhal.server.executor.ops._validation import check_known_rank, presence
from nnhal.server.executor.ops.common import T
from nnhal.server.executor.registry import register

# -- operands (as the reference's QLSTM.h names them) ------------------------------------
INPUT = 0
INPUT_TO_INPUT_WEIGHTS, INPUT_TO_FORGET_WEIGHTS, INPUT_TO_CELL_WEIGHTS, INPUT_TO_OUTPUT_WEIGHTS = 1, 2, 3, 4
RECURRENT_TO_INPUT_WEIGHTS, RECURRENT_TO_FORGET_WEIGHTS = 5, 6
RECURRENT_TO_CELL_WEIGHTS, RECURRENT_TO_OUTPUT_WEIGHTS = 7, 8
CELL_TO_INPUT_WEIGHTS, CELL_TO_FORGET_WEIGHTS, CELL_TO_OUTPUT_WEIGHTS = 9, 10, 11
INPUT_GATE_BIAS, FORGET_GATE_BIAS, CELL_GATE_BIAS, OUTPUT_GATE_BIAS = 12, 13, 14, 15
PROJECTION_WEIGHTS, PROJECTION_BIAS = 16, 17
OUTPUT_STATE_IN, CELL_STATE_IN = 18, 19
INPUT_LAYER_NORM, FORGET_LAYER_NORM, CELL_LAYER_NORM, OUTPUT_LAYER_NORM = 20, 21, 22, 23
CELL_CLIP, PROJECTION_CLIP = 24, 25
INPUT_INTERMEDIATE_SCALE, FORGET_INTERMEDIATE_SCALE = 26, 27
CELL_INTERMEDIATE_SCALE, OUTPUT_INTERMEDIATE_SCALE = 28, 29
HIDDEN_STATE_ZERO_POINT, HIDDEN_STATE_SCALE = 30, 31
NUM_INPUTS = 32

OUTPUT_STATE_OUT, CELL_STATE_OUT, OUTPUT = 0, 1, 2

# Per gate, in the order input, forget, cell, output.
INPUT_GATE, FORGET_GATE, CELL_GATE, OUTPUT_GATE = 0, 1, 2, 3
INPUT_WEIGHTS = (INPUT_TO_INPUT_WEIGHTS, INPUT_TO_FORGET_WEIGHTS, INPUT_TO_CELL_WEIGHTS, INPUT_TO_OUTPUT_WEIGHTS)
RECURRENT_WEIGHTS = (
    RECURRENT_TO_INPUT_WEIGHTS,
    RECURRENT_TO_FORGET_WEIGHTS,
    RECURRENT_TO_CELL_WEIGHTS,
    RECURRENT_TO_OUTPUT_WEIGHTS,
)
GATE_BIASES = (INPUT_GATE_BIAS, FORGET_GATE_BIAS, CELL_GATE_BIAS, OUTPUT_GATE_BIAS)
LAYER_NORMS = (INPUT_LAYER_NORM, FORGET_LAYER_NORM, CELL_LAYER_NORM, OUTPUT_LAYER_NORM)
INTERMEDIATE_SCALES = (
    INPUT_INTERMEDIATE_SCALE,
    FORGET_INTERMEDIATE_SCALE,
    CELL_INTERMEDIATE_SCALE,
    OUTPUT_INTERMEDIATE_SCALE,
)
#: Peephole weights exist for the input, forget and output gates only.
PEEPHOLES = (CELL_TO_INPUT_WEIGHTS, CELL_TO_FORGET_WEIGHTS, CELL_TO_OUTPUT_WEIGHTS)
_PEEPHOLE_OF_GATE = {INPUT_GATE: 0, FORGET_GATE: 1, OUTPUT_GATE: 2}

_REQUIRED = (
    INPUT,
    *INPUT_WEIGHTS[1:],
    *RECURRENT_WEIGHTS[1:],
    *GATE_BIASES[1:],
    OUTPUT_STATE_IN,
    CELL_STATE_IN,
    *INTERMEDIATE_SCALES,
    HIDDEN_STATE_ZERO_POINT,
    HIDDEN_STATE_SCALE,
)
_INT16_MIN, _INT16_MAX = -32768, 32767


def validate_qlstm(v: ValidationContext) -> HalVersion:
    v.expect_counts(NUM_INPUTS, 3)
    expected: list[OperandType] = [T.TENSOR_QUANT8_ASYMM_SIGNED]
    expected += [T.TENSOR_QUANT8_SYMM] * 8 + [T.TENSOR_QUANT16_SYMM] * 3 + [T.TENSOR_INT32] * 4
    expected += [T.TENSOR_QUANT8_SYMM, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_SYMM]
    expected += [T.TENSOR_QUANT16_SYMM] * 4 + [T.FLOAT32] * 6 + [T.INT32, T.FLOAT32]
    v.expect_types(expected, [T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT8_ASYMM_SIGNED])
    for i in _REQUIRED:
        v.require(not v.is_omitted(i), f"required input {i} is omitted")
    for i in (INPUT, *INPUT_WEIGHTS, *RECURRENT_WEIGHTS, PROJECTION_WEIGHTS, OUTPUT_STATE_IN, CELL_STATE_IN):
        check_known_rank(v, i, 2)
    for i in (*PEEPHOLES, *GATE_BIASES, PROJECTION_BIAS, *LAYER_NORMS):
        check_known_rank(v, i, 1)
    has_xi, has_hi = presence(v, INPUT_TO_INPUT_WEIGHTS), presence(v, RECURRENT_TO_INPUT_WEIGHTS)
    if has_xi is not None and has_hi is not None and has_xi != has_hi:
        v.fail("input-to-input and recurrent-to-input weights must be all or none")
    for i in (*INTERMEDIATE_SCALES, HIDDEN_STATE_SCALE):
        value = v.constant_scalar(i)
        if value is not None:
            v.require(math.isfinite(value) and value > 0, f"input {i} (a scale) must be finite and > 0, got {value}")
    for i in (CELL_CLIP, PROJECTION_CLIP):
        value = v.constant_scalar(i)
        if value is not None:
            v.require(math.isfinite(value) and value >= 0, f"input {i} (a clip) must be finite and >= 0, got {value}")
    cell = v.inputs[CELL_STATE_IN]
    if cell.scale > 0:
        shift = checked_log2(cell.scale)
        v.require(shift is not None and shift <= -9, "cell state scale must be a power of two <= 2^-9")
    return HalVersion.V1_3


# -- integer kernels ----------------------------------------------------------------------
def _matmul_accumulate(
    x: np.ndarray, eff_bias: np.ndarray, w: np.ndarray, mult: tuple[int, int], out_zp: int, acc: np.ndarray, bits: int
) -> np.ndarray:
    """MatrixBatchVectorMultiplyAccumulate (integer), saturating to a signed ``bits``-bit range."""
    prod = x @ w.T + eff_bias
    prod = multiply_by_quantized_multiplier(wrap(prod, 32), mult[0], mult[1]) + out_zp + acc
    return np.asarray(np.clip(prod, -(1 << (bits - 1)), (1 << (bits - 1)) - 1))


def _apply_layer_norm(
    x: np.ndarray, weights: np.ndarray, bias: np.ndarray, scale_a: int, scale_b: int, variance_limit: int
) -> np.ndarray:
    """QuantUtils ApplyLayerNorm, vectorised over the batch."""
    guard = 1 << 20
    n = x.shape[1]
    total = x.sum(axis=1)
    total_sq = (x * x).sum(axis=1)
    mean = wrap(np.where(total >= 0, (total * 1024) // n, -((-total * 1024) // n)), 32)
    variance = total_sq * (guard // n) - mean * mean
    variance2 = wrap(np.where(variance >= 0, variance // guard, -((-variance) // guard)), 32)
    variance2 = np.where(variance2 < 1, variance_limit, variance2)
    inv_a, inv_b = inv_sqrt_multiplier(variance2)
    shifted = wrap(1024 * x - mean[:, None], 32)
    rescaled = multiply_by_quantized_multiplier(shifted, inv_a[:, None], inv_b[:, None])
    val3 = rescaled * weights.astype(np.int64) + bias.astype(np.int64)
    rounded = np.where(val3 > 0, val3 + 512, val3 - 512)
    val4 = wrap(np.where(rounded >= 0, rounded // 1024, -((-rounded) // 1024)), 32)
    val5 = multiply_by_quantized_multiplier(val4, scale_a, scale_b + 12)
    return np.asarray(np.clip(val5, _INT16_MIN, _INT16_MAX))


def _saturated_clip(limit: float, scale: float, bits: int) -> int:
    """A clip threshold in the raw domain, cast to the raw type as the reference does."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    raw = int(np.clip(np.float32(limit) / np.float32(scale), float(lo), float(hi)))
    return int(wrap(np.array(raw, np.int64), bits))


# -- operands of one execution ---------------------------------------------------------------
@dataclass
class _Gate:
    """One gate's integer matmul parameters."""

    w_x: np.ndarray
    w_h: np.ndarray
    eff_bias_x: np.ndarray
    eff_bias_h: np.ndarray
    mult_x: tuple[int, int]
    mult_h: tuple[int, int]
    peep: np.ndarray | None
    mult_peep: tuple[int, int]
    ln: np.ndarray | None
    mult_ln: tuple[int, int]
    ln_limit: int
    bias: np.ndarray


class _Operands:
    """The tensors of one execution, read as int64 and checked (shapes, all-or-none rules)."""

    def __init__(self, ctx: ExecutionContext) -> None:
        self.ctx = ctx
        x = self.required(INPUT)
        ctx.require(x.ndim == 2, "input must be 2-D")
        self.x = x
        self.n_batch, n_input = x.shape
        w_xo = self.required(INPUT_TO_OUTPUT_WEIGHTS)
        w_ho = self.required(RECURRENT_TO_OUTPUT_WEIGHTS)
        self.n_units = n_units = w_xo.shape[0]
        self.n_output = n_output = w_ho.shape[1]
        ctx.require(w_xo.shape == (n_units, n_input), "input-to-output weights do not match the input")
        self.prev_out = self.required(OUTPUT_STATE_IN)
        self.prev_cell = self.required(CELL_STATE_IN)
        batch = self.n_batch
        ctx.require(self.prev_out.shape == (batch, n_output), f"output state must be [{batch}, {n_output}]")
        ctx.require(self.prev_cell.shape == (batch, n_units), f"cell state must be [{batch}, {n_units}]")
        self.cifg = cifg = self.optional(INPUT_TO_INPUT_WEIGHTS) is None
        ctx.require(
            cifg == (self.optional(RECURRENT_TO_INPUT_WEIGHTS) is None),
            "input-to-input and recurrent-to-input weights must be all or none",
        )
        for g in self.gates():
            ctx.require(self.required(INPUT_WEIGHTS[g]).shape == (n_units, n_input), "input weights shape mismatch")
            ctx.require(
                self.required(RECURRENT_WEIGHTS[g]).shape == (n_units, n_output), "recurrent weights shape mismatch"
            )
        self.peeps = peeps = [self.optional(i) for i in PEEPHOLES]
        self.lns = lns = [self.optional(i) for i in LAYER_NORMS]
        self.biases = biases = [self.optional(i) for i in GATE_BIASES]
        for a in (*peeps, *lns, *biases):
            ctx.require(a is None or a.shape == (n_units,), f"per-unit vectors must have shape [{n_units}]")
        ctx.require(cifg == (biases[0] is None), "input gate bias must be given exactly when CIFG is not used")
        ctx.require(all(b is not None for b in biases[1:]), "forget/cell/output gate biases are required")
        ctx.require((peeps[1] is None) == (peeps[2] is None), "peephole weights must be all or none")
        ctx.require(cifg or (peeps[0] is None) == (peeps[2] is None), "peephole weights must be all or none")
        ctx.require(not cifg or peeps[0] is None, "cell-to-input weights must be omitted with CIFG")
        ln_rest = lns[1:] if cifg else lns
        ctx.require(not cifg or lns[0] is None, "input layer norm weights must be omitted with CIFG")
        ctx.require(
            all(a is None for a in ln_rest) or all(a is not None for a in ln_rest),
            "layer norm weights must be all or none",
        )
        self.use_layer_norm = ln_rest[-1] is not None
        self.proj_w = proj_w = self.optional(PROJECTION_WEIGHTS)
        self.proj_b = proj_b = self.optional(PROJECTION_BIAS)
        ctx.require(proj_w is None or proj_w.shape == (n_output, n_units), "projection weights shape mismatch")
        ctx.require(proj_b is None or proj_b.shape == (n_output,), "projection bias shape mismatch")
        ctx.require(proj_w is not None or n_output == n_units, "without projection output_size must equal num_units")

    def optional(self, i: int) -> np.ndarray | None:
        a = self.ctx.optional(i)
        return None if a is None or a.size == 0 else a.astype(np.int64)

    def required(self, i: int) -> np.ndarray:
        a = self.optional(i)
        self.ctx.require(a is not None, f"required input {i} is omitted")
        assert a is not None
        return a

    def gates(self) -> range:
        """The gates present: all four, or forget / cell / output with CIFG."""
        return range(FORGET_GATE, 4) if self.cifg else range(4)


def _multiplier(ctx: ExecutionContext, real: float) -> tuple[int, int]:
    ctx.require(math.isfinite(real) and real >= 0, f"invalid effective scale {real}")
    q, s = quantize_multiplier(real)
    ctx.require(q <= INT32_MAX, "effective scale out of range")
    return q, s


def _gate(ctx: ExecutionContext, ops: _Operands, g: int, cell_shift: int, inter: list[float]) -> _Gate:
    w_x, w_h = ops.required(INPUT_WEIGHTS[g]), ops.required(RECURRENT_WEIGHTS[g])
    bias = ops.biases[g]
    assert bias is not None
    eff_x = w_x.sum(axis=1) * -ctx.zero_point(INPUT)
    eff_h = w_h.sum(axis=1) * -ctx.zero_point(OUTPUT_STATE_IN)
    if not ops.use_layer_norm:
        # Without layer norm the bias enters with the matmul (TFLite integer LSTM).
        eff_x = eff_x + bias
    slot = _PEEPHOLE_OF_GATE.get(g)
    peep = None if slot is None else ops.peeps[slot]
    mult_peep = (0, 0)
    if peep is not None and slot is not None:
        real = float(np.float32(2.0**cell_shift * ctx.scale(PEEPHOLES[slot]) / inter[g]))
        mult_peep = _multiplier(ctx, real)
    ln = ops.lns[g]
    mult_ln = (0, 0)
    ln_limit = 0
    if ln is not None:
        mult_ln = _multiplier(ctx, ctx.scale(LAYER_NORMS[g]))
        ln_limit = min(1, int(np.float32(10000) * np.float32(ctx.scale(LAYER_NORMS[g]))))
    return _Gate(
        w_x=w_x,
        w_h=w_h,
        eff_bias_x=eff_x,
        eff_bias_h=eff_h,
        mult_x=_multiplier(ctx, f32_scale(ctx.scale(INPUT_WEIGHTS[g]), ctx.scale(INPUT), divide_by=inter[g])),
        mult_h=_multiplier(
            ctx, f32_scale(ctx.scale(RECURRENT_WEIGHTS[g]), ctx.scale(OUTPUT_STATE_IN), divide_by=inter[g])
        ),
        peep=peep,
        mult_peep=mult_peep,
        ln=ln if ops.use_layer_norm else None,
        mult_ln=mult_ln,
        ln_limit=ln_limit,
        bias=bias,
    )


def _gate_preactivation(ops: _Operands, q: _Gate, cell_state: np.ndarray) -> np.ndarray:
    """A gate's Q3.12 input: both matmuls, the peephole term and the layer norm."""
    acc = np.zeros((ops.n_batch, ops.n_units), np.int64)
    acc = _matmul_accumulate(ops.x, q.eff_bias_x, q.w_x, q.mult_x, 0, acc, 16)
    acc = _matmul_accumulate(ops.prev_out, q.eff_bias_h, q.w_h, q.mult_h, 0, acc, 16)
    if q.peep is not None:
        prod = multiply_by_quantized_multiplier(q.peep * cell_state, q.mult_peep[0], q.mult_peep[1])
        acc = np.clip(prod + acc, _INT16_MIN, _INT16_MAX)
    if q.ln is not None:
        acc = _apply_layer_norm(acc, q.ln, q.bias, q.mult_ln[0], q.mult_ln[1], q.ln_limit)
    return acc


def execute_qlstm(ctx: ExecutionContext) -> None:
    ops = _Operands(ctx)
    cell_shift = checked_log2(ctx.scale(CELL_STATE_IN))
    ctx.require(cell_shift is not None and cell_shift <= -9, "cell state scale must be a power of two <= 2^-9")
    assert cell_shift is not None
    cell_clip = float(ctx.scalar(CELL_CLIP)) if ctx.has(CELL_CLIP) else 0.0
    proj_clip = float(ctx.scalar(PROJECTION_CLIP)) if ctx.has(PROJECTION_CLIP) else 0.0
    inter = [float(ctx.scalar(i)) for i in INTERMEDIATE_SCALES]
    hidden_zp = int(ctx.scalar(HIDDEN_STATE_ZERO_POINT))
    hidden_scale = float(ctx.scalar(HIDDEN_STATE_SCALE))
    ctx.require(hidden_scale > 0 and all(s > 0 for s in inter), "hidden state and intermediate scales must be > 0")
    gates = {g: _gate(ctx, ops, g, cell_shift, inter) for g in ops.gates()}
    prev_cell = ops.prev_cell

    forget = fx_logistic(_gate_preactivation(ops, gates[FORGET_GATE], prev_cell), 3)
    cell_gate = fx_tanh(_gate_preactivation(ops, gates[CELL_GATE], prev_cell), 3)
    if ops.cifg:
        input_gate = _INT16_MAX - forget
    else:
        input_gate = fx_logistic(_gate_preactivation(ops, gates[INPUT_GATE], prev_cell), 3)

    forget_term = wrap(rounding_divide_by_pot(forget * prev_cell, 15), 16)
    input_term = wrap(rounding_divide_by_pot(input_gate * cell_gate, 30 + cell_shift), 16)
    cell = np.clip(forget_term + input_term, _INT16_MIN, _INT16_MAX)
    if cell_clip > 0:
        q_clip = _saturated_clip(cell_clip, ctx.scale(CELL_STATE_IN), 16)
        if q_clip > 0:
            cell = np.clip(cell, -q_clip, q_clip)

    output_gate = fx_logistic(_gate_preactivation(ops, gates[OUTPUT_GATE], cell), 3)
    tanh_bits = cell_shift + 15
    # The reference leaves its buffer (holding the input gate) untouched for other widths.
    cell_act = fx_tanh(cell, tanh_bits) if 0 <= tanh_bits <= 6 else input_gate
    hidden_m = _multiplier(ctx, float(np.float32(2.0**-15 / hidden_scale * 2.0**-15)))
    hidden = multiply_by_quantized_multiplier(output_gate * cell_act, hidden_m[0], hidden_m[1]) - hidden_zp
    hidden = np.clip(hidden, -128, 127)

    if ops.proj_w is not None:
        s_h = ctx.scale(OUTPUT_STATE_IN)
        proj_m = _multiplier(ctx, f32_scale(ctx.scale(PROJECTION_WEIGHTS), hidden_scale, divide_by=s_h))
        eff = ops.proj_w.sum(axis=1) * hidden_zp + (ops.proj_b if ops.proj_b is not None else 0)
        zero = np.zeros((ops.n_batch, ops.n_output), np.int64)
        out = _matmul_accumulate(hidden, eff, ops.proj_w, proj_m, ctx.zero_point(OUTPUT_STATE_IN), zero, 8)
        if proj_clip > 0:
            q_pclip = _saturated_clip(proj_clip, ctx.scale(PROJECTION_WEIGHTS), 8)
            if q_pclip > 0:
                out = np.clip(out, -q_pclip, q_pclip)
    else:
        out = hidden
    ctx.set_output(OUTPUT_STATE_OUT, out)
    ctx.set_output(CELL_STATE_OUT, cell)
    ctx.set_output(OUTPUT, out)


register(OperationType.QUANTIZED_LSTM, validate=validate_qlstm, execute=execute_qlstm, execution_failure=INVALID)

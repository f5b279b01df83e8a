"""LSTM operations: LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM, BIDIRECTIONAL_SEQUENCE_LSTM,
QUANTIZED_LSTM and QUANTIZED_16BIT_LSTM.

The float variants share one cell (CIFG, peephole, projection, clipping, layer
normalization, auxiliary input) that runs a whole sequence: the input-side
matrix products of every time step are one GEMM, only the recurrent product is
per step. Float16 is computed in float32.

The two quantized variants follow the reference integer arithmetic (gemmlowp
fixed point): the fixed-point helpers below are vectorised over int64 arrays
that hold 16- or 32-bit values, wrapping or saturating exactly where the C++
types do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nnhal.core.enums import HalVersion, OperandLifeTime, OperandType, OperationType
from nnhal.core.errors import InvalidArgument
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    INT32_MAX,
    T,
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
)
from nnhal.server.executor.registry import register

Op = OperationType

# =============================================================================
# Shared float helpers
# =============================================================================

#: Cell activations LSTM accepts (TfLiteFusedActivation codes).
_ACTIVATIONS = (0, 1, 2, 3, 4, 6)


def activation(x: np.ndarray, code: int) -> np.ndarray:
    """The LSTM/RNN cell activation g (0 none, 1 relu, 2 relu1, 3 relu6, 4 tanh, 6 sigmoid)."""
    if code == 0:
        return x
    if code == 1:
        return np.asarray(np.maximum(x, 0))
    if code == 2:
        return np.asarray(np.clip(x, -1, 1))
    if code == 3:
        return np.asarray(np.clip(x, 0, 6))
    if code == 4:
        return np.asarray(np.tanh(x))
    if code == 6:
        return sigmoid(x)
    raise InvalidArgument(f"unsupported activation function {code}")


def sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.asarray(1 / (1 + np.exp(-x)), dtype=x.dtype)


def _layer_norm(x: np.ndarray) -> np.ndarray:
    """Normalise each row to zero mean and unit variance (epsilon as the reference: 1e-8)."""
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    var = (centered * centered).mean(axis=-1, keepdims=True)
    return np.asarray(centered / np.sqrt(var + np.float32(1e-8)))


def _f32(a: np.ndarray | None) -> np.ndarray | None:
    if a is None or a.size == 0:
        return None
    return a.astype(np.float32, copy=False)


def _need(cond: bool, op: str, message: str) -> None:
    if not cond:
        raise InvalidArgument(f"{op}: {message}")


def _known_dims(v: ValidationContext, i: int) -> tuple[int, ...] | None:
    """Declared dims of input ``i`` when fully specified (no zero / unknown dims)."""
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


def _check_constant_int_in(v: ValidationContext, i: int, allowed: Sequence[int], what: str) -> None:
    value = v.constant_scalar(i)
    if value is not None:
        v.require(int(value) in allowed, f"unsupported {what} {value}")


def _check_constant_nonneg(v: ValidationContext, i: int, what: str) -> None:
    value = v.constant_scalar(i)
    if value is not None and not v.is_omitted(i):
        v.require(float(value) >= 0, f"{what} must be >= 0, got {value}")


# =============================================================================
# Float LSTM cell
# =============================================================================


@dataclass(frozen=True)
class _CellIndexes:
    """Where one direction's tensors sit among the operation inputs."""

    to_x: tuple[int, int, int, int]  # input-to-{input, forget, cell, output} weights
    to_h: tuple[int, int, int, int]  # recurrent-to-{input, forget, cell, output}
    peephole: tuple[int, int, int]  # cell-to-{input, forget, output}
    bias: tuple[int, int, int, int]
    proj_w: int
    proj_b: int
    layer_norm: tuple[int, int, int, int] | None
    aux: tuple[int, int, int, int] | None = None


_LSTM_CELL = _CellIndexes((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11), (12, 13, 14, 15), 16, 17, (23, 24, 25, 26))
_LSTM_CELL_V10 = _CellIndexes((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11), (12, 13, 14, 15), 16, 17, None)
_UNI_CELL = _CellIndexes((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11), (12, 13, 14, 15), 16, 17, (24, 25, 26, 27))
_BIDI_FW = _CellIndexes(
    (1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11), (12, 13, 14, 15), 16, 17, (53, 54, 55, 56), (40, 41, 42, 43)
)
_BIDI_BW = _CellIndexes(
    (18, 19, 20, 21),
    (22, 23, 24, 25),
    (26, 27, 28),
    (29, 30, 31, 32),
    33,
    34,
    (57, 58, 59, 60),
    (44, 45, 46, 47),
)


@dataclass
class _FloatCell:
    """One direction's weights, gates stacked as [input], forget, cell, output."""

    cifg: bool
    n_cell: int
    n_output: int
    w_x: np.ndarray  # [G * n_cell, n_input]
    w_h: np.ndarray  # [G * n_cell, n_output]
    w_aux: np.ndarray | None  # [G * n_cell, n_aux]
    bias: np.ndarray  # [G * n_cell]
    peep_i: np.ndarray | None
    peep_f: np.ndarray | None
    peep_o: np.ndarray | None
    ln: np.ndarray | None  # [G * n_cell] layer-norm weights
    proj_w: np.ndarray | None
    proj_b: np.ndarray | None


def _load_cell(ctx: ExecutionContext, idx: _CellIndexes, n_input: int, use_aux_weights: bool) -> _FloatCell:
    """Read and check one direction's tensors (shapes and all-or-none rules)."""
    op = ctx.op_type.name

    def get(i: int) -> np.ndarray | None:
        return _f32(ctx.optional(i))

    def req(i: int) -> np.ndarray:
        a = get(i)
        _need(a is not None, op, f"required input {i} is omitted")
        assert a is not None
        return a

    w_xo = req(idx.to_x[3])
    w_ho = req(idx.to_h[3])
    _need(w_xo.ndim == 2 and w_ho.ndim == 2, op, "weights must be 2-D")
    n_cell = w_xo.shape[0]
    n_output = w_ho.shape[1]
    _need(w_xo.shape[1] == n_input, op, f"input-to-output weights must be [{n_cell}, {n_input}]")
    _need(w_ho.shape[0] == n_cell, op, "recurrent-to-output weights must have num_units rows")

    x_i = get(idx.to_x[0])
    h_i = get(idx.to_h[0])
    _need((x_i is None) == (h_i is None), op, "input-to-input and recurrent-to-input weights must be all or none")
    cifg = x_i is None
    gates = range(1, 4) if cifg else range(4)

    def shaped(a: np.ndarray | None, shape: tuple[int, ...], what: str) -> np.ndarray | None:
        if a is not None:
            _need(a.shape == shape, op, f"{what} must have shape {list(shape)}, got {list(a.shape)}")
        return a

    w_x = [shaped(get(idx.to_x[g]) if g else x_i, (n_cell, n_input), "input weights") for g in gates]
    w_h = [shaped(get(idx.to_h[g]) if g else h_i, (n_cell, n_output), "recurrent weights") for g in gates]
    _need(all(w is not None for w in w_x + w_h), op, "required weights are omitted")

    peep = [shaped(get(i), (n_cell,), "peephole weights") for i in idx.peephole]
    if cifg:
        _need(peep[0] is None, op, "cell-to-input weights must be omitted with CIFG")
        _need((peep[1] is None) == (peep[2] is None), op, "peephole weights must be all or none")
    else:
        _need(
            all(p is None for p in peep) or all(p is not None for p in peep),
            op,
            "peephole weights must be all or none",
        )

    biases = [shaped(get(idx.bias[g]), (n_cell,), "gate bias") for g in range(4)]
    if cifg:
        _need(biases[0] is None, op, "input gate bias must be omitted with CIFG")
    else:
        _need(biases[0] is not None, op, "input gate bias is required without CIFG")
    _need(all(biases[g] is not None for g in range(1, 4)), op, "forget/cell/output gate biases are required")

    proj_w = shaped(get(idx.proj_w), (n_output, n_cell), "projection weights")
    proj_b = shaped(get(idx.proj_b), (n_output,), "projection bias")
    _need(proj_w is not None or proj_b is None, op, "projection bias given without projection weights")
    if proj_w is None:
        _need(n_output == n_cell, op, "without projection output_size must equal num_units")

    ln: np.ndarray | None = None
    if idx.layer_norm is not None:
        lns = [shaped(get(i), (n_cell,), "layer norm weights") for i in idx.layer_norm]
        if cifg:
            _need(lns[0] is None, op, "input layer norm weights must be omitted with CIFG")
            rest = lns[1:]
        else:
            rest = lns
        _need(
            all(w is None for w in rest) or all(w is not None for w in rest),
            op,
            "layer norm weights must be all or none",
        )
        if rest[-1] is not None:
            ln = np.concatenate([lns[g] for g in gates])  # type: ignore[misc]

    w_aux: np.ndarray | None = None
    if idx.aux is not None and use_aux_weights:
        aux = [get(i) for i in idx.aux]
        if cifg:
            _need(aux[0] is None, op, "aux input-to-input weights must be omitted with CIFG")
        present = [aux[g] for g in gates]
        _need(all(a is not None for a in present), op, "aux weights must be all or none")
        n_aux = present[0].shape[1] if present[0] is not None and present[0].ndim == 2 else -1
        for a in present:
            shaped(a, (n_cell, n_aux), "aux weights")
        w_aux = np.concatenate(present)  # type: ignore[arg-type]

    bias = np.concatenate([biases[g] for g in gates])  # type: ignore[misc]
    return _FloatCell(
        cifg=cifg,
        n_cell=n_cell,
        n_output=n_output,
        w_x=np.concatenate(w_x),  # type: ignore[arg-type]
        w_h=np.concatenate(w_h),  # type: ignore[arg-type]
        w_aux=w_aux,
        bias=bias,
        peep_i=peep[0],
        peep_f=peep[1],
        peep_o=peep[2],
        ln=ln,
        proj_w=proj_w,
        proj_b=proj_b,
    )


@dataclass
class _Params:
    act: int
    cell_clip: float
    proj_clip: float


def _run_cell(
    cell: _FloatCell,
    p: _Params,
    x: np.ndarray,
    aux: np.ndarray | None,
    h0: np.ndarray,
    c0: np.ndarray,
    reverse: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Run a time-major sequence x [T, B, I]; returns (outputs [T, B, O], h, c, scratch)."""
    n_time, n_batch = x.shape[0], x.shape[1]
    nc = cell.n_cell
    # Input-side products of every step at once (they do not depend on the recurrence).
    pre = (x.reshape(n_time * n_batch, -1) @ cell.w_x.T).reshape(n_time, n_batch, -1)
    if aux is not None and cell.w_aux is not None:
        pre += (aux.reshape(n_time * n_batch, -1) @ cell.w_aux.T).reshape(n_time, n_batch, -1)
    if cell.ln is None:
        pre += cell.bias
    w_h_t = np.ascontiguousarray(cell.w_h.T)
    proj_t = None if cell.proj_w is None else np.ascontiguousarray(cell.proj_w.T)
    out = np.empty((n_time, n_batch, cell.n_output), dtype=np.float32)
    h = h0.astype(np.float32)
    c = c0.astype(np.float32)
    scratch: list[np.ndarray] = []

    def norm(z: np.ndarray, g: int) -> np.ndarray:
        assert cell.ln is not None
        sl = slice(g * nc, (g + 1) * nc)
        return np.asarray(_layer_norm(z) * cell.ln[sl] + cell.bias[sl])

    steps = range(n_time - 1, -1, -1) if reverse else range(n_time)
    for t in steps:
        z = pre[t] + h @ w_h_t
        k = 0
        i_gate = None
        if not cell.cifg:
            zi = z[:, 0:nc]
            if cell.peep_i is not None:
                zi = zi + c * cell.peep_i
            if cell.ln is not None:
                zi = norm(zi, 0)
            i_gate = sigmoid(zi)
            k = 1
        zf = z[:, k * nc : (k + 1) * nc]
        zc = z[:, (k + 1) * nc : (k + 2) * nc]
        zo = z[:, (k + 2) * nc : (k + 3) * nc]
        if cell.peep_f is not None:
            zf = zf + c * cell.peep_f
        if cell.ln is not None:
            zf = norm(zf, k)
            zc = norm(zc, k + 1)
        f_gate = sigmoid(zf)
        g_cell = activation(zc, p.act)
        if i_gate is None:
            i_gate = 1 - f_gate
        c = f_gate * c + i_gate * g_cell
        if p.cell_clip > 0:
            c = np.clip(c, -p.cell_clip, p.cell_clip)
        if cell.peep_o is not None:
            zo = zo + c * cell.peep_o
        if cell.ln is not None:
            zo = norm(zo, k + 2)
        o_gate = sigmoid(zo)
        g_state = activation(c, p.act)
        hidden = o_gate * g_state
        if proj_t is not None:
            hidden = hidden @ proj_t
            if cell.proj_b is not None:
                hidden = hidden + cell.proj_b
            if p.proj_clip > 0:
                hidden = np.clip(hidden, -p.proj_clip, p.proj_clip)
        h = hidden.astype(np.float32, copy=False)
        out[t] = h
        if t == steps[-1]:
            # The reference's scratch after the last step, gate-major: [i], c, f, o.
            gates = ([] if cell.cifg else [i_gate]) + [g_state, 1 - f_gate if cell.cifg else f_gate, o_gate * g_state]
            scratch = gates
    if n_time == 0:
        scratch = [np.zeros((n_batch, nc), np.float32)] * (3 if cell.cifg else 4)
    scratch_arr = np.stack(scratch).reshape(n_batch, -1)
    return out, h, c, scratch_arr


def _float_params(ctx: ExecutionContext, act_i: int, cell_clip_i: int, proj_clip_i: int) -> _Params:
    op = ctx.op_type.name
    act = int(ctx.scalar(act_i))
    _need(act in _ACTIVATIONS, op, f"unsupported activation function {act}")
    cell_clip = float(ctx.scalar(cell_clip_i)) if ctx.has(cell_clip_i) else 0.0
    proj_clip = float(ctx.scalar(proj_clip_i)) if ctx.has(proj_clip_i) else 0.0
    _need(cell_clip >= 0 and proj_clip >= 0, op, "clipping thresholds must be >= 0")
    return _Params(act, cell_clip, proj_clip)


def _state(ctx: ExecutionContext, i: int, shape: tuple[int, int], what: str) -> np.ndarray:
    a = ctx.tensor(i).astype(np.float32, copy=False)
    _need(a.shape == shape, ctx.op_type.name, f"{what} must have shape {list(shape)}, got {list(a.shape)}")
    return a


# -- validation shared by the float variants ----------------------------------


def _validate_float_types(
    v: ValidationContext,
    tensor_inputs: Sequence[int],
    int_inputs: Sequence[int],
    float_inputs: Sequence[int],
    bool_inputs: Sequence[int],
    required: Sequence[int],
) -> OperandType:
    t = v.expect_input_type_in(0, FLOAT_TYPES)
    scalar_float = T.FLOAT32 if t == T.TENSOR_FLOAT32 else T.FLOAT16
    expected: dict[int, OperandType] = {i: t for i in tensor_inputs}
    expected.update({i: T.INT32 for i in int_inputs})
    expected.update({i: scalar_float for i in float_inputs})
    expected.update({i: T.BOOL for i in bool_inputs})
    for i, want in expected.items():
        if not v.is_omitted(i) and v.input_type(i) != want:
            v.fail(f"input {i} must be {want.name}, got {v.input_type(i).name}")
    for k in range(v.num_outputs):
        if v.output_type(k) != t:
            v.fail(f"output {k} must be {t.name}, got {v.output_type(k).name}")
    for i in required:
        v.require(not v.is_omitted(i), f"required input {i} is omitted")
    return t


def _validate_cell_shapes(v: ValidationContext, idx: _CellIndexes, n_input: int | None) -> None:
    """Ranks and the dims that are declared, for one direction."""
    for i in (*idx.to_x, *idx.to_h, idx.proj_w):
        _check_rank(v, i, 2)
    for i in (*idx.peephole, *idx.bias, idx.proj_b, *(idx.layer_norm or ())):
        if i < v.num_inputs:
            _check_rank(v, i, 1)
    out_w = _known_dims(v, idx.to_x[3])
    if out_w is not None and n_input is not None:
        v.require(out_w[1] == n_input, "input-to-output weights do not match the input size")
    has_xi, has_hi = _presence(v, idx.to_x[0]), _presence(v, idx.to_h[0])
    if has_xi is not None and has_hi is not None and has_xi != has_hi:
        v.fail("input-to-input and recurrent-to-input weights must be all or none")
    if _presence(v, idx.proj_w) is False:
        v.require(_presence(v, idx.proj_b) is not True, "projection bias given without projection weights")


# =============================================================================
# LSTM
# =============================================================================


def validate_lstm(v: ValidationContext) -> HalVersion:
    v.expect_counts((23, 27), 4)
    tensors = list(range(20)) + (list(range(23, 27)) if v.num_inputs == 27 else [])
    t = _validate_float_types(v, tensors, [20], [21, 22], [], (0, 2, 3, 4, 6, 7, 8, 13, 14, 15, 18, 19, 20, 21, 22))
    _check_rank(v, 0, 2)
    _check_rank(v, 18, 2)
    _check_rank(v, 19, 2)
    dims = _known_dims(v, 0)
    _validate_cell_shapes(v, _LSTM_CELL if v.num_inputs == 27 else _LSTM_CELL_V10, dims[1] if dims else None)
    _check_constant_int_in(v, 20, _ACTIVATIONS, "activation function")
    _check_constant_nonneg(v, 21, "cell clip")
    _check_constant_nonneg(v, 22, "projection clip")
    version = HalVersion.V1_0
    if t == T.TENSOR_FLOAT16 or v.num_inputs == 27:
        version = HalVersion.V1_2
    return version


def execute_lstm(ctx: ExecutionContext) -> None:
    op = ctx.op_type.name
    x = ctx.tensor(0).astype(np.float32, copy=False)
    _need(x.ndim == 2, op, f"input must be 2-D, got rank {x.ndim}")
    n_batch, n_input = x.shape
    idx = _LSTM_CELL if len(ctx.inputs) == 27 else _LSTM_CELL_V10
    cell = _load_cell(ctx, idx, n_input, False)
    p = _float_params(ctx, 20, 21, 22)
    h0 = _state(ctx, 18, (n_batch, cell.n_output), "output state")
    c0 = _state(ctx, 19, (n_batch, cell.n_cell), "cell state")
    out, h, c, scratch = _run_cell(cell, p, x[None], None, h0, c0)
    ctx.set_output(0, scratch)
    ctx.set_output(1, h)
    ctx.set_output(2, c)
    ctx.set_output(3, out[0])


# =============================================================================
# UNIDIRECTIONAL_SEQUENCE_LSTM
# =============================================================================


def validate_uni_lstm(v: ValidationContext) -> HalVersion:
    v.expect_counts(28, (1, 3))
    tensors = list(range(20)) + list(range(24, 28))
    _validate_float_types(v, tensors, [20], [21, 22], [23], (0, 2, 3, 4, 6, 7, 8, 13, 14, 15, 18, 19, 20, 21, 22, 23))
    _check_rank(v, 0, 3)
    _check_rank(v, 18, 2)
    _check_rank(v, 19, 2)
    dims = _known_dims(v, 0)
    _validate_cell_shapes(v, _UNI_CELL, dims[2] if dims else None)
    _check_constant_int_in(v, 20, _ACTIVATIONS, "activation function")
    _check_constant_nonneg(v, 21, "cell clip")
    _check_constant_nonneg(v, 22, "projection clip")
    return HalVersion.V1_3 if v.num_outputs == 3 else HalVersion.V1_2


def _to_time_major(a: np.ndarray, time_major: bool) -> np.ndarray:
    return a if time_major else a.transpose(1, 0, 2)


def execute_uni_lstm(ctx: ExecutionContext) -> None:
    op = ctx.op_type.name
    x = ctx.tensor(0).astype(np.float32, copy=False)
    _need(x.ndim == 3, op, f"input must be 3-D, got rank {x.ndim}")
    time_major = bool(ctx.scalar(23))
    xt = _to_time_major(x, time_major)
    n_batch, n_input = xt.shape[1], xt.shape[2]
    cell = _load_cell(ctx, _UNI_CELL, n_input, False)
    p = _float_params(ctx, 20, 21, 22)
    h0 = _state(ctx, 18, (n_batch, cell.n_output), "output state")
    c0 = _state(ctx, 19, (n_batch, cell.n_cell), "cell state")
    out, h, c, _ = _run_cell(cell, p, xt, None, h0, c0)
    ctx.set_output(0, _to_time_major(out, time_major))
    if len(ctx.out_operands) == 3:
        ctx.set_output(1, h)
        ctx.set_output(2, c)


# =============================================================================
# BIDIRECTIONAL_SEQUENCE_LSTM
# =============================================================================


def validate_bidi_lstm(v: ValidationContext) -> HalVersion:
    v.expect_counts(61, (1, 2, 5, 6))
    tensors = list(range(48)) + list(range(53, 61))
    required = (0, 2, 3, 4, 6, 7, 8, 13, 14, 15, 19, 20, 21, 23, 24, 25, 30, 31, 32, 35, 36, 37, 38)
    _validate_float_types(v, tensors, [48], [49, 50], [51, 52], (*required, 48, 49, 50, 51, 52))
    _check_rank(v, 0, 3)
    for i in (35, 36, 37, 38):
        _check_rank(v, i, 2)
    if not v.is_omitted(39):
        _check_rank(v, 39, 3)
    dims = _known_dims(v, 0)
    n_input = dims[2] if dims else None
    _validate_cell_shapes(v, _BIDI_FW, n_input)
    _validate_cell_shapes(v, _BIDI_BW, n_input if v.is_omitted(39) else None)
    _check_constant_int_in(v, 48, _ACTIVATIONS, "activation function")
    _check_constant_nonneg(v, 49, "cell clip")
    _check_constant_nonneg(v, 50, "projection clip")
    merge = v.constant_scalar(51)
    if merge is not None:
        allowed = (1, 5) if merge else (2, 6)
        v.require(v.num_outputs in allowed, f"{v.num_outputs} outputs do not match merge_outputs={bool(merge)}")
    return HalVersion.V1_3 if v.num_outputs in (5, 6) else HalVersion.V1_2


def execute_bidi_lstm(ctx: ExecutionContext) -> None:
    op = ctx.op_type.name
    x = ctx.tensor(0).astype(np.float32, copy=False)
    _need(x.ndim == 3, op, f"input must be 3-D, got rank {x.ndim}")
    time_major = bool(ctx.scalar(52))
    merge = bool(ctx.scalar(51))
    n_out = len(ctx.out_operands)
    _need(n_out in ((1, 5) if merge else (2, 6)), op, f"{n_out} outputs do not match merge_outputs={merge}")
    xt = _to_time_major(x, time_major)
    n_batch, n_input = xt.shape[1], xt.shape[2]

    aux_in = _f32(ctx.optional(39))
    has_aux_weights = any(ctx.has(i) and ctx.tensor(i).size for i in (41, 42, 43, 45, 46, 47))
    _need(aux_in is not None or not has_aux_weights, op, "aux weights given without an aux input")
    aux_t = None
    if aux_in is not None:
        _need(aux_in.ndim == 3, op, "aux input must be 3-D")
        aux_t = _to_time_major(aux_in, time_major)
        _need(aux_t.shape[:2] == xt.shape[:2], op, "aux input must match the input's time and batch sizes")
    parallel = aux_t is not None and not has_aux_weights

    fw = _load_cell(ctx, _BIDI_FW, n_input, has_aux_weights)
    bw_x = aux_t if parallel else xt
    assert bw_x is not None
    bw = _load_cell(ctx, _BIDI_BW, bw_x.shape[2], has_aux_weights)
    if has_aux_weights:
        assert aux_t is not None and fw.w_aux is not None and bw.w_aux is not None
        _need(
            fw.w_aux.shape[1] == aux_t.shape[2] and bw.w_aux.shape[1] == aux_t.shape[2],
            op,
            "aux weights do not match the aux input size",
        )
    p = _float_params(ctx, 48, 49, 50)
    cross_aux = aux_t if has_aux_weights else None

    fw_h0 = _state(ctx, 35, (n_batch, fw.n_output), "forward output state")
    fw_c0 = _state(ctx, 36, (n_batch, fw.n_cell), "forward cell state")
    bw_h0 = _state(ctx, 37, (n_batch, bw.n_output), "backward output state")
    bw_c0 = _state(ctx, 38, (n_batch, bw.n_cell), "backward cell state")
    fw_out, fw_h, fw_c, _ = _run_cell(fw, p, xt, cross_aux, fw_h0, fw_c0)
    bw_out, bw_h, bw_c, _ = _run_cell(bw, p, bw_x, cross_aux, bw_h0, bw_c0, reverse=True)
    if merge:
        ctx.set_output(0, _to_time_major(np.concatenate([fw_out, bw_out], axis=2), time_major))
        first_state = 1
    else:
        ctx.set_output(0, _to_time_major(fw_out, time_major))
        ctx.set_output(1, _to_time_major(bw_out, time_major))
        first_state = 2
    if n_out in (5, 6):
        for k, value in enumerate((fw_h, fw_c, bw_h, bw_c)):
            ctx.set_output(first_state + k, value)


# =============================================================================
# gemmlowp fixed point, vectorised (raw values in int64 arrays)
# =============================================================================


def _wrap(x: np.ndarray, bits: int) -> np.ndarray:
    """Two's-complement wrap to ``bits`` (the C++ cast back to the raw type)."""
    half = np.int64(1 << (bits - 1))
    mask = np.int64((1 << bits) - 1)
    return ((np.asarray(x, np.int64) + half) & mask) - half


def _trunc_div_pot(x: np.ndarray, k: int) -> np.ndarray:
    """C++ integer division by 2^k (truncation toward zero)."""
    return np.where(x >= 0, x >> k, -((-x) >> k))


def _fx_mul(a: np.ndarray, b: np.ndarray | int, bits: int) -> np.ndarray:
    """SaturatingRoundingDoublingHighMul for 16- or 32-bit raw values."""
    a = np.asarray(a, np.int64)
    b = np.asarray(b, np.int64)
    ab = a * b
    k = bits - 1
    nudge = np.where(ab >= 0, np.int64(1 << (k - 1)), np.int64(1 - (1 << (k - 1))))
    res = _trunc_div_pot(ab + nudge, k)
    lo = -(1 << k)
    return np.where((a == lo) & (b == lo), np.int64((1 << k) - 1), res)


def _fx_mul_pot(x: np.ndarray, exponent: int, bits: int) -> np.ndarray:
    """SaturatingRoundingMultiplyByPOT: saturating left shift or rounding right shift."""
    if exponent == 0:
        return x
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    threshold = (1 << (bits - 1 - exponent)) - 1
    result = _wrap(x * np.int64(1 << exponent), bits)
    result = np.where(x > threshold, np.int64((1 << (bits - 1)) - 1), result)
    return np.where(x < -threshold, np.int64(-(1 << (bits - 1))), result)


def _fx_rescale(x: np.ndarray, src_ib: int, dst_ib: int, bits: int) -> np.ndarray:
    return _fx_mul_pot(x, src_ib - dst_ib, bits)


def _fx_const(int32_value: int, bits: int) -> int:
    """A gemmlowp constant given as a 32-bit raw value, rescaled to the raw type."""
    if bits == 32:
        return int32_value
    return int(rounding_divide_by_pot(np.array(int32_value, np.int64), 32 - bits))


def _fx_one(ib: int, bits: int) -> int:
    return (1 << (bits - 1)) - 1 if ib == 0 else 1 << (bits - 1 - ib)


def _fx_add_sat_if16(a: np.ndarray, b: np.ndarray, bits: int) -> np.ndarray:
    s = a + b
    if bits == 16:
        return np.asarray(np.clip(s, -32768, 32767))
    return _wrap(s, bits)


def _exp_on_quarter_interval(a: np.ndarray, bits: int) -> np.ndarray:
    """exp(a) for a in [-1/4, 0), F0 in and out."""
    const_term = _fx_const(1895147668, bits)
    one_third = _fx_const(715827883, bits)
    x = _wrap(a + (1 << (bits - 1 - 3)), bits)
    x2 = _fx_mul(x, x, bits)
    x3 = _fx_mul(x2, x, bits)
    x4 = _fx_mul(x2, x2, bits)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    poly = _wrap(_fx_mul(_wrap(x4_over_4 + x3, bits), one_third, bits) + x2, bits)
    poly = rounding_divide_by_pot(poly, 1)
    const = np.array(const_term, np.int64)
    return _fx_add_sat_if16(const, _fx_mul(const, _wrap(x + poly, bits), bits), bits)


_EXP_BARREL = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308), (2, 39332535), (3, 720401), (4, 242))


def _exp_on_negative(a: np.ndarray, ib: int, bits: int) -> np.ndarray:
    """exp(a) for a <= 0 given with ``ib`` integer bits; F0 result."""
    fb = bits - 1 - ib
    quarter = 1 << (fb - 2)
    a_mod = _wrap((a & (quarter - 1)) - quarter, bits)
    result = _exp_on_quarter_interval(_fx_rescale(a_mod, ib, 0, bits), bits)
    remainder = _wrap(a_mod - a, bits)
    for exponent, multiplier in _EXP_BARREL:
        if ib > exponent:
            bit = np.int64(1 << (fb + exponent))
            result = np.where((remainder & bit) != 0, _fx_mul(result, _fx_const(multiplier, bits), bits), result)
    if ib > 5:
        clamp = _fx_const(-(1 << (36 - ib)), bits)
        result = np.where(a < clamp, np.int64(0), result)
    return np.where(a == 0, np.int64(_fx_one(0, bits)), result)


def _rounding_half_sum(a: np.ndarray, b: int) -> np.ndarray:
    s = a + b
    return _trunc_div_pot(s + np.where(s >= 0, 1, -1), 1)


def _newton_reciprocal(a: np.ndarray, bits: int) -> np.ndarray:
    """x ~ 1 / ((1 + a) / 2) in F2, three Newton-Raphson steps (a in F0)."""
    half_den = _rounding_half_sum(a, _fx_one(0, bits))
    c48_17 = _fx_const(1515870810, bits)
    c_neg32_17 = _fx_const(-1010580540, bits)
    one2 = _fx_one(2, bits)
    x = _wrap(c48_17 + _fx_mul(half_den, c_neg32_17, bits), bits)
    for _ in range(3):
        one_minus = _wrap(one2 - _fx_mul(half_den, x, bits), bits)
        x = _wrap(x + _fx_rescale(_fx_mul(x, one_minus, bits), 4, 2, bits), bits)
    return x


def fx_logistic(a: np.ndarray, ib: int, bits: int = 16) -> np.ndarray:
    """gemmlowp::logistic on raw values with ``ib`` integer bits; F0 raw result."""
    a = np.asarray(a, np.int64)
    positive = a > 0
    abs_a = np.where(positive, a, _wrap(-a, bits))
    e = _exp_on_negative(_wrap(-abs_a, bits), ib, bits)
    result_pos = _fx_rescale(_newton_reciprocal(e, bits), 1, 0, bits)
    result_neg = _wrap(_fx_one(0, bits) - result_pos, bits)
    half = _fx_const(1 << 30, bits)
    return np.where(a == 0, np.int64(half), np.where(positive, result_pos, result_neg))


def fx_tanh(a: np.ndarray, ib: int, bits: int = 16) -> np.ndarray:
    """gemmlowp::tanh on raw values with ``ib`` integer bits; F0 raw result."""
    a = np.asarray(a, np.int64)
    negative = a < 0
    n = np.where(negative, a, _wrap(-a, bits))
    e = _exp_on_negative(n, ib + 1, bits)
    t = _fx_rescale(_wrap(_newton_reciprocal(e, bits) - _fx_one(2, bits), bits), 2, 0, bits)
    return np.where(a == 0, np.int64(0), np.where(negative, _wrap(-t, bits), t))


# -- TFLite/NN QuantUtils integer kernels ---------------------------------------


def _mbqm_array(x: np.ndarray, multiplier: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """MultiplyByQuantizedMultiplier with per-element multipliers and shifts."""
    x = np.asarray(x, np.int64)
    multiplier = np.asarray(multiplier, np.int64)
    shift = np.asarray(shift, np.int64)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    prod = _fx_mul(x * (np.int64(1) << left), multiplier, 32)
    mask = (np.int64(1) << right) - 1
    remainder = prod & mask
    threshold = (mask >> 1) + (prod < 0)
    return np.asarray((prod >> right) + (remainder > threshold))


def _inv_sqrt_multiplier(value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GetInvSqrtQuantizedMultiplierExp(value, reverse_shift=-1), per element."""
    value = np.asarray(value, np.int64)
    small = value <= 1
    v = np.where(small, np.int64(1 << 28), value)
    shift = np.full(v.shape, 11, np.int64)
    for _ in range(2):
        big = v >= (1 << 29)
        v = np.where(big, v // 4, v)
        shift += big
    bit_length = np.frexp(v.astype(np.float64))[1].astype(np.int64)
    max_left_shift_bits = (32 - bit_length) - 1
    left_pairs = max_left_shift_bits // 2 - 1
    shift -= left_pairs
    v = v << (2 * left_pairs)
    fixed_input = v >> 1
    half_input = rounding_divide_by_pot(fixed_input, 1)
    half_three = np.array((1 << 28) + (1 << 27), np.int64)
    x = np.full(v.shape, 1 << 28, np.int64)
    for _ in range(5):
        x3 = _fx_rescale(_fx_mul(_fx_mul(x, x, 32), x, 32), 9, 3, 32)
        x = _fx_rescale(_wrap(_fx_mul(half_three, x, 32) - _fx_mul(half_input, x3, 32), 32), 6, 3, 32)
    x = _fx_mul(x, 1518500250, 32)
    neg = shift < 0
    x = np.where(neg, _wrap(x << np.where(neg, -shift, 0), 32), x)
    shift = np.where(neg, 0, shift)
    shift = -shift
    return np.where(small, np.int64(INT32_MAX), x), np.where(small, np.int64(0), shift)


def _apply_layer_norm(
    x: np.ndarray, weights: np.ndarray, bias: np.ndarray, scale_a: int, scale_b: int, variance_limit: int
) -> np.ndarray:
    """QuantUtils ApplyLayerNorm, vectorised over the batch."""
    guard = 1 << 20
    n = x.shape[1]
    total = x.sum(axis=1)
    total_sq = (x * x).sum(axis=1)
    mean = _wrap(np.where(total >= 0, (total * 1024) // n, -((-total * 1024) // n)), 32)
    variance = total_sq * (guard // n) - mean * mean
    variance2 = _wrap(np.where(variance >= 0, variance // guard, -((-variance) // guard)), 32)
    variance2 = np.where(variance2 < 1, variance_limit, variance2)
    inv_a, inv_b = _inv_sqrt_multiplier(variance2)
    shifted = _wrap(1024 * x - mean[:, None], 32)
    rescaled = _mbqm_array(shifted, inv_a[:, None], inv_b[:, None])
    val3 = rescaled * weights.astype(np.int64) + bias.astype(np.int64)
    rounded = np.where(val3 > 0, val3 + 512, val3 - 512)
    val4 = _wrap(np.where(rounded >= 0, rounded // 1024, -((-rounded) // 1024)), 32)
    val5 = multiply_by_quantized_multiplier(val4, scale_a, scale_b + 12)
    return np.asarray(np.clip(val5, -32768, 32767))


def _checked_log2(x: float) -> int | None:
    """CheckedLog2 in float32 arithmetic; None when x is not a power of two."""
    if not x > 0 or not math.isfinite(x):
        return None
    x_log2 = np.float32(np.log(np.float32(x))) * (np.float32(1.0) / np.float32(np.log(np.float32(2.0))))
    rounded = float(round_half_away_scalar(float(x_log2)))
    if abs(float(x_log2) - rounded) >= 1e-3:
        return None
    return int(rounded)


def round_half_away_scalar(x: float) -> float:
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def _f32_scale(*factors: float, divide_by: float) -> float:
    """a * b / c evaluated in float32 as the reference does."""
    acc = np.float32(factors[0])
    for f in factors[1:]:
        acc = np.float32(acc * np.float32(f))
    return float(np.float32(acc / np.float32(divide_by)))


# =============================================================================
# QUANTIZED_LSTM
# =============================================================================

_Q_WEIGHTS = range(1, 9)
_Q_PEEP = (9, 10, 11)
_Q_BIAS = (12, 13, 14, 15)
_Q_LN = (20, 21, 22, 23)


def validate_qlstm(v: ValidationContext) -> HalVersion:
    v.expect_counts(32, 3)
    expected: list[OperandType] = [T.TENSOR_QUANT8_ASYMM_SIGNED]
    expected += [T.TENSOR_QUANT8_SYMM] * 8 + [T.TENSOR_QUANT16_SYMM] * 3 + [T.TENSOR_INT32] * 4
    expected += [T.TENSOR_QUANT8_SYMM, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_SYMM]
    expected += [T.TENSOR_QUANT16_SYMM] * 4 + [T.FLOAT32] * 6 + [T.INT32, T.FLOAT32]
    v.expect_types(expected, [T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_SYMM, T.TENSOR_QUANT8_ASYMM_SIGNED])
    for i in (0, 2, 3, 4, 6, 7, 8, 13, 14, 15, 18, 19, 26, 27, 28, 29, 30, 31):
        v.require(not v.is_omitted(i), f"required input {i} is omitted")
    for i in (0, *_Q_WEIGHTS, 16, 18, 19):
        _check_rank(v, i, 2)
    for i in (*_Q_PEEP, *_Q_BIAS, 17, *_Q_LN):
        _check_rank(v, i, 1)
    has_xi, has_hi = _presence(v, 1), _presence(v, 5)
    if has_xi is not None and has_hi is not None and has_xi != has_hi:
        v.fail("input-to-input and recurrent-to-input weights must be all or none")
    cell = v.inputs[19]
    if cell.scale > 0:
        shift = _checked_log2(cell.scale)
        v.require(shift is not None and shift <= -9, "cell state scale must be a power of two <= 2^-9")
    return HalVersion.V1_3


@dataclass
class _QGate:
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


def _qm(real: float, op: str) -> tuple[int, int]:
    _need(math.isfinite(real) and real >= 0, op, f"invalid effective scale {real}")
    q, s = quantize_multiplier(real)
    _need(q <= INT32_MAX, op, "effective scale out of range")
    return q, s


def _mbvma(
    x: np.ndarray,
    eff_bias: np.ndarray,
    w: np.ndarray,
    mult: tuple[int, int],
    out_zp: int,
    acc: np.ndarray,
    lo: int,
    hi: int,
) -> np.ndarray:
    """MatrixBatchVectorMultiplyAccumulate (integer), saturating to [lo, hi]."""
    prod = x @ w.T + eff_bias
    prod = multiply_by_quantized_multiplier(_wrap(prod, 32), mult[0], mult[1]) + out_zp + acc
    return np.asarray(np.clip(prod, lo, hi))


def execute_qlstm(ctx: ExecutionContext) -> None:
    op = ctx.op_type.name

    def opt(i: int) -> np.ndarray | None:
        a = ctx.optional(i)
        return None if a is None or a.size == 0 else a.astype(np.int64)

    def req(i: int) -> np.ndarray:
        a = opt(i)
        _need(a is not None, op, f"required input {i} is omitted")
        assert a is not None
        return a

    x = req(0)
    _need(x.ndim == 2, op, "input must be 2-D")
    n_batch, n_input = x.shape
    w_xo = req(4)
    w_ho = req(8)
    n_units = w_xo.shape[0]
    n_output = w_ho.shape[1]
    _need(w_xo.shape == (n_units, n_input), op, "input-to-output weights do not match the input")
    prev_out = req(18)
    prev_cell = req(19)
    _need(prev_out.shape == (n_batch, n_output), op, f"output state must be [{n_batch}, {n_output}]")
    _need(prev_cell.shape == (n_batch, n_units), op, f"cell state must be [{n_batch}, {n_units}]")
    cifg = opt(1) is None
    _need(cifg == (opt(5) is None), op, "input-to-input and recurrent-to-input weights must be all or none")
    for g in range(4):
        if g == 0 and cifg:
            continue
        _need(req(1 + g).shape == (n_units, n_input), op, "input weights shape mismatch")
        _need(req(5 + g).shape == (n_units, n_output), op, "recurrent weights shape mismatch")
    peeps = [opt(i) for i in _Q_PEEP]
    lns = [opt(i) for i in _Q_LN]
    biases = [opt(i) for i in _Q_BIAS]
    for a in (*peeps, *lns, *biases):
        _need(a is None or a.shape == (n_units,), op, f"per-unit vectors must have shape [{n_units}]")
    _need(cifg == (biases[0] is None), op, "input gate bias must be given exactly when CIFG is not used")
    _need(all(b is not None for b in biases[1:]), op, "forget/cell/output gate biases are required")
    _need((peeps[1] is None) == (peeps[2] is None), op, "peephole weights must be all or none")
    _need(cifg or (peeps[0] is None) == (peeps[2] is None), op, "peephole weights must be all or none")
    _need(not cifg or peeps[0] is None, op, "cell-to-input weights must be omitted with CIFG")
    ln_rest = lns[1:] if cifg else lns
    _need(not cifg or lns[0] is None, op, "input layer norm weights must be omitted with CIFG")
    _need(
        all(a is None for a in ln_rest) or all(a is not None for a in ln_rest),
        op,
        "layer norm weights must be all or none",
    )
    proj_w = opt(16)
    proj_b = opt(17)
    _need(proj_w is None or proj_w.shape == (n_output, n_units), op, "projection weights shape mismatch")
    _need(proj_b is None or proj_b.shape == (n_output,), op, "projection bias shape mismatch")
    _need(proj_w is not None or n_output == n_units, op, "without projection output_size must equal num_units")

    s_in = ctx.scale(0)
    s_h = ctx.scale(18)
    zp_in = ctx.zero_point(0)
    zp_h = ctx.zero_point(18)
    cell_shift = _checked_log2(ctx.scale(19))
    _need(cell_shift is not None and cell_shift <= -9, op, "cell state scale must be a power of two <= 2^-9")
    assert cell_shift is not None
    cell_clip = float(ctx.scalar(24)) if ctx.has(24) else 0.0
    proj_clip = float(ctx.scalar(25)) if ctx.has(25) else 0.0
    inter = [float(ctx.scalar(i)) for i in (26, 27, 28, 29)]
    hidden_zp = int(ctx.scalar(30))
    hidden_scale = float(ctx.scalar(31))
    _need(hidden_scale > 0 and all(v > 0 for v in inter), op, "hidden state and intermediate scales must be > 0")
    use_ln = ln_rest[-1] is not None

    gates: list[_QGate | None] = []
    for g in range(4):
        if g == 0 and cifg:
            gates.append(None)
            continue
        w_x, w_h = req(1 + g), req(5 + g)
        bias = biases[g]
        assert bias is not None
        eff_x = w_x.sum(axis=1) * -zp_in
        eff_h = w_h.sum(axis=1) * -zp_h
        if not use_ln:
            # Without layer norm the bias enters with the matmul (TFLite integer LSTM).
            eff_x = eff_x + bias
        # Peephole weights exist for the input, forget and output gates only.
        peep_slot = {0: 0, 1: 1, 3: 2}.get(g)
        peep = None if peep_slot is None else peeps[peep_slot]
        mult_peep = (0, 0)
        if peep is not None and peep_slot is not None:
            real = float(np.float32(2.0**cell_shift * ctx.scale(_Q_PEEP[peep_slot]) / inter[g]))
            mult_peep = _qm(real, op)
        ln = lns[g]
        mult_ln = (0, 0)
        ln_limit = 0
        if ln is not None:
            mult_ln = _qm(ctx.scale(_Q_LN[g]), op)
            ln_limit = min(1, int(np.float32(10000) * np.float32(ctx.scale(_Q_LN[g]))))
        gates.append(
            _QGate(
                w_x=w_x,
                w_h=w_h,
                eff_bias_x=eff_x,
                eff_bias_h=eff_h,
                mult_x=_qm(_f32_scale(ctx.scale(1 + g), s_in, divide_by=inter[g]), op),
                mult_h=_qm(_f32_scale(ctx.scale(5 + g), s_h, divide_by=inter[g]), op),
                peep=peep,
                mult_peep=mult_peep,
                ln=ln if use_ln else None,
                mult_ln=mult_ln,
                ln_limit=ln_limit,
                bias=bias,
            )
        )

    def gate_pre(g: int, cell_state: np.ndarray) -> np.ndarray:
        q = gates[g]
        assert q is not None
        acc = np.zeros((n_batch, n_units), np.int64)
        acc = _mbvma(x, q.eff_bias_x, q.w_x, q.mult_x, 0, acc, -32768, 32767)
        acc = _mbvma(prev_out, q.eff_bias_h, q.w_h, q.mult_h, 0, acc, -32768, 32767)
        if q.peep is not None:
            prod = multiply_by_quantized_multiplier(q.peep * cell_state, q.mult_peep[0], q.mult_peep[1])
            acc = np.clip(prod + acc, -32768, 32767)
        if q.ln is not None:
            acc = _apply_layer_norm(acc, q.ln, q.bias, q.mult_ln[0], q.mult_ln[1], q.ln_limit)
        return acc

    forget = fx_logistic(gate_pre(1, prev_cell), 3)
    cell_gate = fx_tanh(gate_pre(2, prev_cell), 3)
    if cifg:
        input_gate = 32767 - forget
    else:
        input_gate = fx_logistic(gate_pre(0, prev_cell), 3)

    forget_term = _wrap(rounding_divide_by_pot(forget * prev_cell, 15), 16)
    input_term = _wrap(rounding_divide_by_pot(input_gate * cell_gate, 30 + cell_shift), 16)
    cell = np.clip(forget_term + input_term, -32768, 32767)
    if cell_clip > 0:
        q_clip = int(np.clip(np.float32(cell_clip) / np.float32(ctx.scale(19)), -32768.0, 32767.0))
        q_clip = int(_wrap(np.array(q_clip, np.int64), 16))
        if q_clip > 0:
            cell = np.clip(cell, -q_clip, q_clip)

    output_gate = fx_logistic(gate_pre(3, cell), 3)
    tanh_bits = cell_shift + 15
    # The reference leaves its buffer (holding the input gate) untouched for other widths.
    cell_act = fx_tanh(cell, tanh_bits) if 0 <= tanh_bits <= 6 else input_gate
    hidden_real = float(np.float32(2.0**-15 / hidden_scale * 2.0**-15))
    hm = _qm(hidden_real, op)
    hidden = multiply_by_quantized_multiplier(output_gate * cell_act, hm[0], hm[1]) - hidden_zp
    hidden = np.clip(hidden, -128, 127)

    if proj_w is not None:
        pm = _qm(_f32_scale(ctx.scale(16), hidden_scale, divide_by=s_h), op)
        eff = proj_w.sum(axis=1) * hidden_zp + (proj_b if proj_b is not None else 0)
        out = _mbvma(hidden, eff, proj_w, pm, zp_h, np.zeros((n_batch, n_output), np.int64), -128, 127)
        if proj_clip > 0:
            q_pclip = int(np.clip(np.float32(proj_clip) / np.float32(ctx.scale(16)), -128.0, 127.0))
            q_pclip = int(_wrap(np.array(q_pclip, np.int64), 8))
            if q_pclip > 0:
                out = np.clip(out, -q_pclip, q_pclip)
    else:
        out = hidden
    ctx.set_output(0, out)
    ctx.set_output(1, cell)
    ctx.set_output(2, out)


# =============================================================================
# QUANTIZED_16BIT_LSTM
# =============================================================================


def validate_q16_lstm(v: ValidationContext) -> HalVersion:
    v.expect_counts(15, 2)
    q8 = T.TENSOR_QUANT8_ASYMM
    v.expect_types([q8] * 9 + [T.TENSOR_INT32] * 4 + [T.TENSOR_QUANT16_SYMM, q8], [T.TENSOR_QUANT16_SYMM, q8])
    for i in range(15):
        v.require(not v.is_omitted(i), f"input {i} is required")
    for i in (0, *range(1, 9), 13, 14):
        _check_rank(v, i, 2)
    for i in range(9, 13):
        _check_rank(v, i, 1)
    _validate_q16_quant(v)
    return HalVersion.V1_2


def _validate_q16_quant(v: ValidationContext) -> None:
    """The fixed quantization the reference requires (input/output 1/128 at 128, etc.)."""
    ops = v.inputs
    x, cell, prev_out, w0, b0 = ops[0], ops[13], ops[14], ops[1], ops[9]
    v.require(x.scale == 1.0 / 128.0 and x.zero_point == 128, "input must have scale 1/128 and zero point 128")
    v.require(
        prev_out.scale == 1.0 / 128.0 and prev_out.zero_point == 128,
        "previous output must have scale 1/128 and zero point 128",
    )
    v.require(w0.scale != 0, "weights scale must be non-zero")
    for w in ops[2:9]:
        v.require(w.scale == w0.scale and w.zero_point == w0.zero_point, "all weights must share scale and zero point")
    v.require(b0.scale == w0.scale / 128.0, "bias scale must be the weights scale / 128")
    for b in ops[9:13]:
        v.require(b.scale == b0.scale and b.zero_point == 0, "all biases must share the scale, zero point 0")
    v.require(cell.zero_point == 0, "cell state zero point must be 0")
    shift = _checked_log2(cell.scale) if cell.scale > 0 else None
    v.require(shift is not None and shift + 15 == 4, "cell state scale must be 2^-11")


def execute_q16_lstm(ctx: ExecutionContext) -> None:
    op = ctx.op_type.name
    x = ctx.tensor(0).astype(np.int64)
    prev_out = ctx.tensor(14).astype(np.int64)
    prev_cell = ctx.tensor(13).astype(np.int64)
    _need(x.ndim == 2 and prev_out.ndim == 2, op, "input and previous output must be 2-D")
    n_batch, n_input = x.shape
    n_output = prev_out.shape[1]
    _need(prev_out.shape[0] == n_batch, op, "previous output batch size mismatch")
    _need(prev_cell.shape == (n_batch, n_output), op, f"cell state must be [{n_batch}, {n_output}]")
    w_zp = ctx.zero_point(1)
    # Gate order of the fused fully-connected layer: input, cell (modulation), forget, output.
    order = (0, 2, 1, 3)
    w_x = []
    w_h = []
    biases = []
    for g in order:
        wx = ctx.tensor(1 + g).astype(np.int64)
        wh = ctx.tensor(5 + g).astype(np.int64)
        b = ctx.tensor(9 + g).astype(np.int64)
        _need(wx.shape == (n_output, n_input), op, "input weights must be [outputSize, inputSize]")
        _need(wh.shape == (n_output, n_output), op, "recurrent weights must be [outputSize, outputSize]")
        _need(b.shape == (n_output,), op, "biases must be [outputSize]")
        w_x.append(wx)
        w_h.append(wh)
        biases.append(b)
    # The reference lays the fused weights out as [recurrent | input] columns but
    # concatenates the activations as [input, previous output]; its goldens (and
    # TFLite's) depend on exactly this pairing, so it is kept.
    weights = np.concatenate([np.concatenate(w_h), np.concatenate(w_x)], axis=1) - w_zp
    concat = np.concatenate([x, prev_out], axis=1) - 128
    acc = concat @ weights.T + np.concatenate(biases)
    mult, shift = quantize_multiplier(4096 * ctx.scale(9))
    acc = np.clip(multiply_by_quantized_multiplier(_wrap(acc, 32), mult, shift), -32768, 32767)
    n = n_output
    input_gate = fx_logistic(acc[:, 0:n], 3)
    modulation = fx_tanh(acc[:, n : 2 * n], 3)
    forget_gate = fx_logistic(acc[:, 2 * n : 3 * n], 3)
    output_gate = fx_logistic(acc[:, 3 * n : 4 * n], 3)
    state_bits = 4
    in_times_mod = _fx_mul(input_gate, modulation, 16)
    prev_times_forget = _fx_mul(forget_gate, prev_cell, 16)
    new_state = np.clip(_fx_rescale(in_times_mod, 0, state_bits, 16) + prev_times_forget, -32768, 32767)
    out_activ = _fx_mul(output_gate, fx_tanh(_fx_rescale(new_state, state_bits, 3, 16), 3), 16)
    out = 128 + np.clip(rounding_divide_by_pot(out_activ, 8), -128, 127)
    ctx.set_output(0, new_state)
    ctx.set_output(1, out)


register(Op.LSTM, validate=validate_lstm, execute=execute_lstm)
register(Op.UNIDIRECTIONAL_SEQUENCE_LSTM, validate=validate_uni_lstm, execute=execute_uni_lstm)
register(Op.BIDIRECTIONAL_SEQUENCE_LSTM, validate=validate_bidi_lstm, execute=execute_bidi_lstm)
register(Op.QUANTIZED_LSTM, validate=validate_qlstm, execute=execute_qlstm)
register(Op.QUANTIZED_16BIT_LSTM, validate=validate_q16_lstm, execute=execute_q16_lstm)

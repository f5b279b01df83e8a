"""The float LSTM cell shared by LSTM, UNIDIRECTIONAL_SEQUENCE_LSTM and
BIDIRECTIONAL_SEQUENCE_LSTM: where each direction's tensors sit among the
operation's inputs, reading and checking them, and running a whole sequence.

The cell covers CIFG, peephole, projection, clipping, layer normalization and
an auxiliary input. The input-side matrix products of every time step are one
GEMM; only the recurrent product is per step. Float16 is computed in float32.
Runtime operands that do not fit the cell fail with the family's status
(INVALID_ARGUMENT).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._activations import RECURRENT_ACTIVATIONS, cell_activation, sigmoid
from nnhal.server.executor.ops._validation import check_known_rank, known_dims, presence


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


@dataclass(frozen=True)
class CellIndexes:
    """Where one direction's tensors sit among the operation inputs."""

    to_x: tuple[int, int, int, int]  # input-to-{input, forget, cell, output} weights
    to_h: tuple[int, int, int, int]  # recurrent-to-{input, forget, cell, output}
    peephole: tuple[int, int, int]  # cell-to-{input, forget, output}
    bias: tuple[int, int, int, int]
    proj_w: int
    proj_b: int
    layer_norm: tuple[int, int, int, int] | None
    aux: tuple[int, int, int, int] | None = None


LSTM_CELL = CellIndexes((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11), (12, 13, 14, 15), 16, 17, (23, 24, 25, 26))
LSTM_CELL_V10 = CellIndexes((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11), (12, 13, 14, 15), 16, 17, None)
UNI_CELL = CellIndexes((1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11), (12, 13, 14, 15), 16, 17, (24, 25, 26, 27))
BIDI_FW = CellIndexes(
    (1, 2, 3, 4), (5, 6, 7, 8), (9, 10, 11), (12, 13, 14, 15), 16, 17, (53, 54, 55, 56), (40, 41, 42, 43)
)
BIDI_BW = CellIndexes(
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
class FloatCell:
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


def load_cell(ctx: ExecutionContext, idx: CellIndexes, n_input: int, use_aux_weights: bool) -> FloatCell:
    """Read and check one direction's tensors (shapes and all-or-none rules)."""

    def get(i: int) -> np.ndarray | None:
        return _f32(ctx.optional(i))

    def req(i: int) -> np.ndarray:
        a = get(i)
        ctx.require(a is not None, f"required input {i} is omitted")
        assert a is not None
        return a

    w_xo = req(idx.to_x[3])
    w_ho = req(idx.to_h[3])
    ctx.require(w_xo.ndim == 2 and w_ho.ndim == 2, "weights must be 2-D")
    n_cell = w_xo.shape[0]
    n_output = w_ho.shape[1]
    ctx.require(w_xo.shape[1] == n_input, f"input-to-output weights must be [{n_cell}, {n_input}]")
    ctx.require(w_ho.shape[0] == n_cell, "recurrent-to-output weights must have num_units rows")

    x_i = get(idx.to_x[0])
    h_i = get(idx.to_h[0])
    ctx.require((x_i is None) == (h_i is None), "input-to-input and recurrent-to-input weights must be all or none")
    cifg = x_i is None
    gates = range(1, 4) if cifg else range(4)

    def shaped(a: np.ndarray | None, shape: tuple[int, ...], what: str) -> np.ndarray | None:
        if a is not None:
            ctx.require(a.shape == shape, f"{what} must have shape {list(shape)}, got {list(a.shape)}")
        return a

    w_x = [shaped(get(idx.to_x[g]) if g else x_i, (n_cell, n_input), "input weights") for g in gates]
    w_h = [shaped(get(idx.to_h[g]) if g else h_i, (n_cell, n_output), "recurrent weights") for g in gates]
    ctx.require(all(w is not None for w in w_x + w_h), "required weights are omitted")

    peep = [shaped(get(i), (n_cell,), "peephole weights") for i in idx.peephole]
    if cifg:
        ctx.require(peep[0] is None, "cell-to-input weights must be omitted with CIFG")
        ctx.require((peep[1] is None) == (peep[2] is None), "peephole weights must be all or none")
    else:
        ctx.require(
            all(p is None for p in peep) or all(p is not None for p in peep),
            "peephole weights must be all or none",
        )

    biases = [shaped(get(idx.bias[g]), (n_cell,), "gate bias") for g in range(4)]
    if cifg:
        ctx.require(biases[0] is None, "input gate bias must be omitted with CIFG")
    else:
        ctx.require(biases[0] is not None, "input gate bias is required without CIFG")
    ctx.require(all(biases[g] is not None for g in range(1, 4)), "forget/cell/output gate biases are required")

    proj_w = shaped(get(idx.proj_w), (n_output, n_cell), "projection weights")
    proj_b = shaped(get(idx.proj_b), (n_output,), "projection bias")
    ctx.require(proj_w is not None or proj_b is None, "projection bias given without projection weights")
    if proj_w is None:
        ctx.require(n_output == n_cell, "without projection output_size must equal num_units")

    ln: np.ndarray | None = None
    if idx.layer_norm is not None:
        lns = [shaped(get(i), (n_cell,), "layer norm weights") for i in idx.layer_norm]
        if cifg:
            ctx.require(lns[0] is None, "input layer norm weights must be omitted with CIFG")
            rest = lns[1:]
        else:
            rest = lns
        ctx.require(
            all(w is None for w in rest) or all(w is not None for w in rest),
            "layer norm weights must be all or none",
        )
        if rest[-1] is not None:
            ln = np.concatenate([lns[g] for g in gates])  # type: ignore[misc]

    w_aux: np.ndarray | None = None
    if idx.aux is not None and use_aux_weights:
        aux = [get(i) for i in idx.aux]
        if cifg:
            ctx.require(aux[0] is None, "aux input-to-input weights must be omitted with CIFG")
        present = [aux[g] for g in gates]
        ctx.require(all(a is not None for a in present), "aux weights must be all or none")
        n_aux = present[0].shape[1] if present[0] is not None and present[0].ndim == 2 else -1
        for a in present:
            shaped(a, (n_cell, n_aux), "aux weights")
        w_aux = np.concatenate(present)  # type: ignore[arg-type]

    bias = np.concatenate([biases[g] for g in gates])  # type: ignore[misc]
    return FloatCell(
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
class CellParams:
    act: int
    cell_clip: float
    proj_clip: float


def run_cell(
    cell: FloatCell,
    p: CellParams,
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
    reserve_shape((n_time, n_batch, cell.w_x.shape[0] + cell.n_output), 8, copies=2)
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
        g_cell = cell_activation(zc, p.act)
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
        g_state = cell_activation(c, p.act)
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


def float_params(ctx: ExecutionContext, act_i: int, cell_clip_i: int, proj_clip_i: int) -> CellParams:
    act = int(ctx.scalar(act_i))
    ctx.require(act in RECURRENT_ACTIVATIONS, f"unsupported activation function {act}")
    cell_clip = float(ctx.scalar(cell_clip_i)) if ctx.has(cell_clip_i) else 0.0
    proj_clip = float(ctx.scalar(proj_clip_i)) if ctx.has(proj_clip_i) else 0.0
    ctx.require(cell_clip >= 0 and proj_clip >= 0, "clipping thresholds must be >= 0")
    return CellParams(act, cell_clip, proj_clip)


def state_input(ctx: ExecutionContext, i: int, shape: tuple[int, int], what: str) -> np.ndarray:
    a = ctx.tensor(i).astype(np.float32, copy=False)
    ctx.require(a.shape == shape, f"{what} must have shape {list(shape)}, got {list(a.shape)}")
    return a


def validate_cell_shapes(v: ValidationContext, idx: CellIndexes, n_input: int | None) -> None:
    """Ranks and the dims that are declared, for one direction."""
    for i in (*idx.to_x, *idx.to_h, idx.proj_w):
        check_known_rank(v, i, 2)
    for i in (*idx.peephole, *idx.bias, idx.proj_b, *(idx.layer_norm or ())):
        if i < v.num_inputs:
            check_known_rank(v, i, 1)
    out_w = known_dims(v, idx.to_x[3])
    if out_w is not None and n_input is not None:
        v.require(out_w[1] == n_input, "input-to-output weights do not match the input size")
    has_xi, has_hi = presence(v, idx.to_x[0]), presence(v, idx.to_h[0])
    if has_xi is not None and has_hi is not None and has_xi != has_hi:
        v.fail("input-to-input and recurrent-to-input weights must be all or none")
    if presence(v, idx.proj_w) is False:
        v.require(presence(v, idx.proj_b) is not True, "projection bias given without projection weights")

"""FULLY_CONNECTED: input flattened to [batch, input_size] times weights [units, input_size].

Float: one BLAS matmul with the constant weights transposed once at prepare.
Quantized: exact integer accumulation (float64 BLAS), the reference's
fixed-point requantization and activation clamp.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._activations import (
    FUSED_BOUNDS,
    activation_range_quant,
    apply_activation,
    check_activation,
    clamp_calls,
    clamp_in_place,
)
from nnhal.server.executor.ops._fixed_point import quantize_multiplier, requantize
from nnhal.server.executor.ops.common import FLOAT_TYPES, QUANT8_TYPES, T, static_shapes, to_compute
from nnhal.server.executor.registry import Call, FastKernel, StaticKernel, register

INPUT, WEIGHTS, BIAS, ACTIVATION = 0, 1, 2, 3


def validate_fully_connected(v: ValidationContext) -> HalVersion:
    v.expect_counts(4, 1)
    t = v.expect_input_type_in(INPUT, (*FLOAT_TYPES, *QUANT8_TYPES))
    bias_t = t if t in FLOAT_TYPES else T.TENSOR_INT32
    v.expect_types([t, t, bias_t, T.INT32], [t])
    v.expect_rank(WEIGHTS, 2)
    v.expect_rank(BIAS, 1)
    r = v.input_rank(INPUT)
    v.require(r is None or 2 <= r <= 4, f"input must have rank 2 to 4, got {r}")
    act = v.constant_scalar(ACTIVATION)
    v.require(check_activation(act), f"invalid fused activation {act}")
    if t == T.TENSOR_QUANT8_ASYMM_SIGNED:
        return HalVersion.V1_3
    if t == T.TENSOR_FLOAT16:
        return HalVersion.V1_2
    if t == T.TENSOR_QUANT8_ASYMM:
        product = np.float32(v.inputs[INPUT].scale) * np.float32(v.inputs[WEIGHTS].scale)
        if not v.outputs[0].scale > product:
            return HalVersion.V1_2
    # A dynamic batch (unknown input dims) or an output of unknown shape needs 1.2's shape inference.
    return HalVersion.V1_0


def _weights_matrix(w: np.ndarray, t: Any, zero_point: int) -> np.ndarray:
    if t in FLOAT_TYPES:
        return np.ascontiguousarray(to_compute(w).T)
    return np.ascontiguousarray((w.astype(np.float64) - zero_point).T)


def prepare_fully_connected(v: ValidationContext) -> Any:
    w = v.constant(WEIGHTS)
    if w is None:
        return None
    return _weights_matrix(w, v.inputs[WEIGHTS].type, v.inputs[WEIGHTS].zero_point)


def execute_fully_connected(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    w = ctx.tensor(WEIGHTS)
    bias = ctx.tensor(BIAS)
    act = ctx.scalar(ACTIVATION)
    if not check_activation(act):
        ctx.fail(f"invalid fused activation {act}")
    units, input_size = w.shape
    if input_size == 0 or x.size % input_size:
        ctx.fail(f"{x.size} input elements are not a multiple of input size {input_size}")
    if bias.shape != (units,):
        ctx.fail(f"bias has shape {list(bias.shape)}, expected [{units}]")
    batch = x.size // input_size
    reserve_shape((batch, units), 8, copies=2)
    t = ctx.in_type(INPUT)
    matrix = ctx.state if isinstance(ctx.state, np.ndarray) else _weights_matrix(w, t, ctx.zero_point(WEIGHTS))
    if t in FLOAT_TYPES:
        out = to_compute(x).reshape(batch, input_size) @ matrix
        out += to_compute(bias)
        ctx.set_output(0, apply_activation(out, act))
        return
    xs = x.reshape(batch, input_size).astype(np.float64) - ctx.zero_point(INPUT)
    acc = np.rint(xs @ matrix).astype(np.int64) + bias.astype(np.int64)
    real = float(np.float32(ctx.scale(INPUT)) * np.float32(ctx.scale(WEIGHTS))) / float(np.float32(ctx.out_scale(0)))
    qm, sh = quantize_multiplier(real)
    out = requantize(acc, np.int64(qm), np.int64(sh)) + ctx.out_zero_point(0)
    lo, hi = activation_range_quant(act, ctx.out_scale(0), ctx.out_zero_point(0), ctx.out_type(0))
    ctx.set_output(0, np.clip(out, lo, hi))


@dataclass(frozen=True, slots=True)
class _Bound:
    """What a float32 FULLY_CONNECTED with constant weights and static shapes is bound to."""

    act: int
    matrix: np.ndarray
    x_shape: tuple[int, ...]
    flat: tuple[int, int]
    units: int
    #: A constant bias as a row of the output's rank (numpy adds a same-rank row to each row
    #: of the output with less set-up than a vector it must broadcast; the sums are the same).
    bias_row: np.ndarray | None


def _bound(v: ValidationContext, state: object) -> _Bound | None:
    if v.input_type(INPUT) != T.TENSOR_FLOAT32 or not isinstance(state, np.ndarray):
        return None
    act = v.constant_scalar(ACTIVATION)
    x_shape, out_shape = v.input_dims(INPUT), v.outputs[0].dimensions
    if act not in FUSED_BOUNDS or not static_shapes(x_shape, out_shape):
        return None
    input_size, units = state.shape
    size = math.prod(x_shape)
    batch = size // input_size if input_size else 0
    if not input_size or size % input_size or out_shape != (batch, units) or v.input_dims(BIAS) != (units,):
        return None
    constant = v.constant(BIAS)
    bias_row = None if constant is None else constant.reshape(1, units)
    return _Bound(act, state, x_shape, (batch, input_size), units, bias_row)


def _product(x2: np.ndarray) -> Callable[..., np.ndarray]:
    """The matrix product for the flattened input ``x2``: np.dot makes the BLAS call np.matmul
    makes for C-contiguous 2-D float32 operands (the same routine and arguments, so the same
    sums) with less dispatch; any other input takes np.matmul, whose loops for other layouts
    may sum in another order."""
    return np.dot if x2.flags.c_contiguous else np.matmul


def bind_fully_connected(v: ValidationContext, state: object) -> FastKernel | None:
    """Float32 with constant weights and activation and static shapes: the general kernel's
    matmul, bias add and clamp, written into the output buffer; nothing re-checked. The bias
    may be a constant or an input of the bound shape."""
    bound = _bound(v, state)
    if bound is None:
        return None
    matrix, x_shape, flat, units, bias_row = bound.matrix, bound.x_shape, bound.flat, bound.units, bound.bias_row
    clamp = clamp_in_place(bound.act)
    flat_input = x_shape == flat

    def run(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        x = inputs[INPUT]
        bias: np.ndarray | None = bias_row
        if bias is None:
            bias = inputs[BIAS]
            if bias is None or bias.shape != (units,):
                return None
        if x is None or x.shape != x_shape:
            return None
        x2 = x if flat_input else x.reshape(flat)
        out: np.ndarray = _product(x2)(x2, matrix, buffers[0])
        np.add(out, bias, out)
        if clamp is not None:
            clamp(out)
        return [out]

    return run


def emit_fully_connected(v: ValidationContext, state: object) -> StaticKernel | None:
    """``bind_fully_connected``'s kernel as fixed calls: product, bias add, clamp."""
    bound = _bound(v, state)
    if bound is None:
        return None

    def emit(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray]) -> tuple[Call, ...] | None:
        x, bias, out = inputs[INPUT], bound.bias_row, buffers[0]
        if bias is None:
            bias = inputs[BIAS]
            if bias is None or bias.shape != (bound.units,):
                return None
        if x is None or x.shape != bound.x_shape:
            return None
        x2 = x.reshape(bound.flat)
        return (
            partial(_product(x2), x2, bound.matrix, out),
            partial(np.add, out, bias, out),
            *clamp_calls(bound.act, out),
        )

    return emit


register(
    OperationType.FULLY_CONNECTED,
    validate=validate_fully_connected,
    execute=execute_fully_connected,
    prepare=prepare_fully_connected,
    bind=bind_fully_connected,
    emit=emit_fully_connected,
)

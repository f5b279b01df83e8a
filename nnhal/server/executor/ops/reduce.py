"""Reductions: MEAN, REDUCE_ALL, REDUCE_ANY, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD,
REDUCE_SUM, ARGMAX, ARGMIN, TOPK_V2.

Quantized MEAN follows the reference exactly: the stored codes (zero point
included) are summed in integers and divided by the element count with C
integer division (truncation toward zero); the output keeps the input's
quantization. When every dimension is reduced without keep_dims the output
shape is [1], as the HAL specifies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.core.operand_types import DTYPE
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.errors import INVALID
from nnhal.server.executor.ops._activations import scalar32
from nnhal.server.executor.ops._validation import (
    axis_at_execution,
    axis_at_validation,
    expect_vector_input,
    input_axis,
    int_vector,
    require_same_quant,
    resolve_axis,
)
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    MOVE_TYPES,
    MOVE_TYPES_INT,
    QUANT8_TYPES,
    T,
    static_shapes,
    to_compute,
    version_for_types,
)
from nnhal.server.executor.registry import Call, FastKernel, StaticKernel, register

INPUT = 0
OUTPUT = 0
AXES = 1
KEEP_DIMS = 2


def _validate_axes(v: ValidationContext) -> None:
    expect_vector_input(v, AXES)
    axes, rank = v.constant(AXES), v.input_rank(INPUT)
    if axes is not None and rank is not None:
        bad = [int(a) for a in axes.reshape(-1) if resolve_axis(int(a), rank) is None]
        v.require(not bad, f"axes {bad} are out of range for rank {rank}")


def _reduced_axes(ctx: ExecutionContext, rank: int) -> tuple[int, ...]:
    """The distinct non-negative axes named by input 1."""
    return tuple(sorted({axis_at_execution(ctx, a, rank) for a in int_vector(ctx, AXES, what="axes")}))


def _output_shape(shape: tuple[int, ...], axes: tuple[int, ...], keep_dims: bool) -> tuple[int, ...]:
    if keep_dims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes) or (1,)


# -- MEAN ----------------------------------------------------------------------------------
def validate_mean(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES)
    v.expect_types([t, T.TENSOR_INT32, T.INT32], [t])
    v.expect_rank(INPUT, 4, at_most=True)
    _validate_axes(v)
    require_same_quant(v)
    return version_for_types([t], HalVersion.V1_1)


def execute_mean(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    axes = _reduced_axes(ctx, x.ndim)
    keep = ctx.scalar(KEEP_DIMS) > 0
    shape = _output_shape(x.shape, axes, keep)
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    mean: np.ndarray
    if ctx.in_type(INPUT) in QUANT8_TYPES:
        total = np.sum(x, axis=axes, dtype=np.int64)
        if count == 0:
            mean = np.zeros_like(total)
        else:
            # C integer division truncates toward zero.
            mean = np.sign(total) * (np.abs(total) // count)
    else:
        total32 = np.sum(to_compute(x), axis=axes, dtype=np.float32)
        mean = np.asarray(total32 / np.float32(count) if count else np.zeros_like(total32))
    ctx.set_output(OUTPUT, np.reshape(mean, shape))


_ADD_REDUCE = np.add.reduce


@dataclass(frozen=True, slots=True)
class _BoundMean:
    """What a float32 MEAN with constant axes and keep_dims and a static shape is bound to."""

    shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    #: The axis (one: numpy's quicker form) or axes summed, and whether they are kept.
    axis: int | tuple[int, ...]
    kept: bool
    #: The sum's own shape: the output's when it keeps the reduced dimensions, else a view of
    #: the output buffer is written through.
    summed: tuple[int, ...]
    #: The number of elements summed (a 0-d float32 array).
    count: np.ndarray


def _bound_mean(v: ValidationContext) -> _BoundMean | None:
    shape = v.input_dims(INPUT)
    axes_value, keep = v.constant(AXES), v.constant_scalar(KEEP_DIMS)
    if v.input_type(INPUT) != T.TENSOR_FLOAT32 or not static_shapes(shape) or axes_value is None or keep is None:
        return None
    resolved = [resolve_axis(int(a), len(shape)) for a in axes_value.reshape(-1)]
    if any(a is None for a in resolved):
        return None
    axes = tuple(sorted({a for a in resolved if a is not None}))
    out_shape = _output_shape(shape, axes, keep > 0)
    if v.outputs[OUTPUT].dimensions != out_shape:
        return None
    return _BoundMean(
        shape,
        out_shape,
        axes[0] if len(axes) == 1 else axes,
        bool(keep > 0),
        tuple(n for d, n in enumerate(shape) if d not in axes),
        scalar32(math.prod(shape[a] for a in axes)),
    )


def bind_mean(v: ValidationContext, state: object) -> FastKernel | None:
    """Float32 with constant axes and keep_dims and a static shape: the general kernel's float32
    sum and division, into the output buffer; nothing re-checked."""
    bound = _bound_mean(v)
    if bound is None:
        return None
    shape, out_shape, axis, kept, summed, count = (
        bound.shape,
        bound.out_shape,
        bound.axis,
        bound.kept,
        bound.summed,
        bound.count,
    )

    def run(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        x = inputs[INPUT]
        if x is None or x.shape != shape:
            return None
        buffer = buffers[OUTPUT]
        out = np.empty(out_shape, np.float32) if buffer is None else buffer
        # Arguments by position where numpy takes them: the same reduction, less parsing.
        total = _ADD_REDUCE(x, axis, np.float32, out=out if kept else out.reshape(summed), keepdims=kept)
        np.divide(total, count, total)
        return [out]

    return run


def emit_mean(v: ValidationContext, state: object) -> StaticKernel | None:
    """``bind_mean``'s kernel as fixed calls: the sum into the output buffer (or its view of the
    sum's shape), then the division in place."""
    bound = _bound_mean(v)
    if bound is None:
        return None

    def emit(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray]) -> tuple[Call, ...] | None:
        x, out = inputs[INPUT], buffers[OUTPUT]
        if x is None or x.shape != bound.shape:
            return None
        total = out if bound.kept else out.reshape(bound.summed)
        if not np.shares_memory(total, out):
            return None  # a copy, not a view: the sum would not reach the buffer
        return (
            partial(_ADD_REDUCE, x, bound.axis, np.float32, out=total, keepdims=bound.kept),
            partial(np.divide, total, bound.count, total),
        )

    return emit


# -- REDUCE_* --------------------------------------------------------------------------------
_REDUCE_TYPES: dict[OperationType, tuple[T, ...]] = {
    OperationType.REDUCE_ALL: (T.TENSOR_BOOL8,),
    OperationType.REDUCE_ANY: (T.TENSOR_BOOL8,),
    OperationType.REDUCE_MAX: MOVE_TYPES,
    OperationType.REDUCE_MIN: MOVE_TYPES,
    OperationType.REDUCE_PROD: FLOAT_TYPES,
    OperationType.REDUCE_SUM: FLOAT_TYPES,
}


def validate_reduce(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 1)
    t = v.expect_input_type_in(INPUT, _REDUCE_TYPES[v.op_type])
    v.expect_types([t, T.TENSOR_INT32, T.BOOL], [t])
    v.expect_rank(INPUT, 4, at_most=True)
    _validate_axes(v)
    require_same_quant(v)
    return version_for_types([t], HalVersion.V1_2)


def _extreme(t: T, largest: bool) -> float | int:
    """The reference's initial value of MIN/MAX: the type's finite extreme."""
    dtype = DTYPE[t]
    info: np.finfo | np.iinfo = np.finfo(dtype) if np.issubdtype(dtype, np.floating) else np.iinfo(dtype)
    return info.max if largest else info.min  # type: ignore[return-value]


def _prod(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Product where any zero factor gives zero (the reference's 0 * inf is 0, not NaN)."""
    with np.errstate(over="ignore", invalid="ignore"):
        product = np.prod(x, axis=axes)
    return np.where(np.any(x == 0, axis=axes), np.float32(0), product)


def execute_reduce(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    axes = _reduced_axes(ctx, x.ndim)
    shape = _output_shape(x.shape, axes, bool(ctx.scalar(KEEP_DIMS)))
    t = ctx.in_type(INPUT)
    op = ctx.op_type
    if op == OperationType.REDUCE_ALL:
        out = np.all(x != 0, axis=axes)
    elif op == OperationType.REDUCE_ANY:
        out = np.any(x != 0, axis=axes)
    elif op == OperationType.REDUCE_MAX:
        out = np.max(x, axis=axes, initial=_extreme(t, largest=False))
    elif op == OperationType.REDUCE_MIN:
        out = np.min(x, axis=axes, initial=_extreme(t, largest=True))
    elif op == OperationType.REDUCE_PROD:
        out = _prod(to_compute(x), axes)
    else:
        with np.errstate(over="ignore"):
            out = np.sum(to_compute(x), axis=axes, dtype=np.float32)
    ctx.set_output(OUTPUT, np.reshape(out, shape))


# -- ARGMAX / ARGMIN ---------------------------------------------------------------------------
def validate_arg_min_max(v: ValidationContext) -> HalVersion:
    v.expect_counts(2, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES_INT)
    v.expect_types([t, T.INT32], [T.TENSOR_INT32])
    axis_at_validation(v, 1, v.input_rank(INPUT))
    return version_for_types([t], HalVersion.V1_2)


def execute_arg_min_max(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    axis = input_axis(ctx, x, 1)
    if x.shape[axis] == 0:
        ctx.fail(f"cannot reduce the empty dimension {axis}")
    # Ties resolve to the first index, as in the reference.
    pick = np.argmin if ctx.op_type == OperationType.ARGMIN else np.argmax
    out = pick(x, axis=axis).astype(np.int32)
    ctx.set_output(OUTPUT, out.reshape(out.shape or (1,)))


# -- TOPK_V2 ----------------------------------------------------------------------------------
def validate_topk(v: ValidationContext) -> HalVersion:
    v.expect_counts(2, 2)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES_INT)
    v.expect_types([t, T.INT32], [t, T.TENSOR_INT32])
    k = v.constant_scalar(1)
    v.require(k is None or k > 0, f"k must be positive, got {k}")
    dims = v.input_dims(INPUT)
    if k is not None and dims and dims[-1]:
        v.require(k <= dims[-1], f"k {k} exceeds the last dimension {dims[-1]}")
    require_same_quant(v)
    return version_for_types([t], HalVersion.V1_2)


def execute_topk(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    k = ctx.scalar(1)
    if x.ndim == 0 or not 0 < k <= x.shape[-1]:
        ctx.fail(f"k {k} must be in [1, last dimension] for input shape {list(x.shape)}")
    keys = x.astype(np.float64)
    index = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    # Largest first; equal values list the larger index first, as the reference's sort does.
    order = np.lexsort((-index, -keys), axis=-1)[..., :k]
    ctx.set_output(0, np.take_along_axis(x, order, axis=-1))
    ctx.set_output(1, order.astype(np.int32))


# Runtime axes and k that do not fit the input are the request's error: INVALID_ARGUMENT.
_register = partial(register, execution_failure=INVALID)
for _op in _REDUCE_TYPES:
    _register(_op, validate=validate_reduce, execute=execute_reduce)
_register(OperationType.MEAN, validate=validate_mean, execute=execute_mean, bind=bind_mean, emit=emit_mean)
_register(OperationType.ARGMAX, validate=validate_arg_min_max, execute=execute_arg_min_max)
_register(OperationType.ARGMIN, validate=validate_arg_min_max, execute=execute_arg_min_max)
_register(OperationType.TOPK_V2, validate=validate_topk, execute=execute_topk)

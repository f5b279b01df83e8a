"""Shape operations: RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE, CONCATENATION, SPLIT,
RANK, FILL, TILE, CHANNEL_SHUFFLE, and the AIDL ones: PACK (feature level 6) and
REVERSE (feature level 7). RESHAPE takes TENSOR_INT32 since feature level 6.

All of them move data without arithmetic except CONCATENATION of quantized
inputs whose scale or zero point differ from the output's: those are
requantized in float32 as the reference does (round half away from zero).

Runtime shape operands that do not fit the input (a new shape with another
element count, an axis out of range) are the request's error: INVALID_ARGUMENT.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.core.operand_types import DTYPE
from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.errors import INVALID
from nnhal.server.executor.ops._validation import (
    axis_at_execution,
    axis_at_validation,
    expect_vector_input,
    int_vector,
    require_same_quant,
)
from nnhal.server.executor.ops.common import (
    MOVE_TYPES,
    MOVE_TYPES_INT,
    QUANT8_TYPES,
    T,
    round_half_away,
    static_shapes,
    version_for_types,
)
from nnhal.server.executor.registry import FastKernel, register

INPUT = 0
OUTPUT = 0


# -- RESHAPE ------------------------------------------------------------------------
def validate_reshape(v: ValidationContext) -> HalVersion:
    v.expect_counts(2, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES_INT)
    v.expect_types([t, T.TENSOR_INT32], [t])
    v.expect_rank(INPUT, 4, at_most=True)
    expect_vector_input(v, 1)
    require_same_quant(v)
    if t == T.TENSOR_INT32:
        return HalVersion.AIDL_V2
    return version_for_types([t], HalVersion.V1_0)


def reshape_target(ctx: ExecutionContext, size: int, target: Sequence[int]) -> tuple[int, ...]:
    dims = list(target)
    if dims.count(-1) > 1:
        ctx.fail(f"at most one dimension of the new shape may be -1, got {dims}")
    if any(d < -1 for d in dims):
        ctx.fail(f"invalid new shape {dims}")
    known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
    if -1 in dims:
        if known == 0 or size % known:
            ctx.fail(f"cannot infer the -1 dimension of {dims} for {size} elements")
        dims[dims.index(-1)] = size // known
    elif known != size:
        ctx.fail(f"new shape {dims} has {known} elements, the input has {size}")
    return tuple(dims)


def execute_reshape(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    dims = reshape_target(ctx, x.size, int_vector(ctx, 1, what="shape"))
    ctx.set_output(OUTPUT, x.reshape(dims))


def bind_reshape(v: ValidationContext, state: object) -> FastKernel | None:
    """A static shape to the constant new shape: the view ``execute_reshape`` returns, nothing
    re-checked (registered with ``views``)."""
    shape, out_shape, target = v.input_dims(INPUT), v.outputs[OUTPUT].dimensions, v.constant(1)
    if not static_shapes(shape, out_shape) or target is None or target.ndim != 1:
        return None
    dims = [int(d) for d in target]
    if dims.count(-1) == 1:
        known = math.prod(d for d in dims if d != -1)
        if known <= 0 or math.prod(shape) % known:
            return None
        dims[dims.index(-1)] = math.prod(shape) // known
    if tuple(dims) != out_shape or math.prod(shape) != math.prod(out_shape):
        return None

    def run(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        x = inputs[INPUT]
        if x is None or x.shape != shape:
            return None
        return [x.reshape(out_shape)]

    return run


# -- SQUEEZE ------------------------------------------------------------------------
def validate_with_optional_vector(v: ValidationContext) -> HalVersion:
    """SQUEEZE and TRANSPOSE: a rank <= 4 tensor and an optional 1-D TENSOR_INT32 (axes, perm)."""
    v.expect_counts(2, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES)
    v.expect_types([t, T.TENSOR_INT32], [t])
    v.expect_rank(INPUT, 4, at_most=True)
    if not v.is_omitted(1):
        expect_vector_input(v, 1)
    require_same_quant(v)
    return version_for_types([t], HalVersion.V1_1)


def execute_squeeze(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    axes_arr = ctx.optional(1)
    if axes_arr is None:
        squeeze = {d for d, n in enumerate(x.shape) if n == 1}
    else:
        squeeze = set()
        for a in int_vector(ctx, 1, what="axes"):
            d = axis_at_execution(ctx, a, x.ndim)
            if x.shape[d] != 1:
                ctx.fail(f"cannot squeeze dimension {d} of size {x.shape[d]}")
            squeeze.add(d)
    dims = tuple(n for d, n in enumerate(x.shape) if d not in squeeze)
    # The HAL keeps a 1-element vector when every dimension is squeezed.
    ctx.set_output(OUTPUT, x.reshape(dims or (1,)))


# -- EXPAND_DIMS -----------------------------------------------------------------------
def validate_expand_dims(v: ValidationContext) -> HalVersion:
    v.expect_counts(2, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES_INT)
    v.expect_types([t, T.INT32], [t])
    axis_at_validation(v, 1, v.input_rank(INPUT), extra=1)
    require_same_quant(v)
    return version_for_types([t], HalVersion.V1_2)


def execute_expand_dims(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    axis = axis_at_execution(ctx, ctx.scalar(1), x.ndim + 1)
    ctx.set_output(OUTPUT, np.expand_dims(x, axis))


# -- TRANSPOSE ------------------------------------------------------------------------
def execute_transpose(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    if ctx.optional(1) is None:
        perm = list(range(x.ndim))[::-1]
    else:
        perm = int_vector(ctx, 1, x.ndim, "perm")
        if sorted(perm) != list(range(x.ndim)):
            ctx.fail(f"perm {perm} is not a permutation of the {x.ndim} input dimensions")
    ctx.set_output(OUTPUT, np.ascontiguousarray(np.transpose(x, perm)))


# -- CONCATENATION ------------------------------------------------------------------------
def validate_concatenation(v: ValidationContext) -> HalVersion:
    v.require(v.num_inputs >= 2, f"expected at least 2 inputs, got {v.num_inputs}")
    v.require(v.num_outputs == 1, f"expected 1 output, got {v.num_outputs}")
    t = v.expect_input_type_in(INPUT, MOVE_TYPES)
    n = v.num_inputs - 1
    v.expect_types([t] * n + [T.INT32], [t])
    version = version_for_types([t], HalVersion.V1_0)
    for i in range(n):
        v.expect_rank(i, 4, at_most=True)
    ranks = {r for r in (v.input_rank(i) for i in range(n)) if r is not None}
    v.require(len(ranks) <= 1, f"all inputs must have the same rank, got {sorted(ranks)}")
    if ranks:
        axis_at_validation(v, n, next(iter(ranks)))
        axis = v.constant_scalar(n)
        v.require(axis is None or axis >= 0, f"axis must be non-negative, got {axis}")
    if t == T.TENSOR_QUANT8_ASYMM:
        out = v.outputs[OUTPUT]
        if any(v.inputs[i].scale != out.scale or v.inputs[i].zero_point != out.zero_point for i in range(n)):
            version = max(version, HalVersion.V1_2)
    return version


def _requantize_to(x: np.ndarray, scale: float, zp: int, out_scale: float, out_zp: int, t: T) -> np.ndarray:
    """The reference's float32 requantization: round(q * s/s_out - zp * s/s_out) + zp_out.

    The reference evaluates signed inputs in the unsigned domain (codes and zero
    points shifted by 128); doing the same keeps float32 rounding identical.
    """
    if np.float32(scale) == np.float32(out_scale) and zp == out_zp:
        return x
    shift = 128 if t == T.TENSOR_QUANT8_ASYMM_SIGNED else 0
    ratio = np.float32(scale) * (np.float32(1.0) / np.float32(out_scale))
    bias = np.float32(-(zp + shift)) * ratio
    values = (x.astype(np.int64) + shift).astype(np.float32)
    q = round_half_away(values * ratio + bias).astype(np.int64) + (out_zp + shift)
    return np.clip(q, 0, 255) - shift


def execute_concatenation(ctx: ExecutionContext) -> None:
    n = len(ctx.inputs) - 1
    parts = [ctx.tensor(i) for i in range(n)]
    rank = parts[0].ndim
    axis = ctx.scalar(n)
    if not 0 <= axis < rank:
        ctx.fail(f"axis {axis} is out of range for rank {rank}")
    for i, p in enumerate(parts):
        if p.ndim != rank or any(a != b for d, (a, b) in enumerate(zip(p.shape, parts[0].shape)) if d != axis):
            ctx.fail(f"input {i} shape {list(p.shape)} does not match input 0 {list(parts[0].shape)}")
    t = ctx.in_type(INPUT)
    if t in QUANT8_TYPES:
        s, z = ctx.out_scale(OUTPUT), ctx.out_zero_point(OUTPUT)
        parts = [_requantize_to(p, ctx.scale(i), ctx.zero_point(i), s, z, t) for i, p in enumerate(parts)]
    ctx.set_output(OUTPUT, np.concatenate(parts, axis=axis))


def bind_concatenation(v: ValidationContext, state: object) -> FastKernel | None:
    """Static shapes along a constant axis, no requantization: one ``np.concatenate`` into the
    output buffer, nothing re-checked."""
    n = v.num_inputs - 1
    shapes, out_shape, axis = [v.input_dims(i) for i in range(n)], v.outputs[OUTPUT].dimensions, v.constant_scalar(n)
    if not static_shapes(*shapes, out_shape) or not isinstance(axis, int) or not 0 <= axis < len(out_shape):
        return None
    if any(
        len(s) != len(out_shape) or any(a != b for d, (a, b) in enumerate(zip(s, out_shape)) if d != axis)
        for s in shapes
    ):
        return None
    if sum(s[axis] for s in shapes) != out_shape[axis]:
        return None
    out = v.outputs[OUTPUT]
    if v.input_type(INPUT) in QUANT8_TYPES and any(
        np.float32(v.inputs[i].scale) != np.float32(out.scale) or v.inputs[i].zero_point != out.zero_point
        for i in range(n)
    ):
        return None
    dtype = np.dtype(DTYPE[v.input_type(INPUT)])

    def run(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        parts = inputs[:n]
        if any(p is None or p.shape != s for p, s in zip(parts, shapes)):
            return None
        dest = buffers[OUTPUT]
        if dest is None:
            dest = np.empty(out_shape, dtype)
        np.concatenate(parts, axis=axis, out=dest)  # type: ignore[arg-type]
        return [dest]

    return run


# -- SPLIT ------------------------------------------------------------------------------
def validate_split(v: ValidationContext) -> HalVersion:
    v.require(v.num_inputs == 3, f"expected 3 inputs, got {v.num_inputs}")
    v.require(v.num_outputs >= 1, "expected at least 1 output")
    t = v.expect_input_type_in(INPUT, MOVE_TYPES_INT)
    v.expect_types([t, T.INT32, T.INT32], [t] * v.num_outputs)
    axis_at_validation(v, 1, v.input_rank(INPUT))
    count = v.constant_scalar(2)
    v.require(count is None or count == v.num_outputs, f"num_splits {count} != {v.num_outputs} outputs")
    for k in range(v.num_outputs):
        require_same_quant(v, k)
    return version_for_types([t], HalVersion.V1_2)


def execute_split(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    axis = axis_at_execution(ctx, ctx.scalar(1), x.ndim)
    count = ctx.scalar(2)
    if count != len(ctx.out_operands) or count <= 0:
        ctx.fail(f"num_splits {count} does not match the {len(ctx.out_operands)} outputs")
    if x.shape[axis] % count:
        ctx.fail(f"dimension {axis} of size {x.shape[axis]} is not divisible by {count}")
    for k, part in enumerate(np.split(x, count, axis=axis)):
        ctx.set_output(k, part)


# -- RANK ------------------------------------------------------------------------------
_RANK_TYPES = (
    T.TENSOR_FLOAT16,
    T.TENSOR_FLOAT32,
    T.TENSOR_INT32,
    T.TENSOR_QUANT8_ASYMM,
    T.TENSOR_QUANT16_SYMM,
    T.TENSOR_BOOL8,
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
    T.TENSOR_QUANT16_ASYMM,
    T.TENSOR_QUANT8_SYMM,
    T.TENSOR_QUANT8_ASYMM_SIGNED,
)


def validate_rank(v: ValidationContext) -> HalVersion:
    v.expect_counts(1, 1)
    v.expect_input_type_in(INPUT, _RANK_TYPES)
    v.expect_types([], [T.INT32])
    return HalVersion.V1_3


def execute_rank(ctx: ExecutionContext) -> None:
    ctx.set_output(OUTPUT, np.array(ctx.tensor(INPUT).ndim))


# -- FILL ------------------------------------------------------------------------------
_FILL_VALUE_TYPE = {T.TENSOR_FLOAT16: T.FLOAT16, T.TENSOR_FLOAT32: T.FLOAT32, T.TENSOR_INT32: T.INT32}


def validate_fill(v: ValidationContext) -> HalVersion:
    v.expect_counts(2, 1)
    out = v.output_type(OUTPUT)
    if out not in _FILL_VALUE_TYPE:
        v.fail(f"unsupported output type {out.name}")
    v.expect_types([T.TENSOR_INT32, _FILL_VALUE_TYPE[out]], [out])
    expect_vector_input(v, 0)
    return HalVersion.V1_3


def execute_fill(ctx: ExecutionContext) -> None:
    dims = int_vector(ctx, 0, what="dims")
    if any(d < 0 for d in dims):
        ctx.fail(f"negative output dimension in {dims}")
    value = ctx.tensor(1)
    reserve_shape(dims, value.itemsize)
    ctx.set_output(OUTPUT, np.full(dims, value, dtype=value.dtype))


# -- TILE ------------------------------------------------------------------------------
def validate_tile(v: ValidationContext) -> HalVersion:
    v.expect_counts(2, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES_INT)
    v.expect_types([t, T.TENSOR_INT32], [t])
    expect_vector_input(v, 1)
    rank, mult = v.input_rank(INPUT), v.input_dims(1)
    if rank is not None and mult and mult[0]:
        v.require(mult[0] == rank, f"multiples must have {rank} elements, got {mult[0]}")
    require_same_quant(v)
    return version_for_types([t], HalVersion.V1_2)


def execute_tile(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    multiples = int_vector(ctx, 1, x.ndim, "multiples")
    if any(m < 0 for m in multiples):
        ctx.fail(f"multiples must be non-negative, got {multiples}")
    reserve_shape((d * m for d, m in zip(x.shape, multiples)), x.itemsize)
    ctx.set_output(OUTPUT, np.tile(x, multiples))


# -- CHANNEL_SHUFFLE -------------------------------------------------------------------
def validate_channel_shuffle(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES)
    v.expect_types([t, T.INT32, T.INT32], [t])
    v.expect_rank(INPUT, 4, at_most=True)
    rank = v.input_rank(INPUT)
    axis_at_validation(v, 2, rank)
    groups = v.constant_scalar(1)
    v.require(groups is None or groups > 0, f"num_groups must be positive, got {groups}")
    require_same_quant(v)
    return version_for_types([t], HalVersion.V1_2)


def execute_channel_shuffle(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    groups = ctx.scalar(1)
    axis = axis_at_execution(ctx, ctx.scalar(2), x.ndim)
    channels = x.shape[axis]
    if groups <= 0 or channels % groups:
        ctx.fail(f"{channels} channels cannot be split into {groups} groups")
    # [.., groups, group_size, ..] -> [.., group_size, groups, ..]
    split = x.reshape((*x.shape[:axis], groups, channels // groups, *x.shape[axis + 1 :]))
    ctx.set_output(OUTPUT, np.swapaxes(split, axis, axis + 1).reshape(x.shape))


# -- PACK ------------------------------------------------------------------------------
def validate_pack(v: ValidationContext) -> HalVersion:
    """Input 0 the INT32 axis, inputs 1..N (N >= 1) tensors of one type, rank and quantization."""
    v.require(v.num_inputs >= 2, f"expected an axis and at least 1 tensor, got {v.num_inputs} inputs")
    v.require(v.num_outputs == 1, f"expected 1 output, got {v.num_outputs}")
    t = v.output_type(OUTPUT)
    v.require(t in MOVE_TYPES_INT, f"unsupported output type {t.name}")
    v.expect_types([T.INT32] + [t] * (v.num_inputs - 1), [t])
    out_rank = len(v.outputs[OUTPUT].dimensions) or None
    ranks = {r for r in (v.input_rank(i) for i in range(1, v.num_inputs)) if r is not None}
    if out_rank is not None:
        ranks.add(out_rank - 1)
    v.require(len(ranks) <= 1, f"the inputs must have one rank, one less than the output's, got {sorted(ranks)}")
    if ranks:
        rank = next(iter(ranks))
        v.require(rank >= 1, "the inputs must have rank >= 1")
        axis = v.constant_scalar(0)
        v.require(axis is None or 0 <= axis <= rank, f"axis {axis} is out of range [0, {rank}]")
    for i in range(1, v.num_inputs):
        require_same_quant(v, OUTPUT, i)
    return HalVersion.AIDL_V2


def execute_pack(ctx: ExecutionContext) -> None:
    parts = [ctx.tensor(i) for i in range(1, len(ctx.inputs))]
    first = parts[0]
    if first.ndim == 0:
        ctx.fail("the inputs must have rank >= 1")
    for i, p in enumerate(parts[1:], start=2):
        if p.shape != first.shape:
            ctx.fail(f"input {i} shape {list(p.shape)} differs from input 1 {list(first.shape)}")
    axis = ctx.scalar(0)
    if not 0 <= axis <= first.ndim:
        ctx.fail(f"axis {axis} is out of range [0, {first.ndim}]")
    reserve_shape((len(parts), *first.shape), first.itemsize)
    ctx.set_output(OUTPUT, np.stack(parts, axis=axis))


# -- REVERSE ---------------------------------------------------------------------------
def validate_reverse(v: ValidationContext) -> HalVersion:
    v.expect_counts(2, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES_INT)
    v.expect_types([t, T.TENSOR_INT32], [t])
    v.expect_rank(INPUT, 8, at_most=True)
    axis_dims = v.input_dims(1)
    v.require(len(axis_dims) <= 1 and (not axis_dims or axis_dims[0] in (0, 1)), "the axis must have shape [1]")
    rank, out_dims = v.input_rank(INPUT), v.outputs[OUTPUT].dimensions
    v.require(not rank or not out_dims or len(out_dims) == rank, "the output must have the input's rank")
    axis = v.constant(1)
    if axis is not None and rank is not None and axis.size == 1:
        a = int(axis.reshape(-1)[0])
        v.require(0 <= a < rank, f"axis {a} is out of range [0, {rank})")
    require_same_quant(v)
    return HalVersion.AIDL_V3


def execute_reverse(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    (axis,) = int_vector(ctx, 1, 1, "axis")
    if not 0 <= axis < x.ndim:
        ctx.fail(f"axis {axis} is out of range [0, {x.ndim})")
    ctx.set_output(OUTPUT, np.flip(x, axis))


# Runtime shapes and axes that do not fit the input are the request's error: INVALID_ARGUMENT.
_register = partial(register, execution_failure=INVALID)
_register(OperationType.RESHAPE, validate=validate_reshape, execute=execute_reshape, bind=bind_reshape, views=True)
_register(OperationType.SQUEEZE, validate=validate_with_optional_vector, execute=execute_squeeze)
_register(OperationType.EXPAND_DIMS, validate=validate_expand_dims, execute=execute_expand_dims)
_register(OperationType.TRANSPOSE, validate=validate_with_optional_vector, execute=execute_transpose)
_register(
    OperationType.CONCATENATION, validate=validate_concatenation, execute=execute_concatenation, bind=bind_concatenation
)
_register(OperationType.SPLIT, validate=validate_split, execute=execute_split)
_register(OperationType.RANK, validate=validate_rank, execute=execute_rank)
_register(OperationType.FILL, validate=validate_fill, execute=execute_fill)
_register(OperationType.TILE, validate=validate_tile, execute=execute_tile)
_register(OperationType.CHANNEL_SHUFFLE, validate=validate_channel_shuffle, execute=execute_channel_shuffle)
_register(OperationType.PACK, validate=validate_pack, execute=execute_pack)
_register(OperationType.REVERSE, validate=validate_reverse, execute=execute_reverse)

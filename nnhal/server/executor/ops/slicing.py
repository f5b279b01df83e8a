"""Slicing and spatial re-arrangement: SLICE, STRIDED_SLICE, GATHER, PAD, PAD_V2,
MIRROR_PAD (AIDL V3, feature level 7), SPACE_TO_DEPTH, DEPTH_TO_SPACE,
SPACE_TO_BATCH_ND, BATCH_TO_SPACE_ND.

Pure data movement (quantized outputs keep the input's scale and zero point).
The block operations work on NHWC; an NCHW layout flag (HAL 1.2) transposes in
and out. Padding of quantized tensors uses the zero point (the logical zero)
as the HAL has required since 1.2.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.core.operand_types import DTYPE
from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.errors import INVALID
from nnhal.server.executor.ops._padding import border_slices, constant_pad, inner_slice
from nnhal.server.executor.ops._validation import (
    axis_at_validation,
    expect_vector_input,
    input_axis,
    int_vector,
    require_same_quant,
)
from nnhal.server.executor.ops.common import (
    MOVE_TYPES,
    MOVE_TYPES_INT,
    QUANT8_TYPES,
    T,
    from_nhwc,
    qrange,
    static_shapes,
    to_nhwc,
    version_for_types,
)
from nnhal.server.executor.registry import FastKernel, register

INPUT = 0
OUTPUT = 0


# -- SLICE ------------------------------------------------------------------------------
def validate_slice(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES_INT)
    v.expect_types([t, T.TENSOR_INT32, T.TENSOR_INT32], [t])
    expect_vector_input(v, 1)
    expect_vector_input(v, 2)
    require_same_quant(v)
    return version_for_types([t], HalVersion.V1_2)


def execute_slice(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    if x.ndim == 0:
        ctx.fail("input must have rank >= 1")
    begin = int_vector(ctx, 1, x.ndim, "begin")
    size = int_vector(ctx, 2, x.ndim, "size")
    index = []
    for d, (b, s, n) in enumerate(zip(begin, size, x.shape)):
        if s == -1:
            s = n - b
        if not (0 <= b <= n and s >= 0 and b + s <= n):
            ctx.fail(f"slice begin {b} size {size[d]} is out of bounds for dimension {d} of size {n}")
        index.append(slice(b, b + s))
    ctx.set_output(OUTPUT, x[tuple(index)])


# -- STRIDED_SLICE ----------------------------------------------------------------------
def validate_strided_slice(v: ValidationContext) -> HalVersion:
    v.expect_counts(7, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES)
    v.expect_types([t, T.TENSOR_INT32, T.TENSOR_INT32, T.TENSOR_INT32, T.INT32, T.INT32, T.INT32], [t])
    v.expect_rank(INPUT, 4, at_most=True)
    for i in (1, 2, 3):
        expect_vector_input(v, i)
    strides = v.constant(3)
    v.require(strides is None or bool(np.all(strides != 0)), "strides must be non-zero")
    require_same_quant(v)
    return version_for_types([t], HalVersion.V1_1)


def _clamped_index(index: int, dim: int, positive_stride: bool) -> int:
    """Begin/end clamped into the dimension (negative indices count from the end)."""
    if positive_stride:
        if index >= dim:
            return dim
        return min(max(index, -dim), dim) % dim if dim else 0
    if index < -dim:
        return -1
    return min(max(index, -dim), dim - 1) % dim if dim else -1


def execute_strided_slice(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    n = x.ndim
    begin = int_vector(ctx, 1, n, "begin")
    end = int_vector(ctx, 2, n, "end")
    strides = int_vector(ctx, 3, n, "strides")
    begin_mask, end_mask, shrink_mask = ctx.scalar(4), ctx.scalar(5), ctx.scalar(6)
    index: list[slice | int] = []
    for d in range(n):
        dim, stride = x.shape[d], strides[d]
        if stride == 0:
            ctx.fail(f"stride of dimension {d} is zero")
        positive = stride > 0
        b = (0 if positive else dim - 1) if begin_mask >> d & 1 else _clamped_index(begin[d], dim, positive)
        e = (dim if positive else -1) if end_mask >> d & 1 else _clamped_index(end[d], dim, positive)
        length = max(0, -(-(e - b) // stride))
        if shrink_mask >> d & 1:
            if stride < 0 or length != 1:
                ctx.fail(f"shrunk dimension {d} must select exactly one element with a positive stride")
            index.append(b)
        elif length == 0:
            index.append(slice(0, 0))
        else:
            # A negative-stride slice ending before element 0 has no Python stop value.
            index.append(slice(b, None if e < 0 else e, stride))
    out = x[tuple(index)]
    ctx.set_output(OUTPUT, out.reshape(out.shape or (1,)))


# -- GATHER -----------------------------------------------------------------------------
def validate_gather(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES_INT)
    v.expect_types([t, T.INT32, T.TENSOR_INT32], [t])
    axis_at_validation(v, 1, v.input_rank(INPUT))
    require_same_quant(v)
    return version_for_types([t], HalVersion.V1_2)


def execute_gather(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    axis = input_axis(ctx, x, 1)
    indices = ctx.tensor(2)
    if indices.size and (indices.min() < 0 or indices.max() >= x.shape[axis]):
        ctx.fail(f"indices out of range [0, {x.shape[axis]}) for axis {axis}")
    reserve_shape((*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :]), x.itemsize)
    ctx.set_output(OUTPUT, np.take(x, indices.astype(np.intp), axis=axis))


# -- PAD / PAD_V2 -------------------------------------------------------------------------
_PAD_V2_VALUE = {T.TENSOR_FLOAT32: T.FLOAT32, T.TENSOR_FLOAT16: T.FLOAT16}


def _validate_paddings(v: ValidationContext) -> None:
    v.require(v.input_rank(1) in (None, 2), "paddings must be a 2-D tensor")
    rank, dims = v.input_rank(INPUT), v.input_dims(1)
    if rank is not None and len(dims) == 2 and all(dims):
        v.require(dims == (rank, 2), f"paddings must have shape [{rank}, 2], got {list(dims)}")
    pads = v.constant(1)
    v.require(pads is None or bool(np.all(pads >= 0)), "paddings must be non-negative")


def validate_pad(v: ValidationContext) -> HalVersion:
    v.expect_counts(2, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES)
    v.expect_types([t, T.TENSOR_INT32], [t])
    v.expect_rank(INPUT, 4, at_most=True)
    _validate_paddings(v)
    require_same_quant(v)
    version = version_for_types([t], HalVersion.V1_1)
    if t == T.TENSOR_QUANT8_ASYMM and v.inputs[INPUT].zero_point != 0:
        # Padding with the zero point (rather than an undefined value) is 1.2 behaviour.
        version = max(version, HalVersion.V1_2)
    return version


def validate_pad_v2(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES)
    v.expect_types([t, T.TENSOR_INT32, _PAD_V2_VALUE.get(t, T.INT32)], [t])
    v.expect_rank(INPUT, 4, at_most=True)
    _validate_paddings(v)
    require_same_quant(v)
    if t in QUANT8_TYPES:
        value = v.constant_scalar(2)
        lo, hi = qrange(t)
        v.require(value is None or lo <= value <= hi, f"pad value {value} is outside [{lo}, {hi}]")
    return version_for_types([t], HalVersion.V1_2)


def _paddings(ctx: ExecutionContext, rank: int) -> list[tuple[int, int]]:
    pads = ctx.tensor(1)
    if pads.shape != (rank, 2):
        ctx.fail(f"paddings must have shape [{rank}, 2], got {list(pads.shape)}")
    if pads.size and pads.min() < 0:
        ctx.fail("paddings must be non-negative")
    return [(int(a), int(b)) for a, b in pads]


def execute_pad(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    pads = _paddings(ctx, x.ndim)
    t = ctx.in_type(INPUT)
    if ctx.op_type == OperationType.PAD_V2:
        value = ctx.scalar(2)
        if t in QUANT8_TYPES:
            lo, hi = qrange(t)
            if not lo <= value <= hi:
                ctx.fail(f"pad value {value} is outside [{lo}, {hi}]")
    else:
        value = ctx.zero_point(INPUT) if t in QUANT8_TYPES else 0
    reserve_shape((d + a + b for d, (a, b) in zip(x.shape, pads)), x.itemsize)
    ctx.set_output(OUTPUT, constant_pad(x, pads, np.array(value, dtype=x.dtype)))


def bind_pad(v: ValidationContext, state: object) -> FastKernel | None:
    """PAD with constant paddings and a static shape: the border filled and one copy, nothing re-checked
    (the fill is the zero point for quantized tensors, as ``execute_pad``'s)."""
    t, shape, out_shape, pads = v.input_type(INPUT), v.input_dims(INPUT), v.outputs[OUTPUT].dimensions, v.constant(1)
    if v.op_type != OperationType.PAD or not static_shapes(shape, out_shape) or pads is None:
        return None
    if pads.shape != (len(shape), 2) or (pads.size and pads.min() < 0):
        return None
    widths = [(int(a), int(b)) for a, b in pads]
    if tuple(d + a + b for d, (a, b) in zip(shape, widths)) != out_shape:
        return None
    dtype = DTYPE[t]
    fill = np.array(v.inputs[INPUT].zero_point if t in QUANT8_TYPES else 0, dtype=dtype)
    inner, border = inner_slice(shape, widths), border_slices(shape, widths)

    def run(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        x = inputs[INPUT]
        if x is None or x.shape != shape:
            return None
        out = buffers[OUTPUT]
        if out is None:
            out = np.empty(out_shape, dtype=dtype)
        for slab in border:
            out[slab] = fill
        out[inner] = x
        return [out]

    return run


# -- MIRROR_PAD ---------------------------------------------------------------------------
#: Mode scalar -> numpy's name: REFLECT leaves the border element out of the mirror, SYMMETRIC repeats it.
_MIRROR_MODES = {0: "reflect", 1: "symmetric"}


def validate_mirror_pad(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES_INT)
    v.expect_types([t, T.TENSOR_INT32, T.INT32], [t])
    _validate_paddings(v)
    rank, out_dims = v.input_rank(INPUT), v.outputs[OUTPUT].dimensions
    v.require(not rank or not out_dims or len(out_dims) == rank, "the output must have the input's rank")
    mode = v.constant_scalar(2)
    v.require(mode is None or mode in _MIRROR_MODES, f"mode must be 0 (REFLECT) or 1 (SYMMETRIC), got {mode}")
    require_same_quant(v)
    return HalVersion.AIDL_V3


def execute_mirror_pad(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    if x.ndim == 0:
        ctx.fail("the input must have rank >= 1")
    mode = ctx.scalar(2)
    if mode not in _MIRROR_MODES:
        ctx.fail(f"mode must be 0 (REFLECT) or 1 (SYMMETRIC), got {mode}")
    pads = _paddings(ctx, x.ndim)
    # REFLECT mirrors at most size - 1 elements, SYMMETRIC at most size (a single mirror, as the HAL says).
    most = [max(d - (1 if mode == 0 else 0), 0) for d in x.shape]
    for d, ((a, b), limit) in enumerate(zip(pads, most)):
        if a > limit or b > limit:
            ctx.fail(f"padding {[a, b]} of dimension {d} (size {x.shape[d]}) exceeds {limit} for this mode")
    reserve_shape((d + a + b for d, (a, b) in zip(x.shape, pads)), x.itemsize)
    ctx.set_output(OUTPUT, np.pad(x, pads, mode=_MIRROR_MODES[mode]))  # type: ignore[call-overload]


# -- layout helpers ----------------------------------------------------------------------
def _validate_layout(v: ValidationContext, flag_input: int) -> HalVersion:
    """A layout flag input (even a false one) needs HAL 1.2, as the reference validates it."""
    return HalVersion.V1_2 if v.num_inputs > flag_input else HalVersion.V1_0


def _nchw(ctx: ExecutionContext, flag_input: int) -> bool:
    return len(ctx.inputs) > flag_input and ctx.has(flag_input) and bool(ctx.scalar(flag_input))


def _nhwc_input(ctx: ExecutionContext, nchw: bool) -> np.ndarray:
    x = ctx.tensor(INPUT)
    if x.ndim != 4:
        ctx.fail(f"input must have rank 4, got {x.ndim}")
    return to_nhwc(x, nchw)


def _set_from_nhwc(ctx: ExecutionContext, y: np.ndarray, nchw: bool) -> None:
    ctx.set_output(OUTPUT, from_nhwc(y, nchw))


def _validate_block_op(v: ValidationContext, since: HalVersion, extra_types: list[T]) -> HalVersion:
    """Shared checks of the four block operations (input 0 rank 4, optional layout last)."""
    n = 1 + len(extra_types)
    v.expect_counts((n, n + 1), 1)
    t = v.expect_input_type_in(INPUT, MOVE_TYPES)
    v.expect_types([t, *extra_types, T.BOOL], [t])
    v.expect_rank(INPUT, 4)
    require_same_quant(v)
    return max(version_for_types([t], since), _validate_layout(v, n))


# -- SPACE_TO_DEPTH / DEPTH_TO_SPACE -------------------------------------------------------
def validate_depth_space(v: ValidationContext) -> HalVersion:
    version = _validate_block_op(v, HalVersion.V1_0, [T.INT32])
    block = v.constant_scalar(1)
    v.require(block is None or block >= 1, f"block_size must be >= 1, got {block}")
    return version


def execute_space_to_depth(ctx: ExecutionContext) -> None:
    nchw = _nchw(ctx, 2)
    x = _nhwc_input(ctx, nchw)
    bs = ctx.scalar(1)
    b, h, w, c = x.shape
    if bs < 1 or h % bs or w % bs:
        ctx.fail(f"height {h} and width {w} must be multiples of block_size {bs}")
    y = x.reshape(b, h // bs, bs, w // bs, bs, c).transpose(0, 1, 3, 2, 4, 5)
    _set_from_nhwc(ctx, y.reshape(b, h // bs, w // bs, bs * bs * c), nchw)


def execute_depth_to_space(ctx: ExecutionContext) -> None:
    nchw = _nchw(ctx, 2)
    x = _nhwc_input(ctx, nchw)
    bs = ctx.scalar(1)
    b, h, w, c = x.shape
    if bs < 1 or c % (bs * bs):
        ctx.fail(f"depth {c} must be a multiple of block_size^2 ({bs}^2)")
    co = c // (bs * bs)
    y = x.reshape(b, h, w, bs, bs, co).transpose(0, 1, 3, 2, 4, 5)
    _set_from_nhwc(ctx, y.reshape(b, h * bs, w * bs, co), nchw)


# -- SPACE_TO_BATCH_ND / BATCH_TO_SPACE_ND ----------------------------------------------------
def _validate_block_shape(v: ValidationContext) -> None:
    expect_vector_input(v, 1)
    dims = v.input_dims(1)
    v.require(not dims or not dims[0] or dims[0] == 2, f"block shape must have 2 elements, got {list(dims)}")
    block = v.constant(1)
    v.require(block is None or bool(np.all(block >= 1)), "block sizes must be >= 1")


def validate_batch_to_space(v: ValidationContext) -> HalVersion:
    version = _validate_block_op(v, HalVersion.V1_1, [T.TENSOR_INT32])
    _validate_block_shape(v)
    return version


def validate_space_to_batch(v: ValidationContext) -> HalVersion:
    version = _validate_block_op(v, HalVersion.V1_1, [T.TENSOR_INT32, T.TENSOR_INT32])
    _validate_block_shape(v)
    v.require(v.input_rank(2) in (None, 2), "paddings must be a 2-D tensor")
    dims = v.input_dims(2)
    v.require(len(dims) != 2 or not all(dims) or dims == (2, 2), f"paddings must have shape [2, 2], got {list(dims)}")
    pads = v.constant(2)
    v.require(pads is None or bool(np.all(pads >= 0)), "paddings must be non-negative")
    if v.input_type(INPUT) == T.TENSOR_QUANT8_ASYMM and v.inputs[INPUT].zero_point != 0:
        version = max(version, HalVersion.V1_2)
    return version


def _block_shape(ctx: ExecutionContext) -> tuple[int, int]:
    bh, bw = int_vector(ctx, 1, 2, "block shape")
    if bh < 1 or bw < 1:
        ctx.fail(f"block sizes must be >= 1, got {[bh, bw]}")
    return bh, bw


def execute_batch_to_space(ctx: ExecutionContext) -> None:
    nchw = _nchw(ctx, 2)
    x = _nhwc_input(ctx, nchw)
    bh, bw = _block_shape(ctx)
    batch, h, w, c = x.shape
    if batch % (bh * bw):
        ctx.fail(f"batch {batch} is not a multiple of the block size {bh}x{bw}")
    bo = batch // (bh * bw)
    # Input batch (i * bw + j) * bo + n holds the pixels at offset (i, j) of output batch n.
    y = x.reshape(bh, bw, bo, h, w, c).transpose(2, 3, 0, 4, 1, 5)
    _set_from_nhwc(ctx, y.reshape(bo, h * bh, w * bw, c), nchw)


def execute_space_to_batch(ctx: ExecutionContext) -> None:
    nchw = _nchw(ctx, 3)
    x = _nhwc_input(ctx, nchw)
    bh, bw = _block_shape(ctx)
    pads = ctx.tensor(2)
    if pads.shape != (2, 2):
        ctx.fail(f"paddings must have shape [2, 2], got {list(pads.shape)}")
    if pads.min() < 0:
        ctx.fail("paddings must be non-negative")
    (pt, pb), (pl, pr) = ((int(a), int(b)) for a, b in pads)
    value = ctx.zero_point(INPUT) if ctx.in_type(INPUT) in QUANT8_TYPES else 0
    # The padded copy and the rearranged result.
    reserve_shape((x.shape[0], x.shape[1] + pt + pb, x.shape[2] + pl + pr, x.shape[3]), x.itemsize, copies=2)
    padded = np.pad(
        x, [(0, 0), (pt, pb), (pl, pr), (0, 0)], mode="constant", constant_values=np.array(value, dtype=x.dtype)
    )
    batch, h, w, c = padded.shape
    if h % bh or w % bw:
        ctx.fail(f"padded size {h}x{w} is not a multiple of the block size {bh}x{bw}")
    y = padded.reshape(batch, h // bh, bh, w // bw, bw, c).transpose(2, 4, 0, 1, 3, 5)
    _set_from_nhwc(ctx, y.reshape(batch * bh * bw, h // bh, w // bw, c), nchw)


# Runtime indexes, paddings and blocks that do not fit the input are the request's error: INVALID_ARGUMENT.
_register = partial(register, execution_failure=INVALID)
_register(OperationType.SLICE, validate=validate_slice, execute=execute_slice)
_register(OperationType.STRIDED_SLICE, validate=validate_strided_slice, execute=execute_strided_slice)
_register(OperationType.GATHER, validate=validate_gather, execute=execute_gather)
_register(OperationType.PAD, validate=validate_pad, execute=execute_pad, bind=bind_pad)
_register(OperationType.PAD_V2, validate=validate_pad_v2, execute=execute_pad)
_register(OperationType.MIRROR_PAD, validate=validate_mirror_pad, execute=execute_mirror_pad)
_register(OperationType.SPACE_TO_DEPTH, validate=validate_depth_space, execute=execute_space_to_depth)
_register(OperationType.DEPTH_TO_SPACE, validate=validate_depth_space, execute=execute_depth_to_space)
_register(OperationType.SPACE_TO_BATCH_ND, validate=validate_space_to_batch, execute=execute_space_to_batch)
_register(OperationType.BATCH_TO_SPACE_ND, validate=validate_batch_to_space, execute=execute_batch_to_space)

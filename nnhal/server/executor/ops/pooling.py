"""Pooling: AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D.

One strided view per filter tap over the padded input (a handful of whole-
tensor numpy passes, no per-pixel loops). Padding never counts: averages divide
by the number of in-bounds taps, as the reference does; quantized averages round
as tflite's integer kernels ((sum +- count/2) / count, truncating).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.core.operand_types import DTYPE
from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._activations import (
    activation_range_quant,
    apply_activation,
    check_activation,
    clamp_in_place,
)
from nnhal.server.executor.ops._padding import (
    PADDING_CODES,
    Padder,
    implicit_padding,
    out_size,
    pad_spatial,
    row_taps,
    window_taps,
)
from nnhal.server.executor.ops._validation import same_quant
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    QUANT8_TYPES,
    T,
    from_nhwc,
    static_shapes,
    to_compute,
    to_nhwc,
)
from nnhal.server.executor.registry import FastKernel, register

INPUT = 0
Op = OperationType


def validate_pool(v: ValidationContext) -> HalVersion:
    v.expect_counts((7, 8, 10, 11), 1)
    allowed = FLOAT_TYPES if v.op_type == Op.L2_POOL_2D else (*FLOAT_TYPES, *QUANT8_TYPES)
    t = v.expect_input_type_in(INPUT, allowed)
    n = v.num_inputs
    ints = 9 if n >= 10 else 6
    v.expect_types([t, *([T.INT32] * ints)], [t])
    if n in (8, 11):
        v.require(v.input_type(n - 1) == T.BOOL, f"input {n - 1} (layout) must be BOOL")
    v.expect_rank(INPUT, 4)
    if t in QUANT8_TYPES:
        v.require(
            same_quant(v.outputs[0], v.inputs[INPUT]), "quantized output must have the input's scale and zero point"
        )
    if t == T.TENSOR_QUANT8_ASYMM_SIGNED:
        return HalVersion.V1_3
    if t == T.TENSOR_FLOAT16 or n in (8, 11):
        return HalVersion.V1_2
    return HalVersion.V1_0


def execute_pool(ctx: ExecutionContext) -> None:
    n = len(ctx.inputs)
    explicit = n >= 10
    nchw = bool(ctx.scalar(n - 1)) if n in (8, 11) else False
    x = to_nhwc(ctx.tensor(INPUT), nchw)
    _, h, w, _ = x.shape
    if explicit:
        pl, pr, pt, pb, sw, sh, fw, fh, act = (ctx.scalar(i) for i in range(1, 10))
    else:
        code, sw, sh, fw, fh, act = (ctx.scalar(i) for i in range(1, 7))
        if code not in PADDING_CODES:
            ctx.fail(f"padding code must be 1 (SAME) or 2 (VALID), got {code}")
        ctx.require(min(sw, sh, fw, fh) >= 1, "strides and filter sizes must be >= 1")
        pt, pb = implicit_padding(h, sh, 1, fh, code)
        pl, pr = implicit_padding(w, sw, 1, fw, code)
    ctx.require(
        min(sw, sh, fw, fh) >= 1 and min(pl, pr, pt, pb) >= 0 and check_activation(act),
        "invalid stride, filter, padding or activation",
    )
    ctx.require(fw > pl and fw > pr and fh > pt and fh > pb, "padding must be smaller than the filter")
    oh, ow = out_size(h, fh, sh, 1, pt, pb), out_size(w, fw, sw, 1, pl, pr)
    if oh <= 0 or ow <= 0:
        ctx.fail(f"output would be {oh}x{ow}")
    t = ctx.in_type(INPUT)
    quant = t in QUANT8_TYPES
    op = ctx.op_type
    if op == Op.MAX_POOL_2D:
        fill = np.iinfo(x.dtype).min if quant else -np.inf
        src = x if quant else to_compute(x)
    else:
        fill = 0
        src = x.astype(np.int32) if quant else to_compute(x)
        if op == Op.L2_POOL_2D:
            src = src * src
    # Horizontal stride 1: passes over whole OW*C rows (numpy's inner loop over C elements was the
    # cost); larger strides keep the NHWC views (splitting columns into phases costs more).
    reserve_shape((x.shape[0], oh, ow, x.shape[3]), 8, copies=2)
    windows = row_taps if sw == 1 else window_taps
    taps = windows(pad_spatial(src, pt, pb, pl, pr, fill), (fh, fw), (oh, ow), (sh, sw))
    acc = taps[0].copy()
    if op == Op.MAX_POOL_2D:
        for tap in taps[1:]:
            np.maximum(acc, tap, out=acc)
    else:
        for tap in taps[1:]:
            acc += tap
    out = acc.reshape(x.shape[0], oh, ow, x.shape[3])
    if op != Op.MAX_POOL_2D:
        rows = np.clip(np.arange(oh) * sh - pt + fh, 0, h) - np.clip(np.arange(oh) * sh - pt, 0, h)
        cols = np.clip(np.arange(ow) * sw - pl + fw, 0, w) - np.clip(np.arange(ow) * sw - pl, 0, w)
        count = (rows[:, None] * cols[None, :])[None, :, :, None]
        if quant:
            half = count // 2
            # Truncating division of (sum +- count/2): tflite's rounding for both signs.
            num = np.where(out > 0, out + half, out - half)
            out = np.sign(num) * (np.abs(num) // count)
        else:
            out = out / count.astype(out.dtype)
            if op == Op.L2_POOL_2D:
                out = np.sqrt(out)
    if quant:
        lo, hi = activation_range_quant(act, ctx.scale(INPUT), ctx.zero_point(INPUT), t)
        result = np.clip(out, lo, hi).astype(DTYPE[t])
    else:
        result = apply_activation(np.ascontiguousarray(out), act)
    ctx.set_output(0, from_nhwc(result, nchw))


def bind_max_pool(v: ValidationContext, state: object) -> FastKernel | None:
    """Float32 NHWC MAX_POOL_2D with constant parameters and static shapes: the general kernel's
    maxima over the taps, in the same order, into the output buffer, nothing re-checked."""
    n = v.num_inputs
    shape, out_shape = v.input_dims(INPUT), v.outputs[0].dimensions
    if v.op_type != Op.MAX_POOL_2D or v.input_type(INPUT) != T.TENSOR_FLOAT32 or len(shape) != 4:
        return None
    if not static_shapes(shape, out_shape) or not all(v.is_constant(i) for i in range(1, n)):
        return None
    if n in (8, 11) and v.constant_scalar(n - 1):
        return None  # NCHW
    _, h, w, _ = shape
    if n >= 10:
        pl, pr, pt, pb, sw, sh, fw, fh, act = (v.constant_scalar(i) for i in range(1, 10))
    else:
        code, sw, sh, fw, fh, act = (v.constant_scalar(i) for i in range(1, 7))
        if code not in PADDING_CODES or min(sw, sh, fw, fh) < 1:
            return None
        pt, pb = implicit_padding(h, sh, 1, fh, code)
        pl, pr = implicit_padding(w, sw, 1, fw, code)
    if min(sw, sh, fw, fh) < 1 or min(pl, pr, pt, pb) < 0 or not check_activation(act):
        return None
    if not (fw > pl and fw > pr and fh > pt and fh > pb):
        return None
    oh, ow = out_size(h, fh, sh, 1, pt, pb), out_size(w, fw, sw, 1, pl, pr)
    if (shape[0], oh, ow, shape[3]) != out_shape:
        return None
    clamp = clamp_in_place(act)
    n, c = shape[0], shape[3]
    wp = w + pl + pr
    padder = Padder(shape, pt, pb, pl, pr, np.float32(-np.inf))

    def run(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        x = inputs[INPUT]
        if x is None or x.shape != shape:
            return None
        xp = padder(x)
        # Separable: the maxima over the window's rows (whole padded rows, contiguous), then over
        # its columns; max is exact in any order.
        rows = xp[:, 0 : (oh - 1) * sh + 1 : sh]
        if fh > 1:
            reserve_shape((n, oh, wp, c), 4)
            rows = np.maximum(rows, xp[:, 1 : 1 + (oh - 1) * sh + 1 : sh])
            for i in range(2, fh):
                np.maximum(rows, xp[:, i : i + (oh - 1) * sh + 1 : sh], out=rows)
        out = buffers[0]
        acc = np.empty(out_shape, np.float32) if out is None else out
        taps = [rows[:, :, j : j + (ow - 1) * sw + 1 : sw] for j in range(fw)]
        if fw == 1:
            np.copyto(acc, taps[0])
        else:
            np.maximum(taps[0], taps[1], out=acc)
            for tap in taps[2:]:
                np.maximum(acc, tap, out=acc)
        if clamp is not None:
            clamp(acc)
        return [acc]

    return run


register(Op.MAX_POOL_2D, validate=validate_pool, execute=execute_pool, bind=bind_max_pool)
for _op in (Op.AVERAGE_POOL_2D, Op.L2_POOL_2D):
    register(_op, validate=validate_pool, execute=execute_pool)

"""Convolutions: CONV_2D, DEPTHWISE_CONV_2D, GROUPED_CONV_2D, TRANSPOSE_CONV_2D.

Float: im2col + one BLAS matmul (1x1 stride-1 convolutions skip im2col);
depthwise: a multiply-add per filter tap over the whole tensor. Quantized:
integer accumulation (float64 BLAS is exact for these sums) then the
reference's fixed-point requantization, per tensor or per output channel.
Constant filters are re-laid-out once at prepare.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from nnhal.core.enums import HalVersion, OperandType, OperationType
from nnhal.core.operand_types import DTYPE
from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._activations import (
    activation_range_quant,
    apply_activation,
    check_activation,
)
from nnhal.server.executor.ops._conv_bound import bind_conv, bind_depthwise
from nnhal.server.executor.ops._conv_core import (
    ROW_TAPS_MIN,
    Geometry,
    QuantState,
    depthwise_sum,
    finish_quant,
    im2col,
    out_hw,
    pad,
    read_geometry,
)
from nnhal.server.executor.ops._fixed_point import channel_multipliers
from nnhal.server.executor.ops._padding import transpose_padding
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    QUANT8_TYPES,
    T,
    from_nhwc,
    to_compute,
    to_nhwc,
)
from nnhal.server.executor.registry import register

INPUT, FILTER, BIAS = 0, 1, 2
Op = OperationType


# -- quantized state -----------------------------------------------------------------
def _filter_scales(ctx_operand: Any, out_channels: int) -> np.ndarray:
    cq = ctx_operand.channel_quant
    if cq is not None and ctx_operand.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        return np.asarray(cq.scales, np.float32)
    return np.full(out_channels, ctx_operand.scale, np.float32)


# -- validation ------------------------------------------------------------------
def _check_conv_types(v: ValidationContext, per_channel_dim: int) -> tuple[OperandType, OperandType]:
    t = v.expect_input_type_in(INPUT, (*FLOAT_TYPES, *QUANT8_TYPES))
    ft = v.input_type(FILTER)
    if t in FLOAT_TYPES:
        v.require(ft == t and v.input_type(BIAS) == t, f"filter and bias must be {t.name}")
    else:
        v.require(
            ft in (t, T.TENSOR_QUANT8_SYMM_PER_CHANNEL), f"filter must be {t.name} or TENSOR_QUANT8_SYMM_PER_CHANNEL"
        )
        v.require(v.input_type(BIAS) == T.TENSOR_INT32, "bias must be TENSOR_INT32 for quantized inputs")
        if ft == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
            cq = v.inputs[FILTER].channel_quant
            v.require(
                cq is not None and cq.channel_dim == per_channel_dim,
                f"per-channel filter must use channel dim {per_channel_dim}",
            )
    v.expect_types([], [t])
    for k in (INPUT, FILTER):
        v.expect_rank(k, 4)
    v.expect_rank(BIAS, 1)
    return t, ft


def _scalar_types(v: ValidationContext, first: int, ints: int, bool_at: list[int], int_after: list[int]) -> None:
    for i in range(first, first + ints):
        v.require(v.input_type(i) == T.INT32, f"input {i} must be INT32")
    for i in bool_at:
        v.require(v.input_type(i) == T.BOOL, f"input {i} (layout) must be BOOL")
    for i in int_after:
        v.require(v.input_type(i) == T.INT32, f"input {i} (dilation) must be INT32")


def _version(v: ValidationContext, t: OperandType, ft: OperandType, modern: bool) -> HalVersion:
    if t == T.TENSOR_QUANT8_ASYMM_SIGNED:
        return HalVersion.V1_3
    scale_ok = True
    if t == T.TENSOR_QUANT8_ASYMM and ft == t:
        scale_ok = bool(v.outputs[0].scale > np.float32(v.inputs[INPUT].scale) * np.float32(v.inputs[FILTER].scale))
    if t == T.TENSOR_FLOAT16 or ft == T.TENSOR_QUANT8_SYMM_PER_CHANNEL or modern or not scale_ok:
        return HalVersion.V1_2
    return HalVersion.V1_0


def _validate_conv_like(v: ValidationContext, implicit_inputs: int, per_channel_dim: int) -> HalVersion:
    """CONV_2D (7 inputs in the implicit-padding form) and DEPTHWISE_CONV_2D (8: plus the multiplier).

    Explicit padding adds 3 inputs; then come the optional layout flag and the optional dilations.
    """
    n0 = implicit_inputs
    v.expect_counts((n0, n0 + 1, n0 + 3, n0 + 4, n0 + 6), 1)
    t, ft = _check_conv_types(v, per_channel_dim)
    n = v.num_inputs
    explicit = n >= n0 + 3 and v.input_type(n0) == T.INT32
    offset = 3 if explicit else 0
    layout = n >= n0 + 1 + offset
    dilation = n == n0 + 3 + offset
    bools = [n0 + offset] if layout else []
    dilations = [n0 + 1 + offset, n0 + 2 + offset] if dilation else []
    _scalar_types(v, 3, n0 - 3 + offset, bools, dilations)
    return _version(v, t, ft, layout or dilation)


def validate_conv(v: ValidationContext) -> HalVersion:
    return _validate_conv_like(v, 7, 0)


def validate_depthwise(v: ValidationContext) -> HalVersion:
    return _validate_conv_like(v, 8, 3)


def validate_grouped(v: ValidationContext) -> HalVersion:
    v.expect_counts((9, 12), 1)
    t, _ = _check_conv_types(v, 0)
    ints = 5 if v.num_inputs == 9 else 8  # (padding code | 4 pads), 2 strides, groups, activation
    _scalar_types(v, 3, ints, [3 + ints], [])
    return HalVersion.V1_3 if t == T.TENSOR_QUANT8_ASYMM_SIGNED else HalVersion.V1_2


def validate_transpose(v: ValidationContext) -> HalVersion:
    v.expect_counts((9, 11), 1)
    t, _ = _check_conv_types(v, 0)
    if v.num_inputs == 9:
        v.require(v.input_type(3) == T.TENSOR_INT32, "input 3 (output shape) must be TENSOR_INT32")
        _scalar_types(v, 4, 4, [8], [])
    else:
        _scalar_types(v, 3, 7, [10], [])
    return HalVersion.V1_3 if t == T.TENSOR_QUANT8_ASYMM_SIGNED else HalVersion.V1_2


# -- prepare: constant filters re-laid-out once ---------------------------------------
def _quant_state(ctx_in: Any, ctx_filter: Any, ctx_out: Any, w: np.ndarray, matrix: np.ndarray) -> QuantState:
    out_channels = matrix.shape[0] if matrix.ndim == 2 else w.shape[-1]
    scales = _filter_scales(ctx_filter, out_channels)
    qm, sh = channel_multipliers(ctx_in.scale, scales, ctx_out.scale)
    if matrix.ndim == 2 and matrix.size:
        lo, hi = (0, 255) if ctx_in.type == T.TENSOR_QUANT8_ASYMM else (-128, 127)
        x_max = max(ctx_in.zero_point - lo, hi - ctx_in.zero_point)
        # Integers below 2^24 are exact in float32, and no partial sum of a row can
        # exceed the sum of its magnitudes: then the faster float32 GEMM is exact too.
        if x_max * float(np.abs(matrix).sum(axis=1).max()) < 2.0**24:
            matrix = matrix.astype(np.float32)
    return QuantState(matrix, qm, sh)


def _gemm_filter(w: np.ndarray, filter_op: Any) -> np.ndarray:
    """[O, KH*KW*C] with the zero point removed: float32 for float filters, float64 for quantized."""
    o = w.shape[0]
    if filter_op.type in FLOAT_TYPES:
        return np.ascontiguousarray(to_compute(w).reshape(o, -1).T)
    zp = filter_op.zero_point if filter_op.type != T.TENSOR_QUANT8_SYMM_PER_CHANNEL else 0
    return np.ascontiguousarray((w.astype(np.float64) - zp).reshape(o, -1).T)


def prepare_conv(v: ValidationContext) -> Any:
    w = v.constant(FILTER)
    if w is None:
        return None
    matrix = _gemm_filter(w, v.inputs[FILTER])
    if v.inputs[FILTER].type in FLOAT_TYPES:
        return matrix
    return _quant_state(v.inputs[INPUT], v.inputs[FILTER], v.outputs[0], w, matrix.T)


def _geometry(
    ctx: ExecutionContext,
    explicit: bool,
    first: int,
    kernel_hw: tuple[int, int],
    in_hw_nhwc: tuple[int, int],
    has_extra: bool,
) -> Geometry:
    """Read the scalar parameters starting at input ``first`` (after input, filter, bias)."""
    n = len(ctx.inputs)
    return read_geometry(ctx.scalar, ctx.has, n, ctx.fail, explicit, first, kernel_hw, in_hw_nhwc, has_extra)


def _finish_quant(
    ctx: ExecutionContext, acc: np.ndarray, bias: np.ndarray, qm: np.ndarray, sh: np.ndarray, act: int
) -> np.ndarray:
    """Accumulator (exact integers, float64 or int) + bias -> requantized, clamped output dtype."""
    t, zo = ctx.out_type(0), ctx.out_zero_point(0)
    lo, hi = activation_range_quant(act, ctx.out_scale(0), zo, t)
    return finish_quant(acc, bias, qm, sh, DTYPE[t], zo, lo, hi)


def _bias(ctx: ExecutionContext, channels: int) -> np.ndarray:
    """The bias, one value per output channel (its dims may be left to the request)."""
    bias = ctx.tensor(BIAS)
    if bias.shape != (channels,):
        ctx.fail(f"bias has shape {list(bias.shape)}, expected [{channels}]")
    return bias


def _conv_core(
    ctx: ExecutionContext, x: np.ndarray, w: np.ndarray, bias: np.ndarray, g: Geometry, state: Any, filter_op: Any
) -> np.ndarray:
    """NHWC convolution of ``x`` with filter ``w`` [O, KH, KW, C]; returns the output before layout."""
    o, kh, kw, c = w.shape
    n = x.shape[0]
    if x.shape[3] != c:
        ctx.fail(f"input depth {x.shape[3]} != filter depth {c}")
    # The result (the patches are reserved by window_taps): input positions times filters.
    oh, ow = out_hw(g, (x.shape[1], x.shape[2]), (kh, kw))
    reserve_shape((n, max(oh, 0), max(ow, 0), o), 8, copies=2)
    if ctx.in_type(INPUT) in FLOAT_TYPES:
        matrix = state if isinstance(state, np.ndarray) else _gemm_filter(w, filter_op)
        cols, oh, ow = im2col(to_compute(x), g, kh, kw)
        out = cols @ matrix
        out += to_compute(bias)
        return apply_activation(out.reshape(n, oh, ow, o), g.activation)
    if not isinstance(state, QuantState):
        state = _quant_state(ctx.in_operands[INPUT], filter_op, ctx.out_operands[0], w, _gemm_filter(w, filter_op).T)
    xi = x.astype(state.weights.dtype) - ctx.zero_point(INPUT)
    cols, oh, ow = im2col(xi, g, kh, kw)
    acc = cols @ state.weights.T
    return _finish_quant(ctx, acc, bias, state.multipliers, state.shifts, g.activation).reshape(n, oh, ow, o)


def execute_conv(ctx: ExecutionContext) -> None:
    n = len(ctx.inputs)
    explicit = n >= 10 and ctx.in_type(7) == T.INT32
    g0 = ctx.scalar(10 if explicit else 7) if n >= (11 if explicit else 8) else False
    x = to_nhwc(ctx.tensor(INPUT), bool(g0))
    w = ctx.tensor(FILTER)
    g = _geometry(ctx, explicit, 3, (w.shape[1], w.shape[2]), (x.shape[1], x.shape[2]), False)
    out = _conv_core(ctx, x, w, _bias(ctx, w.shape[0]), g, ctx.state, ctx.in_operands[FILTER])
    ctx.set_output(0, from_nhwc(out, g.nchw))


def execute_depthwise(ctx: ExecutionContext) -> None:
    n = len(ctx.inputs)
    explicit = n >= 11 and ctx.in_type(8) == T.INT32
    layout_at = 11 if explicit else 8
    nchw = bool(ctx.scalar(layout_at)) if n > layout_at else False
    x = to_nhwc(ctx.tensor(INPUT), nchw)
    w = ctx.tensor(FILTER)
    _, kh, kw, oc = w.shape
    g = _geometry(ctx, explicit, 3, (kh, kw), (x.shape[1], x.shape[2]), True)
    nb, h, wd, c = x.shape
    if g.extra < 1 or c * g.extra != oc:
        ctx.fail(f"input depth {c} x multiplier {g.extra} != filter depth {oc}")
    oh, ow = out_hw(g, (h, wd), (kh, kw))
    if oh <= 0 or ow <= 0:
        ctx.fail(f"output would be {oh}x{ow}")
    reserve_shape((nb, oh, ow, oc), 8, copies=2)
    quant = ctx.in_type(INPUT) in QUANT8_TYPES
    if quant:
        filter_op = ctx.in_operands[FILTER]
        wz = filter_op.zero_point if filter_op.type != T.TENSOR_QUANT8_SYMM_PER_CHANNEL else 0
        xs = x.astype(np.int32) - np.int32(ctx.zero_point(INPUT))
        wt = w.reshape(kh, kw, oc).astype(np.int32) - np.int32(wz)
    else:
        xs = to_compute(x)
        wt = to_compute(w).reshape(kh, kw, oc)
    if g.extra > 1:
        xs = np.repeat(xs, g.extra, axis=3)
    acc = depthwise_sum(pad(xs, g), wt, g, oh, ow, quant or oh * ow >= ROW_TAPS_MIN)
    bias = _bias(ctx, oc)
    if quant:
        state = ctx.state
        if not isinstance(state, QuantState):
            qm, sh = channel_multipliers(
                ctx.scale(INPUT), _filter_scales(ctx.in_operands[FILTER], oc), ctx.out_scale(0)
            )
            state = QuantState(wt.astype(np.float64), qm, sh)
        out = _finish_quant(ctx, acc, bias, state.multipliers, state.shifts, g.activation)
    else:
        acc += to_compute(bias)
        out = apply_activation(acc, g.activation)
    ctx.set_output(0, from_nhwc(out, g.nchw))


def prepare_depthwise(v: ValidationContext) -> Any:
    w = v.constant(FILTER)
    if w is None or v.inputs[INPUT].type not in QUANT8_TYPES:
        return None
    oc = w.shape[-1]
    qm, sh = channel_multipliers(v.inputs[INPUT].scale, _filter_scales(v.inputs[FILTER], oc), v.outputs[0].scale)
    return QuantState(np.empty(0), qm, sh)


def execute_grouped(ctx: ExecutionContext) -> None:
    explicit = len(ctx.inputs) == 12
    nchw = bool(ctx.scalar(11 if explicit else 8))
    x = to_nhwc(ctx.tensor(INPUT), nchw)
    w = ctx.tensor(FILTER)
    g = _geometry(ctx, explicit, 3, (w.shape[1], w.shape[2]), (x.shape[1], x.shape[2]), True)
    groups = g.extra
    o, c = w.shape[0], x.shape[3]
    if groups < 1 or c % groups or o % groups or w.shape[3] * groups != c:
        ctx.fail(f"{groups} groups do not divide input depth {c} / output depth {o}")
    cg, og = c // groups, o // groups
    bias = _bias(ctx, o)
    filter_op = ctx.in_operands[FILTER]
    outs = []
    for k in range(groups):
        sub_filter = filter_op
        if filter_op.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and filter_op.channel_quant is not None:
            cq = filter_op.channel_quant
            sub_filter = replace(filter_op, channel_quant=replace(cq, scales=cq.scales[k * og : (k + 1) * og]))
        outs.append(
            _conv_core(
                ctx,
                np.ascontiguousarray(x[..., k * cg : (k + 1) * cg]),
                w[k * og : (k + 1) * og],
                bias[k * og : (k + 1) * og],
                g,
                None,
                sub_filter,
            )
        )
    ctx.set_output(0, from_nhwc(np.concatenate(outs, axis=3), g.nchw))


def execute_transpose(ctx: ExecutionContext) -> None:
    implicit = len(ctx.inputs) == 9
    nchw = bool(ctx.scalar(8 if implicit else 10))
    x = to_nhwc(ctx.tensor(INPUT), nchw)
    w = ctx.tensor(FILTER)
    o, kh, kw, c = w.shape
    nb, h, wd, cin = x.shape
    if cin != c:
        ctx.fail(f"input depth {cin} != filter depth {c}")
    if implicit:
        shape = ctx.tensor(3).reshape(-1)
        ctx.require(shape.size == 4, "output shape must have 4 elements")
        out_h, out_w = (int(shape[2]), int(shape[3])) if nchw else (int(shape[1]), int(shape[2]))
        code, sw, sh, act = (ctx.scalar(i) for i in range(4, 8))
        pt, pb = transpose_padding(out_h, sh, kh, code)
        pl, pr = transpose_padding(out_w, sw, kw, code)
    else:
        pl, pr, pt, pb, sw, sh, act = (ctx.scalar(i) for i in range(3, 10))
    ctx.require(
        min(sw, sh) >= 1 and pl >= 0 and pt >= 0 and check_activation(act), "invalid stride, padding or activation"
    )
    oh = h * sh + kh - sh - pt - pb
    ow = wd * sw + kw - sw - pl - pr
    if oh <= 0 or ow <= 0:
        ctx.fail(f"output would be {oh}x{ow}")
    # The full (unpadded) scatter target and the result, in 8-byte elements.
    reserve_shape((nb, oh + pt + pb, ow + pl + pr, o), 8, copies=2)
    quant = ctx.in_type(INPUT) in QUANT8_TYPES
    filter_op = ctx.in_operands[FILTER]
    if quant:
        wz = filter_op.zero_point if filter_op.type != T.TENSOR_QUANT8_SYMM_PER_CHANNEL else 0
        xs = x.astype(np.float64) - ctx.zero_point(INPUT)
        wm = w.astype(np.float64) - wz
    else:
        xs = to_compute(x)
        wm = to_compute(w)
    full_h = (h - 1) * sh + kh
    full_w = (wd - 1) * sw + kw
    full = np.zeros((nb, full_h + max(0, -pb), full_w + max(0, -pr), o), xs.dtype)
    flat = xs.reshape(-1, c)
    for i in range(kh):
        for j in range(kw):
            contrib = (flat @ wm[:, i, j, :].T).reshape(nb, h, wd, o)
            full[:, i : i + (h - 1) * sh + 1 : sh, j : j + (wd - 1) * sw + 1 : sw, :] += contrib
    out = full[:, pt : pt + oh, pl : pl + ow, :]
    bias = _bias(ctx, o)
    if quant:
        qm, shf = channel_multipliers(ctx.scale(INPUT), _filter_scales(filter_op, o), ctx.out_scale(0))
        result = _finish_quant(ctx, np.ascontiguousarray(out), bias, qm, shf, act)
    else:
        result = apply_activation(out + to_compute(bias), act)
    ctx.set_output(0, from_nhwc(np.ascontiguousarray(result), nchw))


register(Op.CONV_2D, validate=validate_conv, execute=execute_conv, prepare=prepare_conv, bind=bind_conv)
register(
    Op.DEPTHWISE_CONV_2D,
    validate=validate_depthwise,
    execute=execute_depthwise,
    prepare=prepare_depthwise,
    bind=bind_depthwise,
)
register(Op.GROUPED_CONV_2D, validate=validate_grouped, execute=execute_grouped)
register(Op.TRANSPOSE_CONV_2D, validate=validate_transpose, execute=execute_transpose)

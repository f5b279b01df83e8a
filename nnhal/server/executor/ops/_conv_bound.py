"""Bound convolution kernels: CONV_2D and DEPTHWISE_CONV_2D with a constant filter, bias
and parameters and static NHWC shapes, planned once at prepare (``bind_conv``,
``bind_depthwise``); the general kernels and validation are in ``conv``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from nnhal.core.operand_types import DTYPE
from nnhal.server.executor.allocation import reserve
from nnhal.server.executor.context import ValidationContext
from nnhal.server.executor.ops._activations import (
    activation_range_quant,
    clamp_in_place,
)
from nnhal.server.executor.ops._conv_core import (
    REQUANT_CHUNK,
    ROW_TAPS_MIN,
    Geometry,
    QuantState,
    depthwise_sum,
    finish_quant,
    float_requant,
    out_hw,
    read_geometry,
    table_requant,
)
from nnhal.server.executor.ops._padding import Padder, window_patches
from nnhal.server.executor.ops.common import (
    QUANT8_TYPES,
    T,
    static_shapes,
)
from nnhal.server.executor.registry import FastKernel

INPUT, FILTER, BIAS = 0, 1, 2


# -- bound kernels: constant filter, bias and parameters, static NHWC shapes ----------
#: The float64 passes of one requantization chunk (see _conv_core).
_REQUANT_SCRATCH = 2 * 8 * REQUANT_CHUNK


class _NotBound(Exception):
    """A parameter the general kernel would refuse: no bound kernel (that one reports it)."""


def _refuse(message: str) -> NoReturn:
    raise _NotBound(message)


@dataclass(frozen=True)
class _Static:
    """What prepare proved about one convolution: its geometry and shapes."""

    g: Geometry
    x_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    kh: int
    kw: int
    bias: np.ndarray
    out_dtype: np.dtype[Any]
    #: The fused activation: a float clamp, or the quantized bounds.
    clamp: Callable[[np.ndarray], None] | None
    lo: int
    hi: int


def _static(v: ValidationContext, explicit: bool, depthwise: bool) -> _Static | None:
    t, x_shape, out_shape = v.input_type(INPUT), v.input_dims(INPUT), v.outputs[0].dimensions
    w, bias = v.constant(FILTER), v.constant(BIAS)
    if t not in (T.TENSOR_FLOAT32, *QUANT8_TYPES) or w is None or bias is None:
        return None
    if len(x_shape) != 4 or not static_shapes(x_shape, out_shape) or w.ndim != 4:
        return None
    if not all(v.is_omitted(i) or v.is_constant(i) for i in range(3, v.num_inputs)):
        return None
    o, kh, kw, c = w.shape
    try:
        g = read_geometry(
            v.constant_scalar,
            lambda i: not v.is_omitted(i),
            v.num_inputs,
            _refuse,
            explicit,
            3,
            (kh, kw),
            (x_shape[1], x_shape[2]),
            depthwise,
        )
    except (_NotBound, TypeError):  # TypeError: an omitted parameter the kernel requires
        return None
    if depthwise:
        oc, ok = c, g.extra >= 1 and x_shape[3] * g.extra == c
    else:
        oc, ok = o, x_shape[3] == c
    if not ok or g.nchw or bias.shape != (oc,):
        return None
    oh, ow = out_hw(g, (x_shape[1], x_shape[2]), (kh, kw))
    if (x_shape[0], oh, ow, oc) != out_shape:
        return None
    out = v.outputs[0]
    lo, hi = (0, 0) if t == T.TENSOR_FLOAT32 else activation_range_quant(g.activation, out.scale, out.zero_point, t)
    return _Static(g, x_shape, out_shape, kh, kw, bias, DTYPE[t], clamp_in_place(g.activation), lo, hi)


def _x_max(v: ValidationContext) -> int:
    """The largest magnitude of a quantized input less its zero point."""
    lo, hi = (0, 255) if v.inputs[INPUT].type == T.TENSOR_QUANT8_ASYMM else (-128, 127)
    zp = v.inputs[INPUT].zero_point
    return max(zp - lo, hi - zp)


def _bound_patches(st: _Static) -> Callable[[np.ndarray], np.ndarray]:
    """``im2col`` for the input shape and geometry of ``st`` (the padding worked out once)."""
    g, (n, h, w, c), kh, kw = st.g, st.x_shape, st.kh, st.kw
    _, oh, ow, _ = st.out_shape
    padder = Padder(st.x_shape, g.pad_top, g.pad_bottom, g.pad_left, g.pad_right)
    if kh == kw == 1 and g.stride_h == g.stride_w == 1 and not padder.elements:
        return lambda x: x.reshape(n * h * w, c)
    kernel, out, stride, dilation = (kh, kw), (oh, ow), (g.stride_h, g.stride_w), (g.dilation_h, g.dilation_w)

    def patches(x: np.ndarray) -> np.ndarray:
        return window_patches(padder(x), kernel, out, stride, dilation).reshape(n * oh * ow, kh * kw * c)

    return patches


def bind_conv(v: ValidationContext, state: Any) -> FastKernel | None:
    """NHWC CONV_2D with constant filter, bias and parameters and static shapes: im2col, one
    GEMM with the prepared filter, the bias and the activation in place."""
    n = v.num_inputs
    st = _static(v, n >= 10 and v.input_type(7) == T.INT32, False)
    if st is None:
        return None
    x_shape, out_shape = st.x_shape, st.out_shape
    oc = out_shape[3]
    patches = _bound_patches(st)
    if isinstance(state, np.ndarray):
        matrix, clamp = state, st.clamp
        # The bias along whole output rows: numpy's inner loop runs over OW*OC elements, not OC.
        row_bias, row = np.tile(st.bias, out_shape[2]), out_shape[2] * oc

        def run_float(
            inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]
        ) -> list[np.ndarray] | None:
            x = inputs[INPUT]
            if x is None or x.shape != x_shape:
                return None
            buffer = buffers[0]
            out: np.ndarray = np.matmul(patches(x), matrix, out=None if buffer is None else buffer.reshape(-1, oc))
            rows = out.reshape(-1, row)
            np.add(rows, row_bias, out=rows)
            if clamp is not None:
                clamp(out)
            return [out.reshape(out_shape)]

        return run_float
    if not isinstance(state, QuantState):
        return None
    q, zp = state, v.inputs[INPUT].zero_point
    out_zp = v.outputs[0].zero_point
    bound = _x_max(v) * np.abs(q.weights).sum(axis=1)
    requant = table_requant(
        bound, st.bias, q.multipliers, q.shifts, st.out_dtype, out_zp, st.lo, st.hi
    ) or float_requant(bound, st.bias, q.multipliers, q.shifts, out_zp, st.lo, st.hi)
    # The input in the GEMM's dtype and the accumulator (padding and patches reserve themselves).
    scratch = (math.prod(x_shape) + math.prod(out_shape)) * q.weights.itemsize + _REQUANT_SCRATCH

    gemm_dtype = q.weights.dtype
    zp_w = gemm_dtype.type(zp)

    def run_quant(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        x = inputs[INPUT]
        if x is None or x.shape != x_shape:
            return None
        reserve(scratch)
        # The zero point removed while converting: one pass (every value exact in the GEMM's dtype).
        acc = patches(np.subtract(x, zp_w, dtype=gemm_dtype)) @ q.weights.T
        if requant is not None:
            out = requant(acc, st.out_dtype, buffers[0])
        else:
            out = finish_quant(acc, st.bias, q.multipliers, q.shifts, st.out_dtype, out_zp, st.lo, st.hi, buffers[0])
        return [out.reshape(out_shape)]

    return run_quant


def bind_depthwise(v: ValidationContext, state: Any) -> FastKernel | None:
    """NHWC DEPTHWISE_CONV_2D with constant filter, bias and parameters and static shapes: the
    tap passes with the weights prepared once, the bias and the activation in place."""
    n = v.num_inputs
    st = _static(v, n >= 11 and v.input_type(8) == T.INT32, True)
    w = v.constant(FILTER)
    if st is None or w is None:
        return None
    g, x_shape, out_shape = st.g, st.x_shape, st.out_shape
    _, oh, ow, oc = out_shape
    rows = oh * ow >= ROW_TAPS_MIN
    repeat = g.extra
    padder = Padder((*x_shape[:3], oc), g.pad_top, g.pad_bottom, g.pad_left, g.pad_right)
    if st.out_dtype == np.float32:
        wt, clamp = w.reshape(st.kh, st.kw, oc), st.clamp
        # The bias along whole output rows: numpy's inner loop runs over OW*OC elements, not OC.
        row_bias = np.tile(st.bias, ow)
        tiled = np.tile(wt, (1, 1, ow)) if rows or g.stride_w == 1 else None
        # The repeated input and a tap's products (padding and column phases reserve themselves).
        scratch_f = (math.prod(x_shape) * repeat if repeat > 1 else 0) * 4 + math.prod(out_shape) * 4

        def run_float(
            inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]
        ) -> list[np.ndarray] | None:
            x = inputs[INPUT]
            if x is None or x.shape != x_shape:
                return None
            reserve(scratch_f)
            if repeat > 1:
                x = np.repeat(x, repeat, axis=3)
            acc = depthwise_sum(padder(x), wt, g, oh, ow, rows, tiled, buffers[0])
            sums = acc.reshape(-1, ow * oc)
            np.add(sums, row_bias, out=sums)
            if clamp is not None:
                clamp(acc)
            return [acc]

        return run_float
    if not isinstance(state, QuantState):
        return None
    filter_op = v.inputs[FILTER]
    wz = filter_op.zero_point if filter_op.type != T.TENSOR_QUANT8_SYMM_PER_CHANNEL else 0
    wq = w.reshape(st.kh, st.kw, oc).astype(np.int32) - np.int32(wz)
    out_zp, q = v.outputs[0].zero_point, state
    bound = _x_max(v) * np.abs(wq).sum(axis=(0, 1)).astype(np.float64)
    requant = table_requant(
        bound, st.bias, q.multipliers, q.shifts, st.out_dtype, out_zp, st.lo, st.hi
    ) or float_requant(bound, st.bias, q.multipliers, q.shifts, out_zp, st.lo, st.hi)
    # Integer sums below 2^24 are exact in float32 in any order: then the taps take the float
    # kernel's faster passes (one einsum at stride 1).
    in_float = requant is not None and float(bound.max(initial=0)) < 2.0**24
    sum_dtype = np.float32 if in_float else np.int32
    wq = wq.astype(sum_dtype)
    zp_sum = sum_dtype(v.inputs[INPUT].zero_point)
    tiled_q = np.tile(wq, (1, 1, ow))
    rows_q = rows if in_float else True
    # The input in the sums' dtype (repeated), the sums and a tap's products (padding and column
    # phases reserve themselves).
    scratch = (math.prod(x_shape) * repeat + 2 * math.prod(out_shape)) * 4 + _REQUANT_SCRATCH

    def run_quant(inputs: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        x = inputs[INPUT]
        if x is None or x.shape != x_shape:
            return None
        reserve(scratch)
        xs = np.subtract(x, zp_sum, dtype=sum_dtype)
        if repeat > 1:
            xs = np.repeat(xs, repeat, axis=3)
        acc = depthwise_sum(padder(xs), wq, g, oh, ow, rows_q, tiled_q)
        if requant is not None:
            return [requant(acc, st.out_dtype, buffers[0])]
        return [finish_quant(acc, st.bias, q.multipliers, q.shifts, st.out_dtype, out_zp, st.lo, st.hi, buffers[0])]

    return run_quant

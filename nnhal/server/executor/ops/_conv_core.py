"""What the convolutions' general kernels and their bound kernels share: the geometry read from
the scalar parameters, im2col, the depthwise tap passes and the quantized output stage.

Nothing here sees an execution context: parameters come through a getter, failures through a
callback, so that the same code runs per execution (failing with the operation's status) and
once at prepare (where a failure only means "no bound kernel").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.errors import OP_FAILED, fail
from nnhal.server.executor.ops._activations import check_activation
from nnhal.server.executor.ops._fixed_point import requantize
from nnhal.server.executor.ops._padding import (
    PADDING_CODES,
    implicit_padding,
    out_size,
    pad_spatial,
    strided_view,
    window_patches,
)


@dataclass(frozen=True)
class Geometry:
    pad_top: int
    pad_bottom: int
    pad_left: int
    pad_right: int
    stride_h: int
    stride_w: int
    dilation_h: int
    dilation_w: int
    activation: int
    nchw: bool
    extra: int = 0  # depth multiplier or number of groups


def read_geometry(
    scalar: Callable[[int], Any],
    present: Callable[[int], bool],
    n: int,
    failure: Callable[[str], NoReturn],
    explicit: bool,
    first: int,
    kernel_hw: tuple[int, int],
    in_hw_nhwc: tuple[int, int],
    has_extra: bool,
) -> Geometry:
    """Read the scalar parameters starting at input ``first`` (after input, filter, bias) of an
    operation with ``n`` inputs; ``present(i)``: input ``i`` has a value. Invalid values call
    ``failure`` with the reason."""
    i = first
    if explicit:
        pl, pr, pt, pb = (scalar(i + k) for k in range(4))
        i += 4
        code = 0
    else:
        code = scalar(i)
        i += 1
    sw, sh = scalar(i), scalar(i + 1)
    i += 2
    extra = 0
    if has_extra:
        extra = scalar(i)
        i += 1
    act = scalar(i)
    i += 1
    nchw = bool(scalar(i)) if i < n and present(i) else False
    i += 1
    dw, dh = (scalar(i), scalar(i + 1)) if i + 1 < n else (1, 1)
    if not min(sw, sh, dw, dh) >= 1:
        failure("strides and dilations must be >= 1")
    if not check_activation(act):
        failure(f"invalid fused activation {act}")
    if not explicit:
        if code not in PADDING_CODES:
            failure(f"implicit padding code must be 1 (SAME) or 2 (VALID), got {code}")
        pt, pb = implicit_padding(in_hw_nhwc[0], sh, dh, kernel_hw[0], code)
        pl, pr = implicit_padding(in_hw_nhwc[1], sw, dw, kernel_hw[1], code)
    if not min(pl, pr, pt, pb) >= 0:
        failure("padding must be >= 0")
    return Geometry(pt, pb, pl, pr, sh, sw, dh, dw, act, nchw, extra)


def pad(x: np.ndarray, g: Geometry) -> np.ndarray:
    return pad_spatial(x, g.pad_top, g.pad_bottom, g.pad_left, g.pad_right)


def out_hw(g: Geometry, in_hw: tuple[int, int], kernel_hw: tuple[int, int]) -> tuple[int, int]:
    """Output height and width (either may be <= 0: no output)."""
    return (
        out_size(in_hw[0], kernel_hw[0], g.stride_h, g.dilation_h, g.pad_top, g.pad_bottom),
        out_size(in_hw[1], kernel_hw[1], g.stride_w, g.dilation_w, g.pad_left, g.pad_right),
    )


def im2col(x: np.ndarray, g: Geometry, kh: int, kw: int) -> tuple[np.ndarray, int, int]:
    """[N*OH*OW, KH*KW*C] patches of NHWC ``x`` (already offset so that padding is 0)."""
    n, h, w, c = x.shape
    oh, ow = out_hw(g, (h, w), (kh, kw))
    if oh <= 0 or ow <= 0:
        fail(f"convolution output would be {oh}x{ow}", OP_FAILED)
    if kh == kw == 1 and g.stride_h == g.stride_w == 1 and not (g.pad_top or g.pad_bottom or g.pad_left or g.pad_right):
        return x.reshape(n * h * w, c), oh, ow
    xp = pad(x, g)
    patches = window_patches(xp, (kh, kw), (oh, ow), (g.stride_h, g.stride_w), (g.dilation_h, g.dilation_w))
    return patches.reshape(n * oh * ow, kh * kw * c), oh, ow


@dataclass
class QuantState:
    #: Zero point removed, GEMM layout; float32 when every sum stays exact in it, else float64.
    weights: np.ndarray
    multipliers: np.ndarray
    shifts: np.ndarray


#: Elements requantized per chunk: the int64 passes stay in cache.
REQUANT_CHUNK = 1 << 16


def finish_quant(
    acc: np.ndarray,
    bias: np.ndarray,
    qm: np.ndarray,
    sh: np.ndarray,
    out_dtype: np.dtype[Any],
    zo: int,
    lo: int,
    hi: int,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Accumulator (exact integers, float64 or int) + bias -> requantized to the output zero
    point ``zo``, clamped to [lo, hi] (the fused activation's range), in ``out_dtype``: written
    into ``out`` when given (a contiguous array of ``acc``'s shape and ``out_dtype``)."""
    channels = acc.shape[-1]
    flat = acc.reshape(-1, channels)
    out = np.empty(flat.shape, out_dtype) if out is None else out.reshape(flat.shape)
    floats = flat.dtype == np.float64
    if floats:
        # float64 sums of integer products below 2^53 are exact integers: the bias
        # joins them exactly, and the conversion below needs no rounding.
        flat += bias.astype(np.float64)
    else:
        b64 = bias.astype(np.int64)
    rows = max(1, REQUANT_CHUNK // max(channels, 1))
    for start in range(0, flat.shape[0], rows):
        a = flat[start : start + rows].astype(np.int64)
        if not floats:
            a += b64
        r = requantize(a, qm, sh, inplace=True, zero_point=zo)
        np.clip(r, lo, hi, out=out[start : start + rows], casting="unsafe")
    return out.reshape(acc.shape)


#: Every integer of magnitude below this is exact in float64.
_EXACT = 2.0**53


@dataclass(frozen=True)
class FloatRequant:
    """``finish_quant`` in float64 for accumulators whose bound keeps every step exact.

    The reference requantizes ``h = acc + bias`` with multiplier ``m`` and shift ``left`` /
    ``right`` as: the high multiply ``p = floor((h * m * 2^left + 2^30) / 2^31)``, then
    ``floor((p - [p < 0] + 2^(right-1)) / 2^right)`` (rounding half away from zero; ``p``
    alone when right is 0), plus the zero point. Here ``p = floor(h * s + 1/2)`` with
    ``s = m * 2^left / 2^31`` and ``-[p < 0] = clip(p, -1, 0)`` (``p`` is an integer); every
    value is a dyadic rational whose numerator ``float_requant`` bounds below 2^53, so float64
    computes each step exactly and the result is bit-identical, in passes without int64 casts.
    """

    bias: np.ndarray
    scale: np.ndarray
    #: 2^-right, and 1/2 + zero point (1/2 dropped when right is 0), per channel or one.
    down: np.ndarray
    add: np.ndarray
    #: Every channel shifts right (the half-away correction applies); else none does.
    rounds: bool
    lo: int
    hi: int
    #: bias, scale, down and add repeated ``tile`` times along a row (per-channel values then
    #: broadcast over rows of tile * channels elements: numpy's inner loops run over those).
    tile: int = 1
    wide: tuple[np.ndarray, ...] = ()

    def __call__(self, acc: np.ndarray, out_dtype: np.dtype[Any], out: np.ndarray | None = None) -> np.ndarray:
        """Requantize ``acc`` (exact integers, any numeric dtype, channels last) into ``out``
        (made when None) of ``out_dtype``, clamped to [lo, hi]."""
        channels = acc.shape[-1]
        flat = acc.reshape(-1, channels)
        total = flat.shape[0]
        dest = np.empty(flat.shape, out_dtype) if out is None else out.reshape(flat.shape)
        tile = self.tile
        rows = max(tile, REQUANT_CHUNK // max(channels, 1) // tile * tile)
        f = np.empty(min(rows, total) * channels, np.float64)
        t = np.empty_like(f) if self.rounds else f
        for start in range(0, total, rows):
            a = flat[start : start + rows]
            n = a.shape[0]
            d = dest[start : start + rows]
            if self.wide and n % tile == 0:
                shape = (n // tile, tile * channels)
                bias, scale, down, add = self.wide
                a, d = a.reshape(shape), d.reshape(shape)
            else:
                shape = (n, channels)
                bias, scale, down, add = self.bias, self.scale, self.down, self.add
            g = f[: n * channels].reshape(shape)
            # The conversion alone, then the bias in float64 (a mixed-type add is buffered).
            np.copyto(g, a, casting="unsafe")
            g += bias
            g *= scale
            g += 0.5
            np.floor(g, out=g)
            if self.rounds:
                c = t[: n * channels].reshape(shape)
                np.clip(g, -1.0, 0.0, out=c)
                g += c
            g *= down
            g += add
            np.floor(g, out=g)
            np.clip(g, self.lo, self.hi, out=d, casting="unsafe")
        return dest.reshape(acc.shape)


def float_requant(
    bound: np.ndarray, bias: np.ndarray, qm: np.ndarray, sh: np.ndarray, zo: int, lo: int, hi: int
) -> FloatRequant | None:
    """The float64 requantization for accumulators with |acc| <= ``bound`` (per channel) and
    integer ``bias``, multipliers ``qm`` and shifts ``sh`` (per channel or one, as
    channel_multipliers makes them), or None when some step could leave float64's exact
    integers or the channels mix shifts right and none."""
    qm = np.asarray(qm, np.int64).reshape(-1)
    sh = np.asarray(sh, np.int64).reshape(-1)
    channels = bound.shape[0]
    if qm.shape[0] == 1:
        qm, sh = np.repeat(qm, channels), np.repeat(sh, channels)
    if qm.shape[0] != channels or bias.shape != (channels,) or channels == 0 or (qm < 0).any():
        return None
    left, right = np.maximum(sh, 0), np.maximum(-sh, 0)
    rounds = bool((right > 0).all())
    if not rounds and (right > 0).any():
        return None
    if right.max() > 62 or left.max() > 31:
        return None
    # Exact Python integers: the bound itself must not round.
    h_max = [int(b) + abs(int(c)) for b, c in zip(np.ceil(bound), bias)]
    if any((h * int(m) << int(lft)) + (1 << 30) >= _EXACT for h, m, lft in zip(h_max, qm, left)):
        return None
    scale = qm.astype(np.float64) * np.ldexp(1.0, left - 31)
    down = np.ldexp(1.0, -right)
    add = np.full(channels, zo + (0.5 if rounds else 0.0))
    if (qm == qm[0]).all() and (sh == sh[0]).all():
        # One multiplier for the tensor: the passes broadcast a single value.
        scale, down, add = scale[:1], down[:1], add[:1]
    bias64 = bias.astype(np.float64)
    tile = max(1, _ROW // channels)
    wide = tuple(v if v.shape[0] == 1 else np.tile(v, tile) for v in (bias64, scale, down, add))
    return FloatRequant(bias64, scale, down, add, rounds, lo, hi, tile, wide)


#: The largest requantization table (entries, one byte each): it stays in the L2 cache.
TABLE_MAX = 1 << 18
#: Table requantization passes over rows of at least this many elements (per-channel offsets are
#: tiled along them, so numpy's inner loops run over more than one pixel's channels).
_ROW = 512


@dataclass(frozen=True)
class TableRequant:
    """``finish_quant`` for one multiplier and shift shared by every channel, as a table.

    The reference's requantization of ``h = acc + bias`` is a non-decreasing function of the
    integer ``h`` alone, equal to ``lo`` below some ``h`` and to ``hi`` above another: ``table``
    holds its values from ``base`` on, computed once by the reference arithmetic itself
    (``requantize``), with the saturated values at both ends. An execution clips ``acc + bias -
    base`` to the table and looks the values up: two passes and a gather, bit-identical by
    construction.
    """

    table: np.ndarray
    #: Per channel ``bias - base``, tiled ``tile`` times along a row, by accumulator dtype.
    offsets: dict[np.dtype[Any], np.ndarray]
    tile: int
    #: ``acc + offsets`` is exact in float32 for float32 accumulators (else float64).
    exact32: bool

    def __call__(self, acc: np.ndarray, out_dtype: np.dtype[Any], out: np.ndarray | None = None) -> np.ndarray:
        """Requantize ``acc`` (exact integers, any numeric dtype, channels last; overwritten
        when float32 or int32) into ``out`` (made when None) of ``out_dtype``."""
        channels = acc.shape[-1]
        flat = acc.reshape(-1, channels)
        total = flat.shape[0]
        dest = np.empty(flat.shape, out_dtype) if out is None else out.reshape(flat.shape)
        in_place = (flat.dtype == np.float32 and self.exact32) or flat.dtype == np.int32
        offsets = self.offsets[flat.dtype if in_place else np.dtype(np.float64)]
        tile = self.tile
        rows = max(tile, REQUANT_CHUNK // max(channels, 1) // tile * tile)
        index = np.empty(min(rows, total) * channels, np.int32)
        work = None if in_place else np.empty(min(rows, total) * channels, np.float64)
        last = self.table.shape[0] - 1
        for start in range(0, total, rows):
            a = flat[start : start + rows]
            n = a.shape[0]
            h = a if work is None else work[: n * channels].reshape(n, channels)
            if n % tile == 0 and a.flags.c_contiguous:
                wide = (n // tile, tile * channels)
                np.add(a.reshape(wide), offsets, out=h.reshape(wide))
            else:
                np.add(a, offsets[:channels], out=h)
            i = index[: n * channels].reshape(n, channels)
            np.clip(h, 0, last, out=i, casting="unsafe")
            # The indexes are in range: "clip" mode takes numpy's unbuffered path.
            np.take(self.table, i, out=dest[start : start + rows], mode="clip")
        return dest.reshape(acc.shape)


def table_requant(
    bound: np.ndarray,
    bias: np.ndarray,
    qm: np.ndarray,
    sh: np.ndarray,
    out_dtype: np.dtype[Any],
    zo: int,
    lo: int,
    hi: int,
) -> TableRequant | None:
    """The table requantization for accumulators with |acc| <= ``bound`` (per channel) and
    integer ``bias``, with one multiplier ``qm`` and shift ``sh`` for every channel, or None
    when they differ, the multiplier is 0, or the table would exceed :data:`TABLE_MAX`."""
    qm = np.asarray(qm, np.int64).reshape(-1)
    sh = np.asarray(sh, np.int64).reshape(-1)
    channels = bound.shape[0]
    if channels == 0 or bias.shape != (channels,) or not (qm == qm[0]).all() or not (sh == sh[0]).all():
        return None
    m, shift = int(qm[0]), int(sh[0])
    if m <= 0:
        return None
    scale = m * 2.0 ** (shift - 31)
    # Beyond these the output saturates (checked below on the reference's own values).
    first = math.floor((lo - zo - 2) / scale) - 1
    last = math.ceil((hi - zo + 2) / scale) + 1
    if last - first + 1 > TABLE_MAX:
        return None
    table = requantize(np.arange(first, last + 1, dtype=np.int64), np.int64(m), np.int64(shift), zero_point=zo)
    table = np.clip(table, lo, hi)
    if table[0] != lo or table[-1] != hi or (np.diff(table) < 0).any():
        return None
    h_max = float(np.ceil(bound).max(initial=0)) + float(np.abs(bias.astype(np.float64)).max(initial=0))
    offsets = bias.astype(np.int64) - first
    exact32 = h_max + float(np.abs(offsets).max(initial=0)) < 2.0**24
    if h_max + float(np.abs(offsets).max(initial=0)) >= 2.0**31 - 1:
        return None  # int32 accumulators would wrap
    tile = max(1, _ROW // channels)
    tiled = np.tile(offsets, tile)
    by_dtype = {np.dtype(t): tiled.astype(t) for t in (np.float32, np.int32, np.float64)}
    return TableRequant(table.astype(out_dtype), by_dtype, tile, exact32)


#: Strided float depthwise outputs of at least this many positions (OH*OW) take the einsums over
#: whole rows of column phases; below it one einsum over the windows is faster (the phases cost a
#: copy of the input). Quantized ones with int32 sums always take the rows.
ROW_TAPS_MIN = 1 << 8


def depthwise_sum(
    xp: np.ndarray,
    wt: np.ndarray,
    g: Geometry,
    oh: int,
    ow: int,
    rows: bool,
    tiled: np.ndarray | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Depthwise sum over the taps of padded NHWC ``xp`` with weights ``wt`` [KH, KW, C], taps in
    row-major order. The weights are tiled along OW (``tiled`` when prepared, else made here) so
    that every tap is a run of OW*C contiguous elements:

    - horizontal stride 1: one einsum over a [KH, KW, N, OH, OW*C] view of ``xp`` (each element's
      products summed in one pass, no copy);
    - else with ``rows``: ``xp`` split into column phases (one copy), whose taps are runs of OW*C
      contiguous elements again: one such einsum per phase, summed;
    - else one einsum over the windows.

    The sum is written into ``out`` when given (a contiguous [N, OH, OW, C] array of the sum's
    dtype) and returned.
    """
    kh, kw, oc = wt.shape
    stride, dilation = (g.stride_h, g.stride_w), (g.dilation_h, g.dilation_w)
    if g.stride_w == 1:
        if tiled is None:
            tiled = np.tile(wt, (1, 1, ow))
        xp = np.ascontiguousarray(xp)
        s_n, s_h, s_w, s_c = xp.strides
        view = strided_view(
            xp, (kh, kw, xp.shape[0], oh, ow * oc), (g.dilation_h * s_h, g.dilation_w * s_w, s_n, g.stride_h * s_h, s_c)
        )
        dest = None if out is None else out.reshape(xp.shape[0], oh, ow * oc)
        return np.asarray(np.einsum("ijnhq,ijq->nhq", view, tiled, out=dest)).reshape(xp.shape[0], oh, ow, oc)
    if not rows:
        windows = window_patches(xp, (kh, kw), (oh, ow), stride, dilation)
        return np.asarray(np.einsum("nhwijc,ijc->nhwc", windows, wt, out=out))
    if tiled is None:
        tiled = np.tile(wt, (1, 1, ow))
    n, sw, dw = xp.shape[0], g.stride_w, g.dilation_w
    reserve_shape(xp.shape, xp.itemsize)
    dest = np.empty((n, oh, ow * oc), np.result_type(xp, tiled)) if out is None else out.reshape(n, oh, ow * oc)
    # Tap j reads padded columns j*dw + sw*k: column phase (j*dw) % sw, from its column (j*dw) // sw.
    # The taps of one phase are evenly spaced (every sw / gcd(dw, sw)-th), their columns too.
    step = sw // math.gcd(dw, sw)
    first = True
    for j0 in range(min(step, kw)):
        phase = np.ascontiguousarray(xp[:, :, (j0 * dw) % sw :: sw, :])
        s_n, s_h, s_w, s_c = phase.strides
        taps = len(range(j0, kw, step))
        view = strided_view(
            phase,
            (kh, taps, n, oh, ow * oc),
            (g.dilation_h * s_h, (step * dw // sw) * s_w, s_n, g.stride_h * s_h, s_c),
            (j0 * dw) // sw * s_w,
        )
        if first:
            np.einsum("ijnhq,ijq->nhq", view, tiled[:, j0::step], out=dest)
            first = False
        else:
            dest += np.einsum("ijnhq,ijq->nhq", view, tiled[:, j0::step])
    return dest.reshape(n, oh, ow, oc)

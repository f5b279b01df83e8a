"""Padding and sliding windows of the 2-D spatial operations (convolutions and pooling).

Implicit padding codes resolve to explicit pads as the reference's
``calculateExplicitPadding`` does (SAME puts the odd pixel at the end); a
window's taps are strided views of the padded NHWC input, one per filter
position, so kernels make a handful of whole-tensor passes and no per-pixel
loops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from nnhal.server.executor.allocation import reserve, reserve_shape

PADDING_SAME, PADDING_VALID = 1, 2
PADDING_CODES = (PADDING_SAME, PADDING_VALID)


def implicit_padding(size: int, stride: int, dilation: int, kernel: int, code: int) -> tuple[int, int]:
    """calculateExplicitPadding of the reference: (head, tail) pads of one axis."""
    if code != PADDING_SAME:
        return 0, 0
    effective = (kernel - 1) * dilation + 1
    out = (size + stride - 1) // stride
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


def transpose_padding(size: int, stride: int, kernel: int, code: int) -> tuple[int, int]:
    """calculateExplicitPaddingTransposeConv: the tail may be negative."""
    if code != PADDING_SAME:
        return 0, 0
    out = (size + stride - 1) // stride
    total = (out - 1) * stride + kernel - size
    head = max(total, 0) // 2 if total > 0 else 0
    return head, total - head


def out_size(size: int, kernel: int, stride: int, dilation: int, head: int, tail: int) -> int:
    """Output length of one axis for a window of ``kernel`` taps (may be <= 0: no output)."""
    effective = (kernel - 1) * dilation + 1
    return (size - effective + stride + head + tail) // stride


def pad_spatial(x: np.ndarray, top: int, bottom: int, left: int, right: int, value: object = 0) -> np.ndarray:
    """NHWC ``x`` padded along H and W with ``value`` (``x`` itself when no pad)."""
    if top or bottom or left or right:
        pads = ((0, 0), (top, bottom), (left, right), (0, 0))
        n, h, w, c = x.shape
        reserve_shape((n, h + top + bottom, w + left + right, c), x.itemsize)
        return constant_pad(x, pads, value)
    return x


def border_slices(shape: Sequence[int], pads: Sequence[tuple[int, int]]) -> list[tuple[slice, ...]]:
    """The slabs of a tensor of ``shape`` padded by ``pads`` that lie outside the tensor: along
    each padded axis the leading and trailing ones (corners fall in more than one). With the
    last axis padded, one slab: the whole tensor (filling short strided runs costs more than a
    pass over everything)."""
    if pads and any(pads[-1]):
        return [(slice(None),)]
    slabs: list[tuple[slice, ...]] = []
    for k, (d, (a, b)) in enumerate(zip(shape, pads)):
        lead = (slice(None),) * k
        if a:
            slabs.append((*lead, slice(0, a)))
        if b:
            slabs.append((*lead, slice(a + d, None)))
    return slabs


def inner_slice(shape: Sequence[int], pads: Sequence[tuple[int, int]]) -> tuple[slice, ...]:
    """Where a tensor of ``shape`` lies within itself padded by ``pads``."""
    return tuple(slice(a, a + d) for d, (a, _) in zip(shape, pads))


def constant_pad(x: np.ndarray, pads: Sequence[tuple[int, int]], value: object = 0) -> np.ndarray:
    """``x`` padded with ``value`` (``np.pad(mode="constant")``): the border filled, then one
    copy, which is several times faster than ``np.pad`` on the small tensors of real models."""
    shape = tuple(d + a + b for d, (a, b) in zip(x.shape, pads))
    out = np.empty(shape, dtype=x.dtype)
    for slab in border_slices(x.shape, pads):
        out[slab] = value
    out[inner_slice(x.shape, pads)] = x
    return out


def strided_view(x: np.ndarray, shape: Sequence[int], strides: Sequence[int], offset: int = 0) -> np.ndarray:
    """A read-only view of ``x``'s memory, ``offset`` bytes from its start, with ``shape`` and
    ``strides`` (bytes) — ``as_strided`` at a fifth of its cost. For a contiguous ``x`` numpy
    refuses a view that would reach past its memory; any other ``x`` takes ``as_strided`` (and
    ``offset`` must be 0)."""
    if x.flags.c_contiguous:
        view = np.ndarray(tuple(shape), x.dtype, x, offset, tuple(strides))
        view.flags.writeable = False
        return view
    if offset:
        raise ValueError("an offset view of a non-contiguous array")
    return np.lib.stride_tricks.as_strided(x, tuple(shape), tuple(strides), writeable=False)


class Padder:
    """``pad_spatial`` for NHWC tensors of one shape, worked out once (a bound kernel's): the
    padded shape, the border slabs and where the input goes."""

    __slots__ = ("elements", "inner", "shape", "slabs", "value")

    def __init__(self, shape: Sequence[int], top: int, bottom: int, left: int, right: int, value: object = 0) -> None:
        pads = ((0, 0), (top, bottom), (left, right), (0, 0))
        self.shape = tuple(d + a + b for d, (a, b) in zip(shape, pads))
        #: No padding: the input itself is returned.
        self.elements = math.prod(self.shape) if top or bottom or left or right else 0
        self.slabs = border_slices(shape, pads)
        self.inner = inner_slice(shape, pads)
        self.value = value

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """``x`` (of the shape given) padded: a new array, or ``x`` when there is no padding."""
        if not self.elements:
            return x
        reserve(self.elements * x.itemsize)
        out = np.empty(self.shape, x.dtype)
        for slab in self.slabs:
            out[slab] = self.value
        out[self.inner] = x
        return out


def window_patches(
    x: np.ndarray,
    kernel: tuple[int, int],
    out: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int] = (1, 1),
) -> np.ndarray:
    """A read-only view ``[N, OH, OW, KH, KW, C]`` of the padded NHWC input ``x``: every window
    without copying (one ``reshape`` then gathers the im2col matrix in a single pass)."""
    (kh, kw), (oh, ow), (sh, sw), (dh, dw) = kernel, out, stride, dilation
    reserve_shape((x.shape[0], oh, ow, x.shape[3], kh * kw), 8)
    s_n, s_h, s_w, s_c = x.strides
    return strided_view(x, (x.shape[0], oh, ow, kh, kw, x.shape[3]), (s_n, s_h * sh, s_w * sw, s_h * dh, s_w * dw, s_c))


def window_taps(
    x: np.ndarray,
    kernel: tuple[int, int],
    out: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int] = (1, 1),
) -> list[np.ndarray]:
    """Strided views of the padded NHWC input ``x``, one per filter tap (row-major over kernel H, W)."""
    (kh, kw), (oh, ow), (sh, sw), (dh, dw) = kernel, out, stride, dilation
    # The views are free; their users stack or reduce them into copies of this size
    # (im2col patches, pooled windows), computed in 8-byte elements.
    reserve_shape((x.shape[0], oh, ow, x.shape[3], kh * kw), 8)
    views = []
    for i in range(kh):
        r0 = i * dh
        for j in range(kw):
            c0 = j * dw
            views.append(x[:, r0 : r0 + (oh - 1) * sh + 1 : sh, c0 : c0 + (ow - 1) * sw + 1 : sw, :])
    return views


def row_taps(
    x: np.ndarray,
    kernel: tuple[int, int],
    out: tuple[int, int],
    stride: tuple[int, int],
    dilation: tuple[int, int] = (1, 1),
) -> list[np.ndarray]:
    """Per filter tap (row-major over kernel H, W), a view ``[N, OH, OW*C]`` of the padded NHWC
    input ``x`` whose rows are contiguous: a pass over it runs numpy's inner loop over OW*C
    elements, not C. A horizontal stride above one splits ``x`` into that many column phases
    (one copy of ``x``) so that every tap's columns are adjacent again."""
    (kh, kw), (oh, ow), (sh, sw), (dh, dw) = kernel, out, stride, dilation
    n, _, width, c = x.shape
    if sw == 1:
        phases = [np.ascontiguousarray(x)]
    else:
        reserve_shape(x.shape, x.itemsize)
        phases = [np.ascontiguousarray(x[:, :, p::sw, :]) for p in range(min(sw, width))]
    views = []
    for i in range(kh):
        r0 = i * dh
        for j in range(kw):
            c0 = j * dw
            phase, start = phases[c0 % sw], c0 // sw
            view = phase[:, r0 : r0 + (oh - 1) * sh + 1 : sh, start : start + ow, :]
            views.append(view.reshape(n, oh, ow * c))
    return views

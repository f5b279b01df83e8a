"""Layout and shape operations as ONNX: DEPTH_TO_SPACE, SPACE_TO_DEPTH, PAD, PAD_V2, SLICE,
STRIDED_SLICE, SQUEEZE, EXPAND_DIMS, MEAN, RESIZE_BILINEAR, RESIZE_NEAREST_NEIGHBOR,
SPACE_TO_BATCH_ND, L2_NORMALIZATION.

They move values without arithmetic (MEAN and RESIZE_BILINEAR aside), so quant8 runs
on the quantized values when input and output share their quantization, else through
float. NNAPI's block reshuffles are TensorFlow's, which is ONNX's ``DCR`` order in NCHW.
PAD fills quant8 tensors with the zero point (the real value 0), as the reference.
RESIZE_BILINEAR takes the corner conventions NNAPI 1.3 names (align_corners: ONNX
``align_corners``; half-pixel centers: ``half_pixel``; neither: ``asymmetric``);
RESIZE_NEAREST_NEIGHBOR is TFLite's (floor of ``out * in / out``; align_corners rounds half
away from zero, ONNX's ``round_prefer_ceil`` on these non-negative coordinates; half-pixel:
``tf_half_pixel_for_nn``). STRIDED_SLICE resolves its constant begin/end/strides and masks as
Python slices do (which is TFLite's rule) into one ``Slice`` and a reshape for the shrunk axes.
SPACE_TO_BATCH_ND pads (quant8 with the zero point) and reshuffles by reshape and transpose.
L2_NORMALIZATION divides by ``max(sqrt(sum(x^2)), 1e-6)`` along its axis, as the reference;
quant8 goes through float (output scale 1/128).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nnhal.core.enums import OperationType
from nnhal.server.ort.emit import FLOAT32, QUANT8, Converter, OpView, T, Unsupported

Op = OperationType
_ANY = (FLOAT32, *QUANT8, T.TENSOR_INT32)
_PAD_DTYPES = {
    FLOAT32: np.float32,
    T.TENSOR_QUANT8_ASYMM: np.uint8,
    T.TENSOR_QUANT8_ASYMM_SIGNED: np.int8,
    T.TENSOR_INT32: np.int32,
}


def _same_quant(v: OpView) -> bool:
    a, out = v.operand(0), v.out()
    return a.type not in QUANT8 or (a.scale, a.zero_point) == (out.scale, out.zero_point)


def _moved(v: OpView, op_type: str, *extra: str, **attrs: Any) -> None:
    """An operation that moves values: on the quantized values, or through float."""
    if _same_quant(v):
        v.produce(v.b.one(op_type, [v.value(0), *extra], **attrs))
        return
    y = v.b.one(op_type, [v.dequant(v.value(0), v.operand(0)), *extra], **attrs)
    v.produce(v.quant(y, v.out()))


def _blocks(op_type: str) -> Converter:
    def convert(v: OpView) -> None:
        v.require_static()
        v.require_types((FLOAT32, *QUANT8))
        block, nchw = int(v.scalar(1)), bool(v.scalar(2, False))
        if block < 1:
            raise Unsupported("block size must be >= 1")
        x = v.to_nchw(v.value(0), nchw)
        attrs: dict[str, Any] = {"blocksize": block}
        if op_type == "DepthToSpace":
            attrs["mode"] = "DCR"
        if _same_quant(v):
            y = v.b.one(op_type, [x], **attrs)
        else:
            y = v.quant(v.b.one(op_type, [v.dequant(x, v.operand(0))], **attrs), v.out())
        v.produce(v.from_nchw(y, nchw))

    return convert


def pad(v: OpView) -> None:
    v.require_static()
    t = v.require_types(_ANY)
    pads = v.const(1).astype(np.int64).reshape(-1, 2)
    if (pads < 0).any():
        raise Unsupported("negative padding")
    onnx_pads = v.b.const(np.concatenate([pads[:, 0], pads[:, 1]]))
    if not _same_quant(v):
        raise Unsupported("PAD with different input and output quantization")
    dt = _PAD_DTYPES[t]
    if v.operation.type == Op.PAD_V2:
        value = v.scalar(2)
    else:
        value = v.operand(0).zero_point if t in QUANT8 else 0
    v.produce(v.b.one("Pad", [v.value(0), onnx_pads, v.b.const(np.asarray(value).astype(dt))], mode="constant"))


def slice_(v: OpView) -> None:
    v.require_static()
    v.require_types(_ANY)
    dims = v.operand(0).dimensions
    begin = v.const(1).astype(np.int64).reshape(-1)
    size = v.const(2).astype(np.int64).reshape(-1)
    end = np.where(size < 0, np.asarray(dims, np.int64), begin + size)
    if (begin < 0).any() or (end > np.asarray(dims)).any() or (end < begin).any():
        raise Unsupported("slice out of range")
    _moved(v, "Slice", v.b.const(begin), v.b.const(end))


def squeeze(v: OpView) -> None:
    v.require_static()
    v.require_types(_ANY)
    _moved(v, "Reshape", v.b.const(np.array(v.out().dimensions, np.int64)))


def mean(v: OpView) -> None:
    v.require_static()
    v.require_types((FLOAT32, *QUANT8))
    rank = len(v.operand(0).dimensions)
    axes = sorted({int(a) % rank for a in v.const(1).reshape(-1)})
    keep = int(v.scalar(2))
    x = v.dequant(v.value(0), v.operand(0))
    y = v.b.one("ReduceMean", [x], axes=axes, keepdims=1 if keep else 0)  # opset 17: axes are an attribute
    y = v.quant(y, v.out())
    v.produce(v.b.one("Reshape", [y, v.b.const(np.array(v.out().dimensions, np.int64))]))  # [1], not a scalar


def resize_bilinear(v: OpView) -> None:
    v.require_static()
    v.require_types((FLOAT32, *QUANT8))
    nchw = bool(v.scalar(3, False))
    align, half = bool(v.scalar(4, False)), bool(v.scalar(5, False))
    if align and half:
        raise Unsupported("align_corners with half_pixel_centers")
    mode = "align_corners" if align else ("half_pixel" if half else "asymmetric")
    out = v.out().dimensions
    size = [out[0], out[1], out[2], out[3]] if nchw else [out[0], out[3], out[1], out[2]]
    x = v.dequant(v.to_nchw(v.value(0), nchw), v.operand(0))
    y = v.b.one(
        "Resize",
        [x, "", "", v.b.const(np.array(size, np.int64))],
        mode="linear",
        coordinate_transformation_mode=mode,
    )
    v.produce(v.from_nchw(v.quant(y, v.out()), nchw))


_INT64_MIN = -(2**63)


def _clamped(index: int, size: int, positive_stride: bool) -> int:
    """Begin/end clamped into an axis of ``size`` (negative indices count from the end), as
    the reference resolves them."""
    if positive_stride:
        return size if index >= size else min(max(index, -size), size) % size
    return -1 if index < -size else min(max(index, -size), size - 1) % size


def strided_slice(v: OpView) -> None:
    v.require_static()
    v.require_types(_ANY)
    dims = v.operand(0).dimensions
    begin, end, strides = (v.const(k).astype(np.int64).reshape(-1) for k in (1, 2, 3))
    begin_mask, end_mask, shrink = (int(v.scalar(k, 0)) for k in (4, 5, 6))
    starts, ends, steps, shape = [], [], [], []
    for axis, size in enumerate(dims):
        stride = int(strides[axis])
        if stride == 0:
            raise Unsupported("a stride of 0")
        # The reference's rule: masked ends span the axis, others are clamped into it.
        positive = stride > 0
        b = (0 if positive else size - 1) if begin_mask >> axis & 1 else _clamped(int(begin[axis]), size, positive)
        e = (size if positive else -1) if end_mask >> axis & 1 else _clamped(int(end[axis]), size, positive)
        length = max(0, -(-(e - b) // stride))
        if length == 0:
            raise Unsupported("an empty slice (a zero-sized output)")
        if shrink >> axis & 1:
            if stride < 0 or length != 1:
                raise Unsupported(f"shrunk dimension {axis} must select one element with a positive stride")
        else:
            shape.append(length)
        starts.append(b)
        ends.append(e if e >= 0 else _INT64_MIN)
        steps.append(stride)
    if tuple(shape or [1]) != tuple(v.out().dimensions):
        raise Unsupported(f"the slice has shape {shape}, the output is declared {list(v.out().dimensions)}")
    axes = list(range(len(dims)))
    sliced_args = [v.b.const(np.array(a, np.int64)) for a in (starts, ends, axes, steps)]
    if _same_quant(v):
        y = v.b.one("Slice", [v.value(0), *sliced_args])
    else:
        y = v.quant(v.b.one("Slice", [v.dequant(v.value(0), v.operand(0)), *sliced_args]), v.out())
    v.produce(v.b.one("Reshape", [y, v.b.const(np.array(v.out().dimensions, np.int64))]))


def resize_nearest(v: OpView) -> None:
    v.require_static()
    v.require_types((FLOAT32, *QUANT8))
    if not _same_quant(v):
        raise Unsupported("RESIZE_NEAREST_NEIGHBOR with different input and output quantization")
    nchw = bool(v.scalar(3, False))
    align, half = bool(v.scalar(4, False)), bool(v.scalar(5, False))
    if align and half:
        raise Unsupported("align_corners with half_pixel_centers")
    if align:
        mode, nearest = "align_corners", "round_prefer_ceil"
    elif half:
        mode, nearest = "tf_half_pixel_for_nn", "floor"
    else:
        mode, nearest = "asymmetric", "floor"
    out = v.out().dimensions
    size = [out[0], out[1], out[2], out[3]] if nchw else [out[0], out[3], out[1], out[2]]
    y = v.b.one(
        "Resize",
        [v.to_nchw(v.value(0), nchw), "", "", v.b.const(np.array(size, np.int64))],
        mode="nearest",
        coordinate_transformation_mode=mode,
        nearest_mode=nearest,
    )
    v.produce(v.from_nchw(y, nchw))


def space_to_batch(v: OpView) -> None:
    v.require_static()
    t = v.require_types((FLOAT32, *QUANT8))
    if not _same_quant(v):
        raise Unsupported("SPACE_TO_BATCH_ND with different input and output quantization")
    bh, bw = (int(b) for b in v.const(1).reshape(-1))
    pads = v.const(2).astype(np.int64).reshape(2, 2)
    nchw = bool(v.scalar(3, False))
    if bh < 1 or bw < 1 or (pads < 0).any():
        raise Unsupported("block sizes must be >= 1 and paddings >= 0")
    dims = v.operand(0).dimensions
    n, h, w, c = (dims[0], dims[2], dims[3], dims[1]) if nchw else dims
    hp, wp = h + int(pads[0].sum()), w + int(pads[1].sum())
    if hp % bh or wp % bw:
        raise Unsupported("padded spatial sizes are not multiples of the block")
    x = v.value(0) if not nchw else v.b.one("Transpose", [v.value(0)], perm=[0, 2, 3, 1])
    onnx_pads = np.array([0, pads[0, 0], pads[1, 0], 0, 0, pads[0, 1], pads[1, 1], 0], np.int64)
    fill = v.operand(0).zero_point if t in QUANT8 else 0
    x = v.b.one("Pad", [x, v.b.const(onnx_pads), v.b.const(np.asarray(fill).astype(_PAD_DTYPES[t]))], mode="constant")
    x = v.b.one("Reshape", [x, v.b.const(np.array([n, hp // bh, bh, wp // bw, bw, c], np.int64))])
    x = v.b.one("Transpose", [x], perm=[2, 4, 0, 1, 3, 5])
    y = v.b.one("Reshape", [x, v.b.const(np.array([bh * bw * n, hp // bh, wp // bw, c], np.int64))])
    v.produce(y if not nchw else v.b.one("Transpose", [y], perm=[0, 3, 1, 2]))


def l2_normalization(v: OpView) -> None:
    v.require_static()
    v.require_types((FLOAT32, *QUANT8))
    rank = len(v.operand(0).dimensions)
    axis = int(v.scalar(1, -1)) % rank
    x = v.dequant(v.value(0), v.operand(0))
    squares = v.b.one("ReduceSumSquare", [x], axes=[axis], keepdims=1)  # opset 17: axes are an attribute
    norm = v.b.one("Max", [v.b.one("Sqrt", [squares]), v.b.const(np.float32(1e-6))])
    v.produce(v.quant(v.b.one("Div", [x, norm]), v.out()))


CONVERTERS: dict[OperationType, Converter] = {
    Op.STRIDED_SLICE: strided_slice,
    Op.RESIZE_NEAREST_NEIGHBOR: resize_nearest,
    Op.SPACE_TO_BATCH_ND: space_to_batch,
    Op.L2_NORMALIZATION: l2_normalization,
    Op.DEPTH_TO_SPACE: _blocks("DepthToSpace"),
    Op.SPACE_TO_DEPTH: _blocks("SpaceToDepth"),
    Op.PAD: pad,
    Op.PAD_V2: pad,
    Op.SLICE: slice_,
    Op.SQUEEZE: squeeze,
    Op.EXPAND_DIMS: squeeze,
    Op.MEAN: mean,
    Op.RESIZE_BILINEAR: resize_bilinear,
}

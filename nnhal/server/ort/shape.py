"""Layout and shape operations as ONNX: DEPTH_TO_SPACE, SPACE_TO_DEPTH, PAD, PAD_V2, SLICE,
SQUEEZE, EXPAND_DIMS, MEAN, RESIZE_BILINEAR.

They move values without arithmetic (MEAN and RESIZE_BILINEAR aside), so quant8 runs
on the quantized values when input and output share their quantization, else through
float. NNAPI's block reshuffles are TensorFlow's, which is ONNX's ``DCR`` order in NCHW.
PAD fills quant8 tensors with the zero point (the real value 0), as the reference.
RESIZE_BILINEAR takes the corner conventions NNAPI 1.3 names (align_corners: ONNX
``align_corners``; half-pixel centers: ``half_pixel``; neither: ``asymmetric``).
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


CONVERTERS: dict[OperationType, Converter] = {
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

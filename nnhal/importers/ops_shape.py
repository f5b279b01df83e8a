"""Shape and data-movement TFLite builtins -> NNAPI.

Shapes are static in an imported model: RESHAPE takes the TFLite output tensor's shape as its
constant shape operand (so a computed ``new_shape`` input works too); SQUEEZE with no
``squeeze_dims`` lists every size-1 axis explicitly; CONCATENATION normalises a negative axis
and, having no fused activation in NNAPI, applies TFLite's as its own operation; SPLIT takes its
axis from TFLite's first input; GATHER reorders (params, indices) to NNAPI's (input, axis,
indices); PACK (NNAPI feature level 6) becomes EXPAND_DIMS of each value and a CONCATENATION;
SPLIT_V (not mapped by the delegate) becomes one SLICE per output; RESIZE_* take the output
size from the output tensor and add ``layout=false, align_corners, half_pixel_centers`` when
either flag is set (NNAPI 1.3). Operands NNAPI needs as constants (paddings, permutations,
axes, block shapes) must be constants in the file, else the operator is unmappable.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.core.enums import OperandType as T, OperationType as O
from nnhal.importers.converter import Converter, option
from nnhal.importers.errors import Unmappable
from nnhal.importers.reader import TfOperator

Mapper = Callable[[Converter, TfOperator], None]


def _vector(c: Converter, values: list[int]) -> int:
    return c.b.constant(np.asarray(values, np.int32))


def _const_input(c: Converter, t: int, what: str) -> int:
    c.const(t, what)
    return c.input(t)


def reshape(c: Converter, op: TfOperator) -> None:
    out = op.outputs[0]
    c.emit(O.RESHAPE, [c.input(op.inputs[0]), _vector(c, list(c.shape(out)))], [c.output(out)])


def squeeze(c: Converter, op: TfOperator) -> None:
    x = op.inputs[0]
    dims = option(op, "SqueezeDimsAsNumpy", 0)
    axes = [] if isinstance(dims, int) else [int(d) for d in dims]
    if not axes:
        axes = [i for i, d in enumerate(c.shape(x)) if d == 1]
    c.emit(O.SQUEEZE, [c.input(x), _vector(c, axes)], [c.output(op.outputs[0])])


def expand_dims(c: Converter, op: TfOperator) -> None:
    (axis,) = c.ints(op.inputs[1], "the axis")
    c.emit(O.EXPAND_DIMS, [c.input(op.inputs[0]), c.i32(axis)], [c.output(op.outputs[0])])


def concatenation(c: Converter, op: TfOperator) -> None:
    rank = len(c.shape(op.inputs[0]))
    axis = option(op, "Axis", 0)
    ins = [*(c.input(t) for t in op.inputs), c.i32(axis + rank if axis < 0 else axis)]
    c.maybe_fused_after(O.CONCATENATION, ins, option(op, "FusedActivationFunction", 0), op.outputs[0])


def pack(c: Converter, op: TfOperator) -> None:
    out = op.outputs[0]
    rank = len(c.shape(out))
    axis = option(op, "Axis", 0)
    axis = axis + rank if axis < 0 else axis
    parts = []
    for t in op.inputs:
        shape = list(c.shape(t))
        expanded = c.temporary(out, [*shape[:axis], 1, *shape[axis:]])
        c.emit(O.EXPAND_DIMS, [c.input(t), c.i32(axis)], [expanded])
        parts.append(expanded)
    c.emit(O.CONCATENATION, [*parts, c.i32(axis)], [c.output(out)])


def pad(c: Converter, op: TfOperator) -> None:
    x, out = op.inputs[0], op.outputs[0]
    paddings = _const_input(c, op.inputs[1], "the paddings")
    value = op.inputs[2] if len(op.inputs) > 2 else -1
    if value < 0:
        c.emit(O.PAD, [c.input(x), paddings], [c.output(out)])
        return
    v = np.asarray(c.const(value, "the pad value")).reshape(-1)
    if v.size != 1:
        raise Unmappable("the pad value must be one value")
    kind = c.operand_type(x)[0]
    if kind == T.TENSOR_FLOAT16:
        scalar = c.b.scalar(float(v[0]), T.FLOAT16)
    elif kind == T.TENSOR_FLOAT32:
        scalar = c.f32(float(v[0]))
    else:  # quantized tensors take the quantized value as INT32
        scalar = c.i32(int(v[0]))
    c.emit(O.PAD_V2, [c.input(x), paddings, scalar], [c.output(out)])


def strided_slice(c: Converter, op: TfOperator) -> None:
    if option(op, "EllipsisMask", 0) or option(op, "NewAxisMask", 0):
        raise Unmappable("ellipsis_mask and new_axis_mask have no NNAPI equivalent")
    if option(op, "Offset", False):
        raise Unmappable("offset=true (begin/end relative to begin) has no NNAPI equivalent")
    x, begin, end, strides = op.inputs[:4]
    ins = [c.input(x), c.input(begin), c.input(end), c.input(strides)]
    masks = [c.i32(option(op, name, 0)) for name in ("BeginMask", "EndMask", "ShrinkAxisMask")]
    c.emit(O.STRIDED_SLICE, [*ins, *masks], [c.output(op.outputs[0])])


def split(c: Converter, op: TfOperator) -> None:
    (axis,) = c.ints(op.inputs[0], "the split axis")
    x = op.inputs[1]
    c.emit(O.SPLIT, [c.input(x), c.i32(axis), c.i32(len(op.outputs))], [c.output(t) for t in op.outputs])


def split_v(c: Converter, op: TfOperator) -> None:
    x = op.inputs[0]
    (axis,) = c.ints(op.inputs[2], "the split axis")
    rank = len(c.shape(x))
    axis = axis + rank if axis < 0 else axis
    start = 0
    for t in op.outputs:
        size = list(c.shape(t))
        begin = [0] * rank
        begin[axis] = start
        start += size[axis]
        c.emit(O.SLICE, [c.input(x), _vector(c, begin), _vector(c, size)], [c.output(t)])


def gather(c: Converter, op: TfOperator) -> None:
    if option(op, "BatchDims", 0):
        raise Unmappable("batch_dims != 0 has no NNAPI equivalent")
    params, indices = op.inputs[:2]
    ins = [c.input(params), c.i32(option(op, "Axis", 0)), c.input(indices)]
    c.emit(O.GATHER, ins, [c.output(op.outputs[0])])


def _with_const(kind: O, what: str) -> Mapper:
    """``kind`` whose second input must be a constant tensor in the file."""

    def mapper(c: Converter, op: TfOperator) -> None:
        ins = [c.input(op.inputs[0]), _const_input(c, op.inputs[1], what), *(c.input(t) for t in op.inputs[2:])]
        c.emit(kind, ins, [c.output(t) for t in op.outputs])

    return mapper


def slice_(c: Converter, op: TfOperator) -> None:
    c.emit(O.SLICE, [c.input(t) for t in op.inputs[:3]], [c.output(op.outputs[0])])


def batch_to_space(c: Converter, op: TfOperator) -> None:
    if any(c.ints(op.inputs[2], "the crops")):
        raise Unmappable("non-zero crops have no NNAPI equivalent")
    ins = [c.input(op.inputs[0]), _const_input(c, op.inputs[1], "the block shape")]
    c.emit(O.BATCH_TO_SPACE_ND, ins, [c.output(op.outputs[0])])


def _block(kind: O) -> Mapper:
    def mapper(c: Converter, op: TfOperator) -> None:
        ins = [c.input(op.inputs[0]), c.i32(option(op, "BlockSize", 1))]
        c.emit(kind, ins, [c.output(op.outputs[0])])

    return mapper


def _resize(kind: O) -> Mapper:
    def mapper(c: Converter, op: TfOperator) -> None:
        out = op.outputs[0]
        if len(c.shape(op.inputs[0])) != 4:
            raise Unmappable("RESIZE needs a rank-4 NHWC input")
        c.const(op.inputs[1], "the output size")
        _, height, width, _ = c.shape(out)
        ins = [c.input(op.inputs[0]), c.i32(width), c.i32(height)]
        align, half = bool(option(op, "AlignCorners", False)), bool(option(op, "HalfPixelCenters", False))
        if align or half:
            ins += [c.boolean(False), c.boolean(align), c.boolean(half)]
        elif kind == O.RESIZE_NEAREST_NEIGHBOR:
            ins.append(c.boolean(False))  # the delegate always passes the layout here
        c.emit(kind, ins, [c.output(out)])

    return mapper


MAPPERS: dict[str, Mapper] = {
    "RESHAPE": reshape,
    "SQUEEZE": squeeze,
    "EXPAND_DIMS": expand_dims,
    "CONCATENATION": concatenation,
    "PACK": pack,
    "PAD": pad,
    "PADV2": pad,
    "TRANSPOSE": _with_const(O.TRANSPOSE, "the permutation"),
    "SLICE": slice_,
    "STRIDED_SLICE": strided_slice,
    "SPLIT": split,
    "SPLIT_V": split_v,
    "GATHER": gather,
    "TILE": _with_const(O.TILE, "the multiples"),
    "DEPTH_TO_SPACE": _block(O.DEPTH_TO_SPACE),
    "SPACE_TO_DEPTH": _block(O.SPACE_TO_DEPTH),
    "SPACE_TO_BATCH_ND": _with_const(O.SPACE_TO_BATCH_ND, "the block shape"),
    "BATCH_TO_SPACE_ND": batch_to_space,
    "RESIZE_BILINEAR": _resize(O.RESIZE_BILINEAR),
    "RESIZE_NEAREST_NEIGHBOR": _resize(O.RESIZE_NEAREST_NEIGHBOR),
}

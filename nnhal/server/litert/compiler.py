"""NNAPI model → TFLite flatbuffer (the importer's mapping run backwards), and which operations
can be converted.

Each main-subgraph operand a converted operation touches becomes a TFLite tensor of the same
shape, type and quantization (``tflite_map.tables.TENSOR_TYPE``; per-channel filters keep
their scales and channel dimension); tensor constants become buffers; scalar parameters
(padding codes, strides, fuse codes, axes) become the operator's options and must be
constants. Conventions NNAPI shares with TFLite (NHWC, ``[out, h, w, in]`` filters, SAME /
VALID, fuse codes) pass through unchanged. Explicit padding becomes SAME or VALID when it
equals one of them, else (convolutions only) a PAD before a VALID convolution. What has no
faithful TFLite form — float16 tensors, unknown shapes, parameters given at run
time, uint8 activations with per-channel filters, int8 filters with a zero point — raises
:class:`Unsupported` with the reason; nothing is approximated.

``supported_operations``: the reference executor's validation first, then the conversion of
each operation on a scratch graph. ``compile_model`` converts a whole model whose every
operation is supported (GeneralFailure otherwise, naming the operation). The graph being
written: ``litert.graph``; the spatial operations' conversions: ``litert.spatial``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from nnhal.core.enums import HalVersion, OperandLifeTime, OperandType as T, OperationType as O
from nnhal.core.types import Model, Operand, Operation
from nnhal.server.compiling import Unsupported, convert_all, guarded, io_reason, supported_by_conversion
from nnhal.server.executor.constants import Buffer
from nnhal.server.litert.graph import TfliteGraph, quant_of, tensor_type
from nnhal.server.litert.spatial import conv_2d, depthwise_conv_2d, fully_connected, pooling
from nnhal.tflite_map.tables import BUILTIN_NAME, FUSED_BINARY, SAME_OPERANDS, TENSOR_TYPE


# -- element-wise --------------------------------------------------------------------------
def _fused_binary(g: TfliteGraph, operation: Operation) -> None:
    a, b, fuse = operation.inputs
    name = BUILTIN_NAME[operation.type]
    options = {"ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions"}[name]
    g.emit(
        name,
        [g.tensor(a), g.tensor(b)],
        [g.tensor(operation.outputs[0])],
        options,
        FusedActivationFunction=g.activation(fuse),
    )


def _same_operands(g: TfliteGraph, operation: Operation) -> None:
    ins = [g.tensor(i) for i in operation.inputs]
    g.emit(BUILTIN_NAME[operation.type], ins, [g.tensor(o) for o in operation.outputs])


# -- shapes and the rest ---------------------------------------------------------------------
def _to_output_shape(g: TfliteGraph, operation: Operation) -> None:
    """RESHAPE, SQUEEZE, EXPAND_DIMS: a reshape to the output's (known) shape."""
    out = operation.outputs[0]
    shape = np.asarray(g.dims(out), np.int32)
    ins = [g.tensor(operation.inputs[0]), g.constant(shape, TENSOR_TYPE[T.TENSOR_INT32])]
    g.emit("RESHAPE", ins, [g.tensor(out)])


def softmax(g: TfliteGraph, operation: Operation) -> None:
    x = operation.inputs[0]
    rank = len(g.dims(x))
    if len(operation.inputs) > 2 and int(g.scalar(operation.inputs[2], "the axis")) not in (-1, rank - 1):
        raise Unsupported("SOFTMAX over an axis other than the last")
    beta = float(g.scalar(operation.inputs[1], "beta"))
    g.emit("SOFTMAX", [g.tensor(x)], [g.tensor(operation.outputs[0])], "SoftmaxOptions", Beta=beta)


def concatenation(g: TfliteGraph, operation: Operation) -> None:
    *parts, axis_index = operation.inputs
    axis = int(g.scalar(axis_index, "the axis"))
    ins = [g.tensor(i) for i in parts]
    g.emit("CONCATENATION", ins, [g.tensor(operation.outputs[0])], "ConcatenationOptions", Axis=axis)


def pad(g: TfliteGraph, operation: Operation) -> None:
    x, paddings = operation.inputs[:2]
    g.ints(paddings, "the paddings")
    ins = [g.tensor(x), g.tensor(paddings)]
    if operation.type == O.PAD:
        g.emit("PAD", ins, [g.tensor(operation.outputs[0])])
        return
    xt = g.operand(x)
    value = g.scalar(operation.inputs[2], "the pad value")
    kind = tensor_type(xt)
    fill = np.asarray([value]).astype(np.dtype(_NP_OF[xt.type]))
    ins.append(g.constant(fill, kind, quant_of(xt)))
    g.emit("PADV2", ins, [g.tensor(operation.outputs[0])])


_NP_OF = {
    T.TENSOR_FLOAT32: "float32",
    T.TENSOR_INT32: "int32",
    T.TENSOR_QUANT8_ASYMM: "uint8",
    T.TENSOR_QUANT8_ASYMM_SIGNED: "int8",
    T.TENSOR_QUANT16_SYMM: "int16",
    T.TENSOR_BOOL8: "bool",
}


def _reduce(builtin: str) -> Callable[[TfliteGraph, Operation], None]:
    def convert(g: TfliteGraph, operation: Operation) -> None:
        x, axes, keep = operation.inputs
        if not g.operand(operation.outputs[0]).dimensions:
            raise Unsupported("a scalar output")
        rank = len(g.dims(x))
        reduced = {a % rank for a in g.ints(axes, "the axes")}
        keep_dims = bool(g.scalar(keep, "keep_dims"))
        if not keep_dims and len(reduced) == rank:
            raise Unsupported("every axis reduced without keep_dims (TFLite's result is rank 0, NNAPI's [1])")
        ins = [g.tensor(x), g.tensor(axes)]
        g.emit(builtin, ins, [g.tensor(operation.outputs[0])], "ReducerOptions", KeepDims=keep_dims)

    return convert


def transpose(g: TfliteGraph, operation: Operation) -> None:
    x = operation.inputs[0]
    rank = len(g.dims(x))
    perm_index = operation.inputs[1] if len(operation.inputs) > 1 else -1
    omitted = perm_index < 0 or g.operand(perm_index).lifetime == OperandLifeTime.NO_VALUE
    perm = list(range(rank))[::-1] if omitted else g.ints(perm_index, "the permutation")
    ins = [g.tensor(x), g.constant(np.asarray(perm, np.int32), TENSOR_TYPE[T.TENSOR_INT32])]
    g.emit("TRANSPOSE", ins, [g.tensor(operation.outputs[0])])


def _resize(builtin: str, options: str) -> Callable[[TfliteGraph, Operation], None]:
    def convert(g: TfliteGraph, operation: Operation) -> None:
        x, out = operation.inputs[0], operation.outputs[0]
        flags = operation.inputs[3:]
        if flags and bool(g.scalar(flags[0], "the layout")):
            raise Unsupported("NCHW layout (this device computes NHWC)")
        align = bool(g.scalar(flags[1], "align_corners")) if len(flags) > 1 else False
        half = bool(g.scalar(flags[2], "half_pixel_centers")) if len(flags) > 2 else False
        g.dims(x)
        _, height, width, _ = g.dims(out)
        size = g.constant(np.asarray([height, width], np.int32), TENSOR_TYPE[T.TENSOR_INT32])
        g.emit(builtin, [g.tensor(x), size], [g.tensor(out)], options, AlignCorners=align, HalfPixelCenters=half)

    return convert


def l2_normalization(g: TfliteGraph, operation: Operation) -> None:
    x = operation.inputs[0]
    rank = len(g.dims(x))
    if len(operation.inputs) > 1 and int(g.scalar(operation.inputs[1], "the axis")) not in (-1, rank - 1):
        raise Unsupported("L2_NORMALIZATION over an axis other than the last")
    g.emit("L2_NORMALIZATION", [g.tensor(x)], [g.tensor(operation.outputs[0])])


def _block(builtin: str, options: str) -> Callable[[TfliteGraph, Operation], None]:
    def convert(g: TfliteGraph, operation: Operation) -> None:
        x, block = operation.inputs[:2]
        if len(operation.inputs) > 2 and bool(g.scalar(operation.inputs[2], "the layout")):
            raise Unsupported("NCHW layout (this device computes NHWC)")
        size = int(g.scalar(block, "the block size"))
        g.emit(builtin, [g.tensor(x)], [g.tensor(operation.outputs[0])], options, BlockSize=size)

    return convert


Converter = Callable[[TfliteGraph, Operation], None]

CONVERTERS: dict[O, Converter] = {
    O.CONV_2D: conv_2d,
    O.DEPTHWISE_CONV_2D: depthwise_conv_2d,
    O.AVERAGE_POOL_2D: pooling("AVERAGE_POOL_2D"),
    O.MAX_POOL_2D: pooling("MAX_POOL_2D"),
    O.L2_POOL_2D: pooling("L2_POOL_2D"),
    O.FULLY_CONNECTED: fully_connected,
    **dict.fromkeys(FUSED_BINARY.values(), _fused_binary),
    **dict.fromkeys(SAME_OPERANDS.values(), _same_operands),
    O.RESHAPE: _to_output_shape,
    O.SQUEEZE: _to_output_shape,
    O.EXPAND_DIMS: _to_output_shape,
    O.SOFTMAX: softmax,
    O.CONCATENATION: concatenation,
    O.PAD: pad,
    O.PAD_V2: pad,
    O.MEAN: _reduce("MEAN"),
    O.REDUCE_SUM: _reduce("SUM"),
    O.REDUCE_MAX: _reduce("REDUCE_MAX"),
    O.REDUCE_MIN: _reduce("REDUCE_MIN"),
    O.REDUCE_PROD: _reduce("REDUCE_PROD"),
    O.TRANSPOSE: transpose,
    O.RESIZE_BILINEAR: _resize("RESIZE_BILINEAR", "ResizeBilinearOptions"),
    O.RESIZE_NEAREST_NEIGHBOR: _resize("RESIZE_NEAREST_NEIGHBOR", "ResizeNearestNeighborOptions"),
    O.L2_NORMALIZATION: l2_normalization,
    O.SPACE_TO_DEPTH: _block("SPACE_TO_DEPTH", "SpaceToDepthOptions"),
    O.DEPTH_TO_SPACE: _block("DEPTH_TO_SPACE", "DepthToSpaceOptions"),
}


F32, Q8, S8, I32, B8 = (
    T.TENSOR_FLOAT32,
    T.TENSOR_QUANT8_ASYMM,
    T.TENSOR_QUANT8_ASYMM_SIGNED,
    T.TENSOR_INT32,
    T.TENSOR_BOOL8,
)
_FQ = frozenset({F32, Q8, S8})
_FQI = _FQ | {I32}
#: The types of the data input (input 0; SELECT's input 1) each conversion is offered, those
#: TFLite's kernels compute with NNAPI's semantics: a kernel given a type it lacks may abort
#: the process rather than fail, so nothing outside this table reaches LiteRT. (CAST is left
#: out: NNAPI saturates where TFLite wraps.)
DATA_TYPES: dict[O, frozenset[T]] = {
    **dict.fromkeys((O.CONV_2D, O.DEPTHWISE_CONV_2D, O.FULLY_CONNECTED, O.AVERAGE_POOL_2D, O.MAX_POOL_2D), _FQ),
    **dict.fromkeys((O.ADD, O.MUL, O.SUB, O.MAXIMUM, O.MINIMUM), _FQI),
    **dict.fromkeys((O.LESS, O.LESS_EQUAL, O.GREATER, O.GREATER_EQUAL, O.EQUAL, O.NOT_EQUAL), frozenset({F32, I32})),
    O.SELECT: frozenset({F32, I32}),
    **dict.fromkeys((O.RELU, O.RELU1, O.RELU6, O.LOGISTIC, O.TANH, O.HARD_SWISH, O.PRELU), _FQ),
    **dict.fromkeys((O.SOFTMAX, O.MEAN, O.RESIZE_BILINEAR, O.RESIZE_NEAREST_NEIGHBOR, O.L2_NORMALIZATION), _FQ),
    **dict.fromkeys((O.CONCATENATION, O.PAD, O.PAD_V2, O.SPACE_TO_DEPTH, O.DEPTH_TO_SPACE), _FQI),
    **dict.fromkeys((O.RESHAPE, O.SQUEEZE, O.EXPAND_DIMS, O.TRANSPOSE), _FQI | {B8}),
    **dict.fromkeys((O.LOGICAL_AND, O.LOGICAL_OR, O.LOGICAL_NOT), frozenset({B8})),
    **dict.fromkeys(
        (O.L2_POOL_2D, O.DIV, O.POW, O.ABS, O.EXP, O.LOG, O.SQRT, O.RSQRT, O.SIN, O.NEG, O.FLOOR, O.QUANTIZE),
        frozenset({F32}),
    ),
    **dict.fromkeys((O.REDUCE_SUM, O.REDUCE_MAX, O.REDUCE_MIN, O.REDUCE_PROD), frozenset({F32})),
    O.DEQUANTIZE: frozenset({Q8, S8}),
}


#: Quantized, these TFLite (or XNNPACK) kernels read every tensor with one scale and zero
#: point (they do not requantize between inputs and output as NNAPI does).
SAME_QUANT = frozenset(
    {
        O.MAXIMUM,
        O.MINIMUM,
        O.AVERAGE_POOL_2D,
        O.MAX_POOL_2D,
        O.RESHAPE,
        O.SQUEEZE,
        O.EXPAND_DIMS,
        O.TRANSPOSE,
        O.PAD,
        O.PAD_V2,
        O.SPACE_TO_DEPTH,
        O.DEPTH_TO_SPACE,
        O.RESIZE_BILINEAR,
        O.RESIZE_NEAREST_NEIGHBOR,
        O.RELU,
        O.RELU1,
        O.RELU6,
    }
)


def _same_quant(g: TfliteGraph, operation: Operation) -> bool:
    params = {
        (g.operand(i).scale, g.operand(i).zero_point)
        for i in (*operation.inputs, *operation.outputs)
        if g.operand(i).type in (Q8, S8)
    }
    return len(params) <= 1


def _operand_reason(op: Operand) -> str:
    """Why a model input or output of ``op``'s type cannot be a TFLite tensor ("" if it can)."""
    try:
        tensor_type(op)
    except Unsupported as err:
        return str(err)
    return ""


def _convert(g: TfliteGraph, index: int) -> str:
    """ "" when operation ``index`` converted into ``g``, else why not."""
    operation = g.main.operations[index]
    converter = CONVERTERS.get(operation.type)
    types = DATA_TYPES.get(operation.type)
    if converter is None or types is None:
        return f"{operation.type.name} has no LiteRT conversion in this device"
    data = operation.inputs[1 if operation.type == O.SELECT else 0]
    if g.operand(data).type not in types:
        allowed = ", ".join(sorted(t.name for t in types))
        return f"{operation.type.name} of {g.operand(data).type.name}: this device computes it on {allowed} only"
    if operation.type in SAME_QUANT and not _same_quant(g, operation):
        return f"{operation.type.name}: quantized tensors with different scales or zero points"

    def convert() -> str:
        converter(g, operation)
        return ""

    return guarded(operation.type.name, convert)


def supported_operations(model: Model, pools: Sequence[Buffer], level: HalVersion) -> tuple[list[bool], list[str]]:
    """Per main-subgraph operation: supported, and why not. InvalidArgument for a
    structurally invalid model (as the reference device)."""
    io = io_reason(model, _operand_reason)
    return supported_by_conversion(model, pools, level, io, lambda: TfliteGraph(model, pools), _convert)


def compile_model(model: Model, pools: Sequence[Buffer]) -> bytes:
    """The TFLite flatbuffer computing ``model`` (validated by the caller). Raises
    GeneralFailure when an operation cannot be converted."""
    io = io_reason(model, _operand_reason)
    g = TfliteGraph(model, pools)
    if not io:
        g.flat.inputs = [g.tensor(i) for i in model.main.input_indexes]
    convert_all(model, io, g, _convert)
    g.flat.outputs = [g.tensor(i) for i in model.main.output_indexes]
    return g.flat.finish()

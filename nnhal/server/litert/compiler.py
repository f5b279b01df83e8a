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
operation is supported (GeneralFailure otherwise, naming the operation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from nnhal.core.enums import HalVersion, OperandLifeTime, OperandType as T, OperationType as O
from nnhal.core.operand_types import INFO
from nnhal.core.types import Model, Operand, Operation
from nnhal.server.compiling import Unsupported, convert_all, guarded, io_reason, supported_by_conversion
from nnhal.server.executor.graph import Buffer, constant_value
from nnhal.server.executor.ops._padding import PADDING_SAME, PADDING_VALID, implicit_padding
from nnhal.tflite_map.tables import ACTIVATION, BUILTIN_NAME, FUSED_BINARY, PADDING, SAME_OPERANDS, TENSOR_TYPE
from nnhal.tflite_map.writer import FlatModel, FlatOperator, FlatTensor, Quant

_CONSTANT = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)
_QUANT = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT16_SYMM)


class TfliteGraph:
    """The TFLite model being written for one NNAPI main subgraph."""

    def __init__(self, model: Model, pools: Sequence[Buffer]) -> None:
        self.model = model
        self.main = model.main
        self.pools = pools
        self.flat = FlatModel()
        self.tensor_of: dict[int, int] = {}

    # -- operands ----------------------------------------------------------------------
    def operand(self, index: int) -> Operand:
        return self.main.operands[index]

    def value(self, index: int) -> np.ndarray | None:
        return constant_value(self.model, self.pools, self.operand(index))

    def scalar(self, index: int, what: str) -> int | float | bool:
        op = self.operand(index)
        if op.lifetime == OperandLifeTime.NO_VALUE:
            raise Unsupported(f"{what} is omitted")
        v = self.value(index)
        if v is None:
            raise Unsupported(f"{what} is given at run time; this device needs it when compiling")
        return v.reshape(-1)[0].item()  # type: ignore[no-any-return]

    def ints(self, index: int, what: str) -> list[int]:
        v = self.value(index)
        if v is None:
            raise Unsupported(f"{what} is computed at run time; this device needs it when compiling")
        return [int(x) for x in v.reshape(-1)]

    def dims(self, index: int) -> tuple[int, ...]:
        op = self.operand(index)
        if not op.dimensions or 0 in op.dimensions:
            raise Unsupported(f"operand {index} has unknown dimensions {list(op.dimensions)}")
        return op.dimensions

    def tensor(self, index: int) -> int:
        """The tensor of operand ``index`` (created on first use; constants carry their bytes)."""
        if index in self.tensor_of:
            return self.tensor_of[index]
        op = self.operand(index)
        if not INFO[op.type].is_tensor:
            raise Unsupported(f"operand {index} is a {op.type.name} scalar where a tensor is needed")
        data = None
        if op.lifetime in _CONSTANT:
            value = self.value(index)
            assert value is not None
            data = np.ascontiguousarray(value).tobytes()
        elif op.lifetime == OperandLifeTime.NO_VALUE:
            raise Unsupported(f"operand {index} is omitted")
        t = self.flat.tensor(FlatTensor(self.dims(index), _tensor_type(op), data, _quant(op), f"t{index}"))
        self.tensor_of[index] = t
        return t

    def constant(self, value: np.ndarray, tensor_type: int, quant: Quant | None = None) -> int:
        shape = tuple(value.shape) or (1,)
        return self.flat.tensor(FlatTensor(shape, tensor_type, np.ascontiguousarray(value).tobytes(), quant))

    def temporary(self, like: int, shape: tuple[int, ...]) -> int:
        op = self.operand(like)
        return self.flat.tensor(FlatTensor(shape, _tensor_type(op), None, _quant(op)))

    def emit(
        self,
        builtin: str,
        inputs: Sequence[int],
        outputs: Sequence[int],
        options: str = "",
        **fields: int | float | bool,
    ) -> None:
        """One operator; ``inputs`` and ``outputs`` are tensor indexes."""
        self.flat.operator(FlatOperator(builtin, tuple(inputs), tuple(outputs), options, dict(fields)))

    def activation(self, index: int) -> int:
        code = int(self.scalar(index, "the fuse code"))
        if code not in ACTIVATION:
            raise Unsupported(f"fuse code {code} is not one of NONE, RELU, RELU1, RELU6")
        return ACTIVATION[code]


def _tensor_type(op: Operand) -> int:
    if op.type not in TENSOR_TYPE or op.type == T.TENSOR_FLOAT16:
        raise Unsupported(f"{op.type.name} tensors are not computed by this device")
    if op.type == T.TENSOR_QUANT16_SYMM and op.zero_point != 0:
        raise Unsupported("TENSOR_QUANT16_SYMM with a zero point")
    return TENSOR_TYPE[op.type]


def _quant(op: Operand) -> Quant | None:
    if op.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        assert op.channel_quant is not None
        q = op.channel_quant
        return Quant(tuple(q.scales), (0,) * len(q.scales), q.channel_dim)
    if op.type in _QUANT or (op.type == T.TENSOR_INT32 and op.scale):
        return Quant((op.scale,), (op.zero_point,))
    return None


# -- convolutions and pooling ----------------------------------------------------------------
_TO_NHWC, _TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)


def _nhwc_in(g: TfliteGraph, x: int, nchw: bool) -> tuple[int, tuple[int, ...]]:
    """(tensor, dims) of operand ``x`` in NHWC: itself, or a TRANSPOSE of an NCHW one."""
    dims = g.dims(x)
    if not nchw:
        return g.tensor(x), dims
    if len(dims) != 4:
        raise Unsupported("an NCHW operand that is not rank 4")
    shape = tuple(dims[i] for i in _TO_NHWC)
    t = g.temporary(x, shape)
    perm = g.constant(np.asarray(_TO_NHWC, np.int32), TENSOR_TYPE[T.TENSOR_INT32])
    g.emit("TRANSPOSE", [g.tensor(x), perm], [t])
    return t, shape


def _nhwc_out(g: TfliteGraph, out: int, nchw: bool) -> tuple[int, Callable[[], None]]:
    """(tensor to write NHWC results into, what to emit after the operation): operand
    ``out`` itself, or a temporary TRANSPOSEd into an NCHW ``out``."""
    if not nchw:
        return g.tensor(out), lambda: None
    dims = g.dims(out)
    t = g.temporary(out, tuple(dims[i] for i in _TO_NHWC))

    def finish() -> None:
        perm = g.constant(np.asarray(_TO_NCHW, np.int32), TENSOR_TYPE[T.TENSOR_INT32])
        g.emit("TRANSPOSE", [t, perm], [g.tensor(out)])

    return t, finish


def _padding(
    dims: tuple[int, ...], pads: tuple[int, int, int, int] | None, code: int, window: tuple[int, int, int, int]
) -> tuple[int, tuple[int, int, int, int]]:
    """(TFLite padding, explicit pads still to apply) for an NHWC input of ``dims``; ``window``
    is (filter w, filter h, stride w, stride h) with dilation folded in by the caller."""
    _, height, width, _ = dims
    fw, fh, sw, sh = window
    if pads is None:
        if code not in PADDING:
            raise Unsupported(f"padding code {code} is neither SAME nor VALID")
        return PADDING[code], (0, 0, 0, 0)
    left, right = implicit_padding(width, sw, 1, fw, PADDING_SAME)
    top, bottom = implicit_padding(height, sh, 1, fh, PADDING_SAME)
    if pads == (left, right, top, bottom):
        return PADDING[PADDING_SAME], (0, 0, 0, 0)
    return PADDING[PADDING_VALID], pads


def _spatial(g: TfliteGraph, operation: Operation, params: int) -> tuple[list[int], list[int], list[int]]:
    """([padding code] or the explicit [left, right, top, bottom], [stride w, stride h, *the
    ``params`` that follow], [fuse code, (layout, (dilation w, dilation h))]) of a 2-D
    operation whose first operands are ``x`` (and ``w, b`` for convolutions)."""
    ins = operation.inputs
    first = 3 if operation.type in (O.CONV_2D, O.DEPTHWISE_CONV_2D) else 1
    # Where the implicit form has its layout (BOOL, after the fuse code) the explicit form
    # has an INT32 (a stride or parameter), and the explicit form is the longer one.
    after_fuse = first + 1 + 2 + params + 1
    explicit = len(ins) >= first + 4 + 2 + params + 1 and g.operand(ins[after_fuse]).type == T.INT32
    n_pad = 4 if explicit else 1
    pad = [int(g.scalar(i, "the padding")) for i in ins[first : first + n_pad]]
    rest = ins[first + n_pad :]
    values = [int(g.scalar(i, "a stride or parameter")) for i in rest[: 2 + params]]
    tail = rest[2 + params :]
    return pad, values, list(tail)


def _layout_dilation(g: TfliteGraph, tail: list[int]) -> tuple[int, int, int, bool]:
    """(fuse code index, dilation w, dilation h, NCHW) from an operation's tail."""
    fuse, rest = tail[0], tail[1:]
    nchw = bool(rest) and bool(g.scalar(rest[0], "the layout"))
    dw, dh = (int(g.scalar(rest[1], "dilation")), int(g.scalar(rest[2], "dilation"))) if len(rest) >= 3 else (1, 1)
    return fuse, dw, dh, nchw


def _bias(g: TfliteGraph, b: int, x: int, w: int) -> int:
    """The bias tensor: as is for float; for quantized models with TFLite's scales
    (input scale x filter scale, per channel for per-channel filters)."""
    bias, filt = g.operand(b), g.operand(w)
    if bias.type != T.TENSOR_INT32:
        return g.tensor(b)
    value = g.value(b)
    if value is None:
        raise Unsupported("a quantized bias computed at run time")
    in_scale = g.operand(x).scale
    if filt.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        assert filt.channel_quant is not None
        scales = tuple(in_scale * s for s in filt.channel_quant.scales)
    else:
        scales = (in_scale * filt.scale,)
    return g.constant(
        value.astype(np.int32).reshape(-1), TENSOR_TYPE[T.TENSOR_INT32], Quant(scales, (0,) * len(scales))
    )


def _check_filter(g: TfliteGraph, x: int, w: int) -> None:
    xt, wt = g.operand(x), g.operand(w)
    if wt.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL and xt.type != T.TENSOR_QUANT8_ASYMM_SIGNED:
        raise Unsupported("per-channel filters need int8 (QUANT8_ASYMM_SIGNED) activations in TFLite")
    if wt.type == T.TENSOR_QUANT8_ASYMM_SIGNED and wt.zero_point != 0:
        raise Unsupported("int8 filters must have zero point 0 in TFLite")
    if g.value(w) is None:
        raise Unsupported("a filter computed at run time")


def _pad_input(g: TfliteGraph, x: int, tensor: int, dims: tuple[int, ...], pads: tuple[int, int, int, int]) -> int:
    """NHWC ``tensor`` (operand ``x``'s values, ``dims``) zero-padded by explicit (left,
    right, top, bottom) pads."""
    if not any(pads):
        return tensor
    n, h, w, c = dims
    left, right, top, bottom = pads
    paddings = np.asarray([[0, 0], [top, bottom], [left, right], [0, 0]], np.int32)
    padded = g.temporary(x, (n, h + top + bottom, w + left + right, c))
    g.emit("PAD", [tensor, g.constant(paddings, TENSOR_TYPE[T.TENSOR_INT32])], [padded])
    return padded


def _conv_operands(
    g: TfliteGraph, operation: Operation, params: int
) -> tuple[list[int], int, Callable[[], None], list[int], dict[str, int]]:
    """What a 2-D convolution (``params`` scalars after the strides: 0 for CONV_2D, the
    multiplier for DEPTHWISE_CONV_2D) gives TFLite: its input tensors (NHWC input, explicitly
    padded when TFLite's padding cannot say it; filter; bias), its output tensor and the
    ``finish`` that lays it out, the ``params`` values, and the options both builtins share."""
    x, w, b = operation.inputs[:3]
    pad, values, tail = _spatial(g, operation, params)
    sw, sh = values[:2]
    fuse, dw, dh, nchw = _layout_dilation(g, tail)
    _check_filter(g, x, w)
    _, fh, fw, _ = g.dims(w)
    xt, xdims = _nhwc_in(g, x, nchw)
    padding, pads = _conv_padding(xdims, pad, (fw, fh, sw, sh), (dw, dh))
    inputs = [_pad_input(g, x, xt, xdims, pads), g.tensor(w), _bias(g, b, x, w)]
    out, finish = _nhwc_out(g, operation.outputs[0], nchw)
    options = {
        "Padding": padding,
        "StrideW": sw,
        "StrideH": sh,
        "FusedActivationFunction": g.activation(fuse),
        "DilationWFactor": dw,
        "DilationHFactor": dh,
    }
    return inputs, out, finish, values[2:], options


def conv_2d(g: TfliteGraph, operation: Operation) -> None:
    inputs, out, finish, _, options = _conv_operands(g, operation, 0)
    g.emit("CONV_2D", inputs, [out], "Conv2DOptions", **options)
    finish()


def depthwise_conv_2d(g: TfliteGraph, operation: Operation) -> None:
    inputs, out, finish, (multiplier,), options = _conv_operands(g, operation, 1)
    g.emit("DEPTHWISE_CONV_2D", inputs, [out], "DepthwiseConv2DOptions", DepthMultiplier=multiplier, **options)
    finish()


def _conv_padding(
    dims: tuple[int, ...], pad: list[int], window: tuple[int, int, int, int], dilation: tuple[int, int]
) -> tuple[int, tuple[int, int, int, int]]:
    fw, fh, sw, sh = window
    dw, dh = dilation
    effective = ((fw - 1) * dw + 1, (fh - 1) * dh + 1, sw, sh)
    explicit = (pad[0], pad[1], pad[2], pad[3]) if len(pad) == 4 else None
    return _padding(dims, explicit, pad[0], effective)


def _pool(builtin: str) -> Callable[[TfliteGraph, Operation], None]:
    def convert(g: TfliteGraph, operation: Operation) -> None:
        x = operation.inputs[0]
        pad, (sw, sh, fw, fh), tail = _spatial(g, operation, 2)
        fuse, _, _, nchw = _layout_dilation(g, tail)
        explicit = (pad[0], pad[1], pad[2], pad[3]) if len(pad) == 4 else None
        xt, xdims = _nhwc_in(g, x, nchw)
        padding, pads = _padding(xdims, explicit, pad[0], (fw, fh, sw, sh))
        if any(pads):
            raise Unsupported("explicit padding that is neither SAME nor VALID (pooling cannot pad by a PAD)")
        out, finish = _nhwc_out(g, operation.outputs[0], nchw)
        g.emit(
            builtin,
            [xt],
            [out],
            "Pool2DOptions",
            Padding=padding,
            StrideW=sw,
            StrideH=sh,
            FilterWidth=fw,
            FilterHeight=fh,
            FusedActivationFunction=g.activation(fuse),
        )
        finish()

    return convert


def fully_connected(g: TfliteGraph, operation: Operation) -> None:
    x, w, b, fuse = operation.inputs
    _check_filter(g, x, w)
    g.emit(
        "FULLY_CONNECTED",
        [g.tensor(x), g.tensor(w), _bias(g, b, x, w)],
        [g.tensor(operation.outputs[0])],
        "FullyConnectedOptions",
        FusedActivationFunction=g.activation(fuse),
    )


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
    kind = _tensor_type(xt)
    fill = np.asarray([value]).astype(np.dtype(_NP_OF[xt.type]))
    ins.append(g.constant(fill, kind, _quant(xt)))
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
    O.AVERAGE_POOL_2D: _pool("AVERAGE_POOL_2D"),
    O.MAX_POOL_2D: _pool("MAX_POOL_2D"),
    O.L2_POOL_2D: _pool("L2_POOL_2D"),
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
        _tensor_type(op)
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

"""Reading a ``.tflite`` flatbuffer into plain values, with the ``tflite`` package's generated
schema code (the published ``schema.fbs`` compiled by ``flatc``): no hand-written parsing.

``read_tflite(data, source)`` returns a ``TfGraph`` of the first (main) subgraph: tensors with
their static shapes, types, quantization and constant data (sparse constants already densified),
and operators with their builtin name, version, inputs, outputs and options object. Everything a
malformed file can do wrong becomes one ``TfliteImportError`` naming the problem: not a TFLite
flatbuffer (no ``TFL3`` identifier), truncated (an offset or a buffer past the end), a schema
version other than 3, a buffer whose size does not match its tensor.

The flatbuffers runtime has no verifier in Python, so every read happens inside one guard that
turns the runtime's out-of-range errors (``struct.error``, ``IndexError``, numpy's ``ValueError``)
into "truncated or corrupt".
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import tflite

from nnhal.importers.densify import densify
from nnhal.importers.errors import TfliteImportError

#: The only schema version TFLite has written since 2018 (and the one the delegate reads).
SCHEMA_VERSION = 3
IDENTIFIER = b"TFL3"

#: TensorType number -> numpy dtype of the stored bytes (types a model may carry as constants).
NUMPY_DTYPE: dict[int, np.dtype[Any]] = {
    tflite.TensorType.FLOAT32: np.dtype("<f4"),
    tflite.TensorType.FLOAT16: np.dtype("<f2"),
    tflite.TensorType.INT32: np.dtype("<i4"),
    tflite.TensorType.UINT8: np.dtype("u1"),
    tflite.TensorType.INT64: np.dtype("<i8"),
    tflite.TensorType.BOOL: np.dtype("?"),
    tflite.TensorType.INT16: np.dtype("<i2"),
    tflite.TensorType.INT8: np.dtype("i1"),
    tflite.TensorType.FLOAT64: np.dtype("<f8"),
}
TYPE_NAME: dict[int, str] = {v: k for k, v in vars(tflite.TensorType).items() if not k.startswith("_")}
_OPTION_CLASS = {v: k for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_")}
BUILTIN_NAME = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}


@dataclass(frozen=True)
class Quantization:
    """Affine quantization: one scale and zero point per tensor, or per channel along ``axis``."""

    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int

    @property
    def per_channel(self) -> bool:
        return len(self.scales) > 1


@dataclass(frozen=True)
class TfTensor:
    index: int
    name: str
    shape: tuple[int, ...]
    type: int
    data: np.ndarray | None
    quant: Quantization | None
    is_variable: bool

    @property
    def type_name(self) -> str:
        return str(TYPE_NAME.get(self.type, self.type))


@dataclass(frozen=True)
class TfOperator:
    index: int
    name: str
    version: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: Any


@dataclass(frozen=True)
class TfGraph:
    source: str
    tensors: tuple[TfTensor, ...]
    operators: tuple[TfOperator, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    subgraphs: int
    description: str


def read_tflite(data: bytes, source: str = "model") -> TfGraph:
    """The main subgraph of ``data``; TfliteImportError for anything that is not a readable model."""
    if len(data) < 8:
        raise TfliteImportError(f"{source}: {len(data)} bytes is too short to be a TFLite flatbuffer")
    if not tflite.Model.ModelBufferHasIdentifier(data, 0):
        raise TfliteImportError(
            f"{source}: not a TFLite model (the flatbuffer identifier is {bytes(data[4:8])!r}, expected {IDENTIFIER!r})"
        )
    try:
        return _read(data, source)
    except TfliteImportError:
        raise
    except (struct.error, IndexError, KeyError, ValueError, TypeError, OverflowError, UnicodeDecodeError) as err:
        raise TfliteImportError(
            f"{source}: truncated or corrupt flatbuffer ({len(data)} bytes; reading it failed: {err})"
        ) from None


def _read(data: bytes, source: str) -> TfGraph:
    model = tflite.Model.GetRootAs(data, 0)
    version = model.Version()
    if version != SCHEMA_VERSION:
        raise TfliteImportError(
            f"{source}: unsupported TFLite schema version {version} (this importer reads {SCHEMA_VERSION})"
        )
    if model.SubgraphsLength() < 1:
        raise TfliteImportError(f"{source}: the model has no subgraph")
    graph = model.Subgraphs(0)
    buffers = [_buffer(model, i, data, source) for i in range(model.BuffersLength())]
    tensors = tuple(_tensor(graph.Tensors(i), i, buffers, source) for i in range(graph.TensorsLength()))
    codes = [_opcode(model.OperatorCodes(i)) for i in range(model.OperatorCodesLength())]
    operators = []
    for i in range(graph.OperatorsLength()):
        op = graph.Operators(i)
        code = op.OpcodeIndex()
        if code >= len(codes):
            raise TfliteImportError(f"{source}: operator {i} names operator code {code} of {len(codes)}")
        name, version_ = codes[code]
        ins, outs = _ints(op.InputsAsNumpy()), _ints(op.OutputsAsNumpy())
        for t in ins + outs:
            if t >= len(tensors) or t < -1:
                raise TfliteImportError(f"{source}: operator {i} ({name}) names tensor {t} of {len(tensors)}")
        operators.append(TfOperator(i, name, version_, ins, outs, _options(op)))
    inputs, outputs = _ints(graph.InputsAsNumpy()), _ints(graph.OutputsAsNumpy())
    for t in inputs + outputs:
        if not 0 <= t < len(tensors):
            raise TfliteImportError(f"{source}: the subgraph's inputs/outputs name tensor {t} of {len(tensors)}")
    description = (model.Description() or b"").decode("utf-8", "replace")
    return TfGraph(source, tensors, tuple(operators), inputs, outputs, model.SubgraphsLength(), description)


def _ints(values: Any) -> tuple[int, ...]:
    # The generated code returns 0 for an absent vector.
    return () if isinstance(values, int) else tuple(int(v) for v in values)


def _buffer(model: Any, index: int, data: bytes, source: str) -> bytes:
    buf = model.Buffers(index)
    offset, size = buf.Offset(), buf.Size()
    if offset > 1:  # models over 2 GB keep buffers after the flatbuffer, addressed from the file's start
        if offset + size > len(data):
            raise TfliteImportError(
                f"{source}: truncated: buffer {index} lies at bytes {offset}..{offset + size} of {len(data)}"
            )
        return data[offset : offset + size]
    if buf.DataIsNone():
        return b""
    arr = buf.DataAsNumpy()
    return b"" if isinstance(arr, int) else arr.tobytes()


def _opcode(code: Any) -> tuple[str, int]:
    builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
    if builtin == tflite.BuiltinOperator.CUSTOM:
        custom = (code.CustomCode() or b"").decode("utf-8", "replace")
        return f"CUSTOM:{custom}", code.Version()
    return BUILTIN_NAME.get(builtin, f"BUILTIN_{builtin}"), code.Version()


def _options(op: Any) -> Any:
    kind = op.BuiltinOptionsType()
    if kind == 0:
        return None
    table = op.BuiltinOptions()
    cls = getattr(tflite, _OPTION_CLASS.get(kind, ""), None)
    if table is None or cls is None:
        return None
    options = cls()
    options.Init(table.Bytes, table.Pos)
    return options


def _quantization(t: Any) -> Quantization | None:
    q = t.Quantization()
    if q is None or q.ScaleLength() == 0:
        return None
    scales = tuple(float(s) for s in q.ScaleAsNumpy())
    zps = tuple(int(z) for z in q.ZeroPointAsNumpy()) if q.ZeroPointLength() else (0,) * len(scales)
    return Quantization(scales, zps, int(q.QuantizedDimension()))


#: The most bytes one tensor may span: an NNAPI DataLocation's length is a uint32.
MAX_TENSOR_BYTES = (1 << 32) - 1
_BYTE = np.dtype("u1")


def _check_shape(shape: tuple[int, ...], itemsize: int, where: str) -> None:
    """TfliteImportError for a negative or zero dimension (NNAPI reads 0 as "unknown", so a
    zero-size tensor cannot be expressed) or a tensor beyond :data:`MAX_TENSOR_BYTES`."""
    for d, n in enumerate(shape):
        if n <= 0:
            raise TfliteImportError(
                f"{where} has dimension {d} of {n}: dimensions must be positive"
                + (" (NNAPI reads 0 as unknown)" if n == 0 else "")
            )
    nbytes = math.prod(shape) * itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise TfliteImportError(
            f"{where} of shape {list(shape)} spans {nbytes:,} bytes, beyond the {MAX_TENSOR_BYTES:,} "
            "an NNAPI operand can hold"
        )


def _tensor(t: Any, index: int, buffers: list[bytes], source: str) -> TfTensor:
    name = (t.Name() or b"").decode("utf-8", "replace")
    shape = _ints(t.ShapeAsNumpy())
    kind = t.Type()
    _check_shape(shape, NUMPY_DTYPE.get(kind, _BYTE).itemsize, f"{source}: tensor {index} '{name}'")
    raw = buffers[t.Buffer()] if 0 <= t.Buffer() < len(buffers) else None
    if t.Buffer() >= len(buffers):
        raise TfliteImportError(f"{source}: tensor {index} '{name}' names buffer {t.Buffer()} of {len(buffers)}")
    value: np.ndarray | None = None
    if raw:
        dtype = NUMPY_DTYPE.get(kind)
        if dtype is None:
            raise TfliteImportError(
                f"{source}: tensor {index} '{name}' is a constant of type {TYPE_NAME.get(kind, kind)}"
            )
        if len(raw) % dtype.itemsize:
            raise TfliteImportError(
                f"{source}: buffer of tensor {index} '{name}' holds {len(raw)} bytes, not whole {dtype}"
            )
        flat = np.frombuffer(raw, dtype)
        sparsity = t.Sparsity()
        if sparsity is not None:
            value = densify(flat, shape, sparsity, f"{source}: tensor {index} '{name}'")
        else:
            if flat.size != int(np.prod(shape, dtype=np.int64)):
                raise TfliteImportError(
                    f"{source}: tensor {index} '{name}' of shape {list(shape)} needs {int(np.prod(shape))} values, "
                    f"its buffer holds {flat.size} (truncated or corrupt)"
                )
            value = flat.reshape(shape)
    return TfTensor(index, name, shape, kind, value, _quantization(t), bool(t.IsVariable()))

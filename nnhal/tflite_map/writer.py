"""A TFLite flatbuffer from tensors and builtin operators, with the ``tflite`` schema package's
generated builder functions (``<Table>Start`` / ``<Table>Add<Field>`` / ``<Table>End``).

``FlatModel`` collects tensors (shape, type, optional constant data, optional per-tensor or
per-channel quantization) and operators (builtin name, tensor indexes, an options table and
its fields), and ``finish`` serializes one subgraph. Buffer 0 is the empty sentinel, as
TFLite expects; each constant has its own buffer. Not thread-safe (one model per builder).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
import tflite

#: Schema version of the files written here.
SCHEMA_VERSION = 3


@dataclass(frozen=True)
class Quant:
    scales: tuple[float, ...]
    zero_points: tuple[int, ...]
    axis: int = 0


@dataclass(frozen=True)
class FlatTensor:
    shape: tuple[int, ...]
    type: int  # tflite.TensorType
    data: bytes | None = None
    quant: Quant | None = None
    name: str = ""


@dataclass(frozen=True)
class FlatOperator:
    builtin: str  # tflite.BuiltinOperator name
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: str = ""  # tflite.BuiltinOptions table name ("" for none)
    fields: dict[str, Any] = field(default_factory=dict)


class FlatModel:
    def __init__(self) -> None:
        self.tensors: list[FlatTensor] = []
        self.operators: list[FlatOperator] = []
        self.inputs: list[int] = []
        self.outputs: list[int] = []

    def tensor(self, t: FlatTensor) -> int:
        self.tensors.append(t)
        return len(self.tensors) - 1

    def operator(self, op: FlatOperator) -> None:
        self.operators.append(op)

    def finish(self) -> bytes:
        b = flatbuffers.Builder(1 << 16)
        buffers = [_buffer(b, None)]
        buffer_of: dict[int, int] = {}
        for i, t in enumerate(self.tensors):
            if t.data is not None:
                buffer_of[i] = len(buffers)
                buffers.append(_buffer(b, t.data))
        tensors = [_tensor(b, t, buffer_of.get(i, 0)) for i, t in enumerate(self.tensors)]
        codes: dict[str, int] = {}
        operators = []
        for op in self.operators:
            code = codes.setdefault(op.builtin, len(codes))
            operators.append(_operator(b, op, code))
        op_codes = [_opcode(b, name) for name in codes]
        subgraph_fields = (
            ("Tensors", _offsets(b, tensors, tflite.SubGraphStartTensorsVector)),
            ("Operators", _offsets(b, operators, tflite.SubGraphStartOperatorsVector)),
            ("Inputs", _ints(b, self.inputs, tflite.SubGraphStartInputsVector)),
            ("Outputs", _ints(b, self.outputs, tflite.SubGraphStartOutputsVector)),
        )
        subgraph = _table(b, "SubGraph", dict(subgraph_fields))
        model_fields = {
            "Version": SCHEMA_VERSION,
            "OperatorCodes": _offsets(b, op_codes, tflite.ModelStartOperatorCodesVector),
            "Subgraphs": _offsets(b, [subgraph], tflite.ModelStartSubgraphsVector),
            "Buffers": _offsets(b, buffers, tflite.ModelStartBuffersVector),
        }
        b.Finish(_table(b, "Model", model_fields), file_identifier=b"TFL3")
        return bytes(b.Output())


def _table(b: flatbuffers.Builder, name: str, fields: dict[str, Any]) -> int:
    """Table ``name`` with ``fields`` (already built offsets or scalars), by the generated functions."""
    getattr(tflite, f"{name}Start")(b)
    for key, value in fields.items():
        getattr(tflite, f"{name}Add{key}")(b, value)
    return int(getattr(tflite, f"{name}End")(b))


def _ints(b: flatbuffers.Builder, values: Sequence[int], start: Any) -> int:
    start(b, len(values))
    for v in reversed(values):
        b.PrependInt32(int(v))
    return int(b.EndVector())


def _offsets(b: flatbuffers.Builder, offsets: Sequence[int], start: Any) -> int:
    start(b, len(offsets))
    for o in reversed(offsets):
        b.PrependUOffsetTRelative(o)
    return int(b.EndVector())


def _buffer(b: flatbuffers.Builder, data: bytes | None) -> int:
    if data is None:
        return _table(b, "Buffer", {})
    # CreateNumpyVector's bytes, aligned to 16 so that kernels may read constants in place.
    n = len(data)
    b.StartVector(1, n, 16)
    b.head = b.head - n
    b.Bytes[b.head : b.head + n] = data
    b.vectorNumElems = n
    raw = b.EndVector()
    return _table(b, "Buffer", {"Data": raw})


def _tensor(b: flatbuffers.Builder, t: FlatTensor, buffer: int) -> int:
    fields: dict[str, Any] = {
        "Shape": _ints(b, t.shape, tflite.TensorStartShapeVector),
        "Type": t.type,
        "Buffer": buffer,
        "Name": b.CreateString(t.name),
    }
    if t.quant is not None:
        q = t.quant
        quant_fields = {
            "Scale": b.CreateNumpyVector(np.asarray(q.scales, np.float32)),
            "ZeroPoint": b.CreateNumpyVector(np.asarray(q.zero_points, np.int64)),
            "QuantizedDimension": q.axis,
        }
        fields["Quantization"] = _table(b, "QuantizationParameters", quant_fields)
    return _table(b, "Tensor", fields)


def _operator(b: flatbuffers.Builder, op: FlatOperator, code: int) -> int:
    options = _table(b, op.options, op.fields) if op.options else None
    fields: dict[str, Any] = {
        "OpcodeIndex": code,
        "Inputs": _ints(b, op.inputs, tflite.OperatorStartInputsVector),
        "Outputs": _ints(b, op.outputs, tflite.OperatorStartOutputsVector),
    }
    if options is not None:
        fields["BuiltinOptionsType"] = getattr(tflite.BuiltinOptions, op.options)
        fields["BuiltinOptions"] = options
    return _table(b, "Operator", fields)


def _opcode(b: flatbuffers.Builder, name: str) -> int:
    builtin = getattr(tflite.BuiltinOperator, name)
    # Codes past 127 live in builtin_code; the deprecated byte holds the placeholder 127.
    fields = {"BuiltinCode": builtin, "DeprecatedBuiltinCode": min(builtin, 127), "Version": 1}
    return _table(b, "OperatorCode", fields)

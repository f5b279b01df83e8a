"""Writing small ``.tflite`` flatbuffers for the importer's tests, with the ``tflite`` package's
generated builder functions: tensors (constant data, quantization, sparsity), builtin or custom
operators with their options, the subgraph's inputs and outputs, and the schema version."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
import tflite

DTYPE_TO_TYPE = {
    "float32": tflite.TensorType.FLOAT32,
    "float16": tflite.TensorType.FLOAT16,
    "int32": tflite.TensorType.INT32,
    "uint8": tflite.TensorType.UINT8,
    "int8": tflite.TensorType.INT8,
    "int64": tflite.TensorType.INT64,
    "bool": tflite.TensorType.BOOL,
}


@dataclass
class Sparse:
    """A CSR sparsity for a rank-2 constant: dim 0 dense, dim 1 sparse (segments, indices)."""

    segments: list[int]
    indices: list[int]


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    data: np.ndarray | None = None
    scales: tuple[float, ...] = ()
    zero_points: tuple[int, ...] = ()
    axis: int = 0
    sparse: Sparse | None = None


@dataclass
class Op:
    name: str
    inputs: list[int]
    outputs: list[int]
    options: str = ""
    fields: dict[str, Any] = field(default_factory=dict)
    version: int = 1


def _ints(b: flatbuffers.Builder, values: list[int] | tuple[int, ...], start: Any) -> int:
    start(b, len(values))
    for v in reversed(values):
        b.PrependInt32(int(v))
    return int(b.EndVector())


def _quant(b: flatbuffers.Builder, t: Tensor) -> int:
    scales = b.CreateNumpyVector(np.asarray(t.scales, np.float32))
    zps = b.CreateNumpyVector(np.asarray(t.zero_points or (0,) * len(t.scales), np.int64))
    tflite.QuantizationParametersStart(b)
    tflite.QuantizationParametersAddScale(b, scales)
    tflite.QuantizationParametersAddZeroPoint(b, zps)
    tflite.QuantizationParametersAddQuantizedDimension(b, t.axis)
    return int(tflite.QuantizationParametersEnd(b))


def _int32_vector(b: flatbuffers.Builder, values: list[int]) -> int:
    data = b.CreateNumpyVector(np.asarray(values, np.int32))
    tflite.Int32VectorStart(b)
    tflite.Int32VectorAddValues(b, data)
    return int(tflite.Int32VectorEnd(b))


def _sparsity(b: flatbuffers.Builder, t: Tensor) -> int:
    assert t.sparse is not None
    segments, indices = _int32_vector(b, t.sparse.segments), _int32_vector(b, t.sparse.indices)
    tflite.DimensionMetadataStart(b)
    tflite.DimensionMetadataAddFormat(b, tflite.DimensionType.DENSE)
    tflite.DimensionMetadataAddDenseSize(b, t.shape[0])
    dense = tflite.DimensionMetadataEnd(b)
    tflite.DimensionMetadataStart(b)
    tflite.DimensionMetadataAddFormat(b, tflite.DimensionType.SPARSE_CSR)
    tflite.DimensionMetadataAddArraySegmentsType(b, tflite.SparseIndexVector.Int32Vector)
    tflite.DimensionMetadataAddArraySegments(b, segments)
    tflite.DimensionMetadataAddArrayIndicesType(b, tflite.SparseIndexVector.Int32Vector)
    tflite.DimensionMetadataAddArrayIndices(b, indices)
    sparse = tflite.DimensionMetadataEnd(b)
    order = _ints(b, [0, 1], tflite.SparsityParametersStartTraversalOrderVector)
    tflite.SparsityParametersStartDimMetadataVector(b, 2)
    b.PrependUOffsetTRelative(sparse)
    b.PrependUOffsetTRelative(dense)
    metas = b.EndVector()
    tflite.SparsityParametersStart(b)
    tflite.SparsityParametersAddTraversalOrder(b, order)
    tflite.SparsityParametersAddDimMetadata(b, metas)
    return int(tflite.SparsityParametersEnd(b))


def _options(b: flatbuffers.Builder, op: Op) -> int:
    getattr(tflite, f"{op.options}Start")(b)
    for name, value in op.fields.items():
        getattr(tflite, f"{op.options}Add{name}")(b, value)
    return int(getattr(tflite, f"{op.options}End")(b))


def write_model(tensors: list[Tensor], ops: list[Op], inputs: list[int], outputs: list[int], version: int = 3) -> bytes:
    b = flatbuffers.Builder(1024)
    # buffer 0 is the empty sentinel; each constant gets its own
    buffer_of: dict[int, int] = {}
    buffers = []
    tflite.BufferStart(b)
    buffers.append(tflite.BufferEnd(b))
    for i, t in enumerate(tensors):
        if t.data is None:
            continue
        raw = b.CreateNumpyVector(np.frombuffer(np.ascontiguousarray(t.data).tobytes(), np.uint8))
        tflite.BufferStart(b)
        tflite.BufferAddData(b, raw)
        buffer_of[i] = len(buffers)
        buffers.append(tflite.BufferEnd(b))
    tensor_offsets = []
    for i, t in enumerate(tensors):
        name = b.CreateString(t.name)
        shape = _ints(b, t.shape, tflite.TensorStartShapeVector)
        quant = _quant(b, t) if t.scales else None
        sparsity = _sparsity(b, t) if t.sparse else None
        tflite.TensorStart(b)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, DTYPE_TO_TYPE[t.dtype])
        tflite.TensorAddBuffer(b, buffer_of.get(i, 0))
        tflite.TensorAddName(b, name)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        if sparsity is not None:
            tflite.TensorAddSparsity(b, sparsity)
        tensor_offsets.append(tflite.TensorEnd(b))
    codes: list[str] = []
    op_offsets = []
    for op in ops:
        if op.name not in codes:
            codes.append(op.name)
        options = _options(b, op) if op.options else None
        ins = _ints(b, op.inputs, tflite.OperatorStartInputsVector)
        outs = _ints(b, op.outputs, tflite.OperatorStartOutputsVector)
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, codes.index(op.name))
        tflite.OperatorAddInputs(b, ins)
        tflite.OperatorAddOutputs(b, outs)
        if options is not None:
            tflite.OperatorAddBuiltinOptionsType(b, getattr(tflite.BuiltinOptions, op.options))
            tflite.OperatorAddBuiltinOptions(b, options)
        op_offsets.append(tflite.OperatorEnd(b))
    code_offsets = []
    for name in codes:
        custom = b.CreateString(name.split(":", 1)[1]) if name.startswith("CUSTOM:") else None
        builtin = tflite.BuiltinOperator.CUSTOM if custom else getattr(tflite.BuiltinOperator, name)
        tflite.OperatorCodeStart(b)
        tflite.OperatorCodeAddBuiltinCode(b, builtin)
        tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(builtin, 127))
        tflite.OperatorCodeAddVersion(b, 1)
        if custom is not None:
            tflite.OperatorCodeAddCustomCode(b, custom)
        code_offsets.append(tflite.OperatorCodeEnd(b))

    def vector(offsets: list[int], start: Any) -> int:
        start(b, len(offsets))
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return int(b.EndVector())

    tensors_vec = vector(tensor_offsets, tflite.SubGraphStartTensorsVector)
    ops_vec = vector(op_offsets, tflite.SubGraphStartOperatorsVector)
    ins_vec = _ints(b, inputs, tflite.SubGraphStartInputsVector)
    outs_vec = _ints(b, outputs, tflite.SubGraphStartOutputsVector)
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tensors_vec)
    tflite.SubGraphAddOperators(b, ops_vec)
    tflite.SubGraphAddInputs(b, ins_vec)
    tflite.SubGraphAddOutputs(b, outs_vec)
    subgraph = tflite.SubGraphEnd(b)
    subgraphs = vector([subgraph], tflite.ModelStartSubgraphsVector)
    codes_vec = vector(code_offsets, tflite.ModelStartOperatorCodesVector)
    buffers_vec = vector(buffers, tflite.ModelStartBuffersVector)
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, version)
    tflite.ModelAddOperatorCodes(b, codes_vec)
    tflite.ModelAddSubgraphs(b, subgraphs)
    tflite.ModelAddBuffers(b, buffers_vec)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())

"""An NDK-style model builder (ANeuralNetworksModel_*), producing a canonical Model.

Small constants go into operandValues (CONSTANT_COPY), larger ones into one
inline pool (CONSTANT_REFERENCE), as the NNAPI runtime does. Consumer counts
and lifetimes are derived at ``finish``.

    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [1, 28, 28, 1])
    w = b.constant(weights)                     # type inferred from the dtype
    y = b.op(O.CONV_2D, [x, w, bias, *b.ints(1, 1, 1, 1, 1, 1, 0)], T.TENSOR_FLOAT32, [1, 28, 28, 8])
    model = b.outputs(y).finish()

Vendor extensions: ``prefix = b.extension("com.example.nnhal")`` lists the extension in
the model's extensionNameToPrefix; its types are ``extension_type(prefix, number)`` (from
``nnhal.core.enums``), usable wherever a built-in OperandType / OperationType is. A constant
of an extension operand type this process has no table for is stored as the array's bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nnhal.core.enums import OperandLifeTime, OperandType, OperationType, is_extension_type
from nnhal.core.errors import InvalidArgument
from nnhal.core.operand_types import INFO, extension_info
from nnhal.core.types import (
    DataLocation,
    ExtensionNameAndPrefix,
    InlinePool,
    Model,
    Operand,
    Operation,
    Subgraph,
    SymmPerChannelQuantParams,
)

T = OperandType
L = OperandLifeTime

#: Values up to this size are copied into operandValues (ANEURALNETWORKS_MAX_SIZE_OF_IMMEDIATELY_COPIED_VALUES).
MAX_COPIED_BYTES = 128

_DTYPE_TO_TYPE: dict[str, OperandType] = {
    "float32": T.TENSOR_FLOAT32,
    "float16": T.TENSOR_FLOAT16,
    "int32": T.TENSOR_INT32,
    "bool": T.TENSOR_BOOL8,
}


@dataclass
class _Pending:
    type: OperandType
    dims: tuple[int, ...]
    scale: float
    zero_point: int
    channel_quant: SymmPerChannelQuantParams | None
    lifetime: OperandLifeTime = L.TEMPORARY_VARIABLE
    value: bytes | None = None
    subgraph: int | None = None


class ModelBuilder:
    def __init__(self) -> None:
        self._operands: list[_Pending] = []
        self._operations: list[Operation] = []
        self._inputs: list[int] = []
        self._outputs: list[int] = []
        self._relaxed = False
        self._referenced: list[ModelBuilder] = []
        self._extensions: dict[str, int] = {}

    # -- NDK-shaped primitives ------------------------------------------------
    def add_operand(
        self,
        type: OperandType,
        dims: Sequence[int] = (),
        scale: float = 0.0,
        zero_point: int = 0,
        channel_quant: SymmPerChannelQuantParams | None = None,
    ) -> int:
        self._operands.append(
            _Pending(OperandType(type), tuple(int(d) for d in dims), float(scale), int(zero_point), channel_quant)
        )
        return len(self._operands) - 1

    def set_operand_value(self, index: int, value: np.ndarray | float | int | bool | None) -> None:
        """Constant value of ``index``; None marks an omitted optional operand (NO_VALUE)."""
        op = self._operands[index]
        if value is None:
            op.lifetime = L.NO_VALUE
            return
        # An extension type this process has no table for: the extension defines the layout,
        # so the caller's array is taken as it is.
        info = None if is_extension_type(op.type) and extension_info(op.type) is None else INFO[op.type]
        arr = np.asarray(value) if info is None else np.asarray(value, dtype=info.dtype)
        is_tensor = arr.ndim > 0 if info is None else info.is_tensor
        if is_tensor and tuple(arr.shape) != op.dims:
            raise InvalidArgument(f"operand {index}: value shape {list(arr.shape)} != declared {list(op.dims)}")
        op.value = np.ascontiguousarray(arr).tobytes()
        op.lifetime = L.CONSTANT_COPY if len(op.value) <= MAX_COPIED_BYTES else L.CONSTANT_REFERENCE

    def set_operand_value_from_model(self, index: int, model: ModelBuilder) -> None:
        """A SUBGRAPH operand referring to ``model`` (a builder of the branch/body) for IF / WHILE."""
        op = self._operands[index]
        if op.type != T.SUBGRAPH:
            raise InvalidArgument(f"operand {index} must have type SUBGRAPH")
        if model._referenced:
            raise InvalidArgument("nested control flow: a referenced model may not reference others here")
        self._referenced.append(model)
        op.lifetime = L.SUBGRAPH
        op.subgraph = len(self._referenced) - 1

    def add_operation(self, type: OperationType, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self._operations.append(Operation(OperationType(type), tuple(inputs), tuple(outputs)))

    def identify_inputs_and_outputs(self, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self._inputs, self._outputs = list(inputs), list(outputs)

    def relax_computation_float32_to_float16(self, relax: bool = True) -> None:
        self._relaxed = relax

    def extension(self, name: str, prefix: int | None = None) -> int:
        """The model's prefix for vendor extension ``name``, listed in extensionNameToPrefix:
        ``prefix`` when given (any unused number in [1, 65535]: the model chooses), else the
        next from 1 in the order extensions are first named."""
        if name not in self._extensions:
            taken = set(self._extensions.values())
            if prefix is None:
                prefix = next(p for p in range(1, 1 << 16) if p not in taken)
            elif prefix in taken or not 1 <= prefix <= 0xFFFF:
                raise InvalidArgument(f"extension prefix {prefix} is taken or outside [1, 65535]")
            self._extensions[name] = prefix
        return self._extensions[name]

    # -- conveniences -----------------------------------------------------------
    def input(self, type: OperandType, dims: Sequence[int] = (), scale: float = 0.0, zero_point: int = 0) -> int:
        index = self.add_operand(type, dims, scale, zero_point)
        self._inputs.append(index)
        return index

    def constant(
        self,
        value: np.ndarray | Sequence[float],
        type: OperandType | None = None,
        scale: float = 0.0,
        zero_point: int = 0,
        channel_quant: SymmPerChannelQuantParams | None = None,
    ) -> int:
        arr = np.asarray(value)
        if type is None:
            if arr.dtype.name not in _DTYPE_TO_TYPE:
                raise InvalidArgument(f"cannot infer an operand type for dtype {arr.dtype}; pass type=")
            type = _DTYPE_TO_TYPE[arr.dtype.name]
        index = self.add_operand(type, arr.shape, scale, zero_point, channel_quant)
        self.set_operand_value(index, arr)
        return index

    def scalar(self, value: float | int | bool, type: OperandType) -> int:
        index = self.add_operand(type)
        self.set_operand_value(index, value)
        return index

    def int32(self, value: int) -> int:
        return self.scalar(value, T.INT32)

    def ints(self, *values: int) -> list[int]:
        return [self.int32(v) for v in values]

    def float32(self, value: float) -> int:
        return self.scalar(value, T.FLOAT32)

    def boolean(self, value: bool) -> int:
        return self.scalar(value, T.BOOL)

    def omitted(self, type: OperandType = T.TENSOR_FLOAT32) -> int:
        index = self.add_operand(type)
        self.set_operand_value(index, None)
        return index

    def op(
        self,
        type: OperationType,
        inputs: Sequence[int],
        out_type: OperandType,
        out_dims: Sequence[int] = (),
        scale: float = 0.0,
        zero_point: int = 0,
    ) -> int:
        """Add an operation with one new output operand; returns the output's index."""
        out = self.add_operand(out_type, out_dims, scale, zero_point)
        self.add_operation(type, inputs, [out])
        return out

    def outputs(self, *indexes: int) -> ModelBuilder:
        self._outputs.extend(indexes)
        return self

    # -- finish -------------------------------------------------------------------
    def finish(self) -> Model:
        main, values, pool = self._build(self, 0, bytearray(), bytearray())
        referenced: list[Subgraph] = []
        for sub in self._referenced:
            sg, values, pool = self._build(sub, 0, values, pool)
            referenced.append(sg)
        pools = (InlinePool(bytes(pool), len(pool)),) if pool else ()
        names = tuple(ExtensionNameAndPrefix(name, prefix) for name, prefix in self._extensions.items())
        return Model(main, tuple(referenced), bytes(values), pools, self._relaxed, names)

    @staticmethod
    def _build(
        b: ModelBuilder, _unused: int, values: bytearray, pool: bytearray
    ) -> tuple[Subgraph, bytearray, bytearray]:
        consumers = [0] * len(b._operands)
        for operation in b._operations:
            for i in operation.inputs:
                consumers[i] += 1
        operands: list[Operand] = []
        inputs, outputs = set(b._inputs), set(b._outputs)
        for i, p in enumerate(b._operands):
            lifetime = p.lifetime
            location = DataLocation()
            if i in inputs:
                lifetime = L.SUBGRAPH_INPUT
            elif i in outputs:
                lifetime = L.SUBGRAPH_OUTPUT
            elif p.value is not None:
                target = values if lifetime == L.CONSTANT_COPY else pool
                offset = (len(target) + 3) & ~3
                target.extend(b"\0" * (offset - len(target)))
                target.extend(p.value)
                location = DataLocation(0, offset, len(p.value))
            elif lifetime == L.SUBGRAPH:
                location = DataLocation(0, p.subgraph or 0, 0)
            operands.append(
                Operand(p.type, p.dims, consumers[i], p.scale, p.zero_point, lifetime, location, p.channel_quant)
            )
        sg = Subgraph(tuple(operands), tuple(b._operations), tuple(b._inputs), tuple(b._outputs))
        return sg, values, pool

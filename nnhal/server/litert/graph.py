"""The TFLite model being written for one NNAPI main subgraph (``TfliteGraph``): its tensors,
buffers and operators, one TFLite tensor per NNAPI operand a converted operation touches,
of the same shape, type and quantization (``tflite_map.tables.TENSOR_TYPE``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nnhal.core.enums import OperandLifeTime, OperandType as T
from nnhal.core.operand_types import INFO
from nnhal.core.types import Model, Operand
from nnhal.server.compiling import Unsupported
from nnhal.server.executor.constants import Buffer, constant_value
from nnhal.tflite_map.tables import ACTIVATION, TENSOR_TYPE
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
        t = self.flat.tensor(FlatTensor(self.dims(index), tensor_type(op), data, quant_of(op), f"t{index}"))
        self.tensor_of[index] = t
        return t

    def constant(self, value: np.ndarray, tensor_type: int, quant: Quant | None = None) -> int:
        shape = tuple(value.shape) or (1,)
        return self.flat.tensor(FlatTensor(shape, tensor_type, np.ascontiguousarray(value).tobytes(), quant))

    def temporary(self, like: int, shape: tuple[int, ...]) -> int:
        op = self.operand(like)
        return self.flat.tensor(FlatTensor(shape, tensor_type(op), None, quant_of(op)))

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


def tensor_type(op: Operand) -> int:
    if op.type not in TENSOR_TYPE or op.type == T.TENSOR_FLOAT16:
        raise Unsupported(f"{op.type.name} tensors are not computed by this device")
    if op.type == T.TENSOR_QUANT16_SYMM and op.zero_point != 0:
        raise Unsupported("TENSOR_QUANT16_SYMM with a zero point")
    return TENSOR_TYPE[op.type]


def quant_of(op: Operand) -> Quant | None:
    if op.type == T.TENSOR_QUANT8_SYMM_PER_CHANNEL:
        assert op.channel_quant is not None
        q = op.channel_quant
        return Quant(tuple(q.scales), (0,) * len(q.scales), q.channel_dim)
    if op.type in _QUANT or (op.type == T.TENSOR_INT32 and op.scale):
        return Quant((op.scale,), (op.zero_point,))
    return None

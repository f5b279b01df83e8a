"""A small model builder for in-process executor tests: operands, constants, operations.

``ModelBuilder`` hands out operand indexes; ``build`` fixes the lifetimes'
bookkeeping (consumers, input and output lists) and returns a canonical Model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from nnhal.core.enums import OperandLifeTime, OperandType, OperationType
from nnhal.core.operand_types import DTYPE
from nnhal.core.types import DataLocation, Model, Operand, Operation, Subgraph

L = OperandLifeTime


@dataclass
class ModelBuilder:
    operands: list[Operand] = field(default_factory=list)
    operations: list[Operation] = field(default_factory=list)
    values: bytearray = field(default_factory=bytearray)

    def _add(self, operand: Operand) -> int:
        self.operands.append(operand)
        return len(self.operands) - 1

    def input(self, t: OperandType, dims: Sequence[int] = (), scale: float = 0.0, zero_point: int = 0) -> int:
        return self._add(Operand(t, tuple(dims), scale=scale, zero_point=zero_point, lifetime=L.SUBGRAPH_INPUT))

    def output(self, t: OperandType, dims: Sequence[int] = (), scale: float = 0.0, zero_point: int = 0) -> int:
        return self._add(Operand(t, tuple(dims), scale=scale, zero_point=zero_point, lifetime=L.SUBGRAPH_OUTPUT))

    def temp(self, t: OperandType, dims: Sequence[int] = (), scale: float = 0.0, zero_point: int = 0) -> int:
        return self._add(Operand(t, tuple(dims), scale=scale, zero_point=zero_point))

    def const(self, t: OperandType, value: object, dims: Sequence[int] | None = None) -> int:
        arr = np.asarray(value, dtype=DTYPE[t])
        raw = arr.tobytes()
        while len(self.values) % 4:
            self.values.append(0)
        loc = DataLocation(0, len(self.values), len(raw))
        self.values += raw
        shape = tuple(arr.shape) if dims is None else tuple(dims)
        return self._add(Operand(t, shape, lifetime=L.CONSTANT_COPY, location=loc))

    def op(self, t: OperationType, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self.operations.append(Operation(t, tuple(inputs), tuple(outputs)))

    def build(self) -> Model:
        consumers = [0] * len(self.operands)
        for operation in self.operations:
            for i in operation.inputs:
                consumers[i] += 1
        operands = tuple(
            Operand(o.type, o.dimensions, consumers[k], o.scale, o.zero_point, o.lifetime, o.location, o.channel_quant)
            for k, o in enumerate(self.operands)
        )
        ins = tuple(k for k, o in enumerate(operands) if o.lifetime == L.SUBGRAPH_INPUT)
        outs = tuple(k for k, o in enumerate(operands) if o.lifetime == L.SUBGRAPH_OUTPUT)
        return Model(Subgraph(operands, tuple(self.operations), ins, outs), operand_values=bytes(self.values))

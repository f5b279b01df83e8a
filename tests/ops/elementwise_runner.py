"""Run one registered operation directly on numpy values (validation + execution).

Used by the element-wise / activation / unary / comparison / logical / quantize tests.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import nnhal.server.executor.ops  # noqa: F401  (registers every operation)
from nnhal.core.enums import HalVersion, OperandLifeTime, OperandType, OperationType
from nnhal.core.operand_types import DTYPE, INFO
from nnhal.core.types import Operand, SymmPerChannelQuantParams
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.executor.registry import lookup

T = OperandType


def tensor(
    t: OperandType,
    dims: Sequence[int] = (),
    scale: float = 0.0,
    zero_point: int = 0,
    channel_quant: SymmPerChannelQuantParams | None = None,
) -> Operand:
    return Operand(type=t, dimensions=tuple(dims), scale=scale, zero_point=zero_point, channel_quant=channel_quant)


def scalar(t: OperandType) -> Operand:
    return Operand(type=t, lifetime=OperandLifeTime.CONSTANT_COPY)


def validate(op: OperationType, ins: Sequence[tuple[Operand, object]], outs: Sequence[Operand]) -> HalVersion:
    spec = lookup(op)
    assert spec is not None, f"{op.name} is not registered"
    values = [None if v is None else np.asarray(v, dtype=DTYPE[o.type]) for o, v in ins]
    ctx = ValidationContext(op, [o for o, _ in ins], outs, lambda i: values[i], relaxed=False)
    return spec.validate(ctx)


def run(op: OperationType, ins: Sequence[tuple[Operand, object]], outs: Sequence[Operand]) -> list[np.ndarray]:
    """Validate, then execute; inputs are (operand, value) pairs shaped by the operand dims."""
    validate(op, ins, outs)
    spec = lookup(op)
    assert spec is not None
    values: list[np.ndarray | None] = []
    for operand, value in ins:
        if value is None:
            values.append(None)
            continue
        arr = np.asarray(value, dtype=DTYPE[operand.type])
        if INFO[operand.type].is_tensor and operand.dimensions:
            arr = arr.reshape(operand.dimensions)
        values.append(arr)
    ctx = ExecutionContext(op, values, [o for o, _ in ins], outs, None, False, ExecutionControl())
    spec.execute(ctx)
    assert all(o is not None for o in ctx.outputs)
    return [o for o in ctx.outputs if o is not None]

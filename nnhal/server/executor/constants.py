"""The bytes behind a model's constants as numpy values: what the executor, the validator
and the compiling devices read a CONSTANT_COPY or CONSTANT_REFERENCE operand as.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nnhal.core.enums import OperandLifeTime
from nnhal.core.operand_types import DTYPE, INFO
from nnhal.core.types import Model, Operand

#: The bytes of a model's pool or of a constant: the kinds the server holds them as.
Buffer = bytes | bytearray | memoryview


def operand_value(operand: Operand, raw: Buffer) -> np.ndarray:
    """A read-only numpy view of a constant's bytes with the operand's dtype and dims."""
    dtype = DTYPE[operand.type]
    arr = np.frombuffer(raw, dtype=dtype)
    if INFO[operand.type].is_tensor:
        return arr.reshape(operand.dimensions)
    return arr.reshape(())


def constant_value(model: Model, pools: Sequence[Buffer], operand: Operand) -> np.ndarray | None:
    """The value of a CONSTANT_COPY / CONSTANT_REFERENCE operand (a read-only view), else None."""
    loc = operand.location
    if operand.lifetime == OperandLifeTime.CONSTANT_COPY:
        return operand_value(operand, memoryview(model.operand_values)[loc.offset : loc.offset + loc.length])
    if operand.lifetime == OperandLifeTime.CONSTANT_REFERENCE:
        return operand_value(operand, memoryview(pools[loc.pool_index])[loc.offset : loc.offset + loc.length])
    return None

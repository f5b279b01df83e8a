"""Element-wise unary math: ABS, EXP, LOG, SQRT, RSQRT, SIN, NEG, FLOOR.

types.hal 1.3: every one takes TENSOR_FLOAT16 and TENSOR_FLOAT32; ABS and NEG
also TENSOR_INT32 (ABS since 1.3). FLOOR is the 1.0 operation (rank <= 4,
float16 since 1.2); the others appeared in 1.2. No quantized types.
Float16 is evaluated in float32 and narrowed on output, as the reference does.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops.common import FLOAT_TYPES, T, to_compute, version_for_types
from nnhal.server.executor.registry import register

Op = OperationType
INPUT = 0
OUTPUT = 0


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return np.asarray(np.float32(1.0) / np.sqrt(x))


_FUNC: dict[OperationType, Callable[[np.ndarray], np.ndarray]] = {
    Op.ABS: np.abs,
    Op.EXP: np.exp,
    Op.LOG: np.log,
    Op.SQRT: np.sqrt,
    Op.RSQRT: _rsqrt,
    Op.SIN: np.sin,
    Op.NEG: np.negative,
    Op.FLOOR: np.floor,
}

_TYPES: dict[OperationType, tuple[T, ...]] = {
    op: (*FLOAT_TYPES, T.TENSOR_INT32) if op in (Op.ABS, Op.NEG) else FLOAT_TYPES for op in _FUNC
}


def validate_unary(v: ValidationContext) -> HalVersion:
    v.expect_counts(1, 1)
    t = v.expect_input_type_in(INPUT, _TYPES[v.op_type])
    v.expect_types([t], [t])
    if v.op_type == Op.FLOOR:
        v.expect_rank(INPUT, 4, at_most=True)
        return version_for_types([t])
    if v.op_type == Op.ABS and t == T.TENSOR_INT32:
        return HalVersion.V1_3
    return HalVersion.V1_2


def execute_unary(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    # Out-of-domain inputs give NaN/Inf (as in C); int32 ABS/NEG wrap at INT32_MIN.
    with np.errstate(all="ignore"):
        ctx.set_output(OUTPUT, _FUNC[ctx.op_type](to_compute(x)))


for _op in _FUNC:
    register(_op, validate=validate_unary, execute=execute_unary)

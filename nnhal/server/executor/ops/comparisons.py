"""Broadcasting comparisons: EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL.

Inputs of one type (BOOL8, FLOAT16, FLOAT32, INT32, QUANT8_ASYMM, and
QUANT8_ASYMM_SIGNED since 1.3); the output is TENSOR_BOOL8. Quantized inputs may
have different scales: both are dequantized to float32 first, as the reference
does, so the comparison is of real values.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    QUANT8_TYPES,
    T,
    broadcast_shape,
    dequantize,
    version_for_types,
)
from nnhal.server.executor.registry import register

Op = OperationType
INPUT0 = 0
INPUT1 = 1
OUTPUT = 0

_COMPARE: dict[OperationType, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    Op.EQUAL: np.equal,
    Op.NOT_EQUAL: np.not_equal,
    Op.GREATER: np.greater,
    Op.GREATER_EQUAL: np.greater_equal,
    Op.LESS: np.less,
    Op.LESS_EQUAL: np.less_equal,
}
_TYPES = (T.TENSOR_BOOL8, *FLOAT_TYPES, T.TENSOR_INT32, *QUANT8_TYPES)


def validate_comparison(v: ValidationContext) -> HalVersion:
    v.expect_counts(2, 1)
    t = v.expect_input_type_in(INPUT0, _TYPES)
    v.expect_types([t, t], [T.TENSOR_BOOL8])
    return version_for_types([t], HalVersion.V1_2)


def _operand(ctx: ExecutionContext, i: int) -> np.ndarray:
    x = ctx.tensor(i)
    t = ctx.in_type(i)
    if t in QUANT8_TYPES:
        return dequantize(x, ctx.scale(i), ctx.zero_point(i))
    if t == T.TENSOR_BOOL8:
        # Compare the stored bytes, whatever non-zero value marks "true".
        return x.view(np.uint8)
    return x


def execute_comparison(ctx: ExecutionContext) -> None:
    a, b = _operand(ctx, INPUT0), _operand(ctx, INPUT1)
    broadcast_shape(ctx.op_type, a.shape, b.shape)
    ctx.set_output(OUTPUT, _COMPARE[ctx.op_type](a, b))


for _op in _COMPARE:
    register(_op, validate=validate_comparison, execute=execute_comparison)

"""Boolean operations and selection: LOGICAL_AND, LOGICAL_OR, LOGICAL_NOT, SELECT.

LOGICAL_AND/OR broadcast two TENSOR_BOOL8 inputs; LOGICAL_NOT maps one.
SELECT picks from two same-shaped tensors by a TENSOR_BOOL8 mask of that shape;
quantized inputs are requantized to the output's scale and zero point first.
BOOL8 bytes count as true when non-zero.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    QUANT8_TYPES,
    T,
    broadcast_shape,
    requantize_to,
    version_for_types,
)
from nnhal.server.executor.registry import register

Op = OperationType
OUTPUT = 0
B8 = T.TENSOR_BOOL8


def _truth(x: np.ndarray) -> np.ndarray:
    return np.asarray(x.view(np.uint8) != 0)


# -- LOGICAL_AND / LOGICAL_OR / LOGICAL_NOT ------------------------------------------------
def validate_logical_binary(v: ValidationContext) -> HalVersion:
    v.expect_counts(2, 1)
    v.expect_input_type_in(0, (B8,))
    v.expect_types([B8, B8], [B8])
    return HalVersion.V1_2


def execute_logical_binary(ctx: ExecutionContext) -> None:
    a, b = _truth(ctx.tensor(0)), _truth(ctx.tensor(1))
    broadcast_shape(ctx.op_type, a.shape, b.shape)
    func = np.logical_and if ctx.op_type == Op.LOGICAL_AND else np.logical_or
    ctx.set_output(OUTPUT, func(a, b))


def validate_logical_not(v: ValidationContext) -> HalVersion:
    v.expect_counts(1, 1)
    v.expect_input_type_in(0, (B8,))
    v.expect_types([B8], [B8])
    return HalVersion.V1_2


def execute_logical_not(ctx: ExecutionContext) -> None:
    ctx.set_output(OUTPUT, ~_truth(ctx.tensor(0)))


# -- SELECT ------------------------------------------------------------------------
CONDITION, INPUT1, INPUT2 = 0, 1, 2
_SELECT_TYPES = (*FLOAT_TYPES, T.TENSOR_INT32, *QUANT8_TYPES)


def validate_select(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 1)
    t = v.expect_input_type_in(INPUT1, _SELECT_TYPES)
    v.expect_types([B8, t, t], [t])
    return version_for_types([t], HalVersion.V1_2)


def execute_select(ctx: ExecutionContext) -> None:
    cond, a, b = ctx.tensor(CONDITION), ctx.tensor(INPUT1), ctx.tensor(INPUT2)
    if cond.shape != a.shape or a.shape != b.shape:
        ctx.fail(f"condition {list(cond.shape)} and inputs {list(a.shape)}, {list(b.shape)} must have the same shape")
    t = ctx.in_type(INPUT1)
    if t in QUANT8_TYPES:
        so, zo = ctx.out_scale(OUTPUT), ctx.out_zero_point(OUTPUT)
        a = requantize_to(a, ctx.scale(INPUT1), ctx.zero_point(INPUT1), so, zo, t)
        b = requantize_to(b, ctx.scale(INPUT2), ctx.zero_point(INPUT2), so, zo, t)
    ctx.set_output(OUTPUT, np.where(_truth(cond), a, b))


register(Op.LOGICAL_AND, validate=validate_logical_binary, execute=execute_logical_binary)
register(Op.LOGICAL_OR, validate=validate_logical_binary, execute=execute_logical_binary)
register(Op.LOGICAL_NOT, validate=validate_logical_not, execute=execute_logical_not)
register(Op.SELECT, validate=validate_select, execute=execute_select)

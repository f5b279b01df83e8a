"""Operand checks shared by several families.

At validation (operand metadata and constant values, through a
``ValidationContext``): equal quantization, 1-D operands, axes against a
declared rank, ranks of optional operands. At execution (runtime values,
through an ``ExecutionContext``, failing with the family's status): axes and
1-D integer vectors.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import OperandLifeTime
from nnhal.core.types import Operand
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops.common import QUANT8_TYPES


# -- validation -----------------------------------------------------------------
def same_quant(a: Operand, b: Operand) -> bool:
    """Equal scale (as float32, the wire's precision) and zero point."""
    return bool(np.float32(a.scale) == np.float32(b.scale)) and a.zero_point == b.zero_point


def require_same_quant(v: ValidationContext, out: int = 0, inp: int = 0) -> None:
    """Quantized outputs of data-movement ops keep the input's scale and zero point."""
    if v.output_type(out) not in QUANT8_TYPES:
        return
    v.require(
        same_quant(v.inputs[inp], v.outputs[out]), f"output {out} must have the scale and zero point of input {inp}"
    )


def expect_vector_input(v: ValidationContext, i: int) -> None:
    v.require(v.input_rank(i) in (None, 1), f"input {i} must be a 1-D tensor")


def resolve_axis(axis: int, rank: int) -> int | None:
    """axis in [-rank, rank) made non-negative, or None when out of range."""
    if -rank <= axis < rank:
        return axis + rank if axis < 0 else axis
    return None


def axis_at_validation(v: ValidationContext, axis_input: int, rank: int | None, extra: int = 0) -> None:
    """Check a constant axis scalar against a known rank (``extra`` widens the range)."""
    axis = v.constant_scalar(axis_input)
    if axis is None or rank is None:
        return
    v.require(resolve_axis(axis, rank + extra) is not None, f"axis {axis} is out of range for rank {rank}")


def known_dims(v: ValidationContext, i: int) -> tuple[int, ...] | None:
    """Declared dims of input ``i`` when fully specified (no zero / unknown dims)."""
    if v.is_omitted(i):
        return None
    dims = v.input_dims(i)
    if not dims or 0 in dims:
        return None
    return dims


def presence(v: ValidationContext, i: int) -> bool | None:
    """Whether optional input ``i`` has a value; None when only the request can tell."""
    if v.is_omitted(i):
        return False
    if v.inputs[i].lifetime == OperandLifeTime.SUBGRAPH_INPUT:
        return None
    return True


def check_known_rank(v: ValidationContext, i: int, rank: int) -> None:
    """Input ``i``, when present with fully specified dims, has ``rank``."""
    dims = known_dims(v, i)
    if dims is not None:
        v.require(len(dims) == rank, f"input {i} must have rank {rank}, got {len(dims)}")


# -- execution ----------------------------------------------------------------------
def axis_at_execution(ctx: ExecutionContext, axis: int, rank: int) -> int:
    resolved = resolve_axis(axis, rank)
    if resolved is None:
        ctx.fail(f"axis {axis} is out of range for rank {rank}")
    return resolved


def input_axis(ctx: ExecutionContext, x: np.ndarray, axis_input: int) -> int:
    """Scalar input ``axis_input`` as a non-negative axis of ``x``, which must have rank >= 1."""
    if x.ndim == 0:
        ctx.fail("input must have rank >= 1")
    return axis_at_execution(ctx, ctx.scalar(axis_input), x.ndim)


def int_vector(ctx: ExecutionContext, i: int, length: int | None = None, what: str = "") -> list[int]:
    """A 1-D int32 input as a list, checking its length when given."""
    arr = ctx.tensor(i)
    name = what or f"input {i}"
    if arr.ndim != 1:
        ctx.fail(f"{name} must be 1-D, got shape {list(arr.shape)}")
    if length is not None and arr.shape[0] != length:
        ctx.fail(f"{name} must have {length} elements, got {arr.shape[0]}")
    return [int(x) for x in arr]

"""Element-wise unary math: ABS, EXP, LOG, SQRT, RSQRT, SIN, NEG, FLOOR.

types.hal 1.3: every one takes TENSOR_FLOAT16 and TENSOR_FLOAT32; ABS and NEG
also TENSOR_INT32 (ABS since 1.3). FLOOR is the 1.0 operation (rank <= 4,
float16 since 1.2); the others appeared in 1.2. Float16 is evaluated in float32 and
narrowed on output, as the reference does.

RSQRT takes TENSOR_QUANT8_ASYMM and _SIGNED since NNAPI feature level 7 (AIDL V3), with
its own output scale and zero point: each value is dequantized, mapped and quantized
again in float32 (round half away from zero, saturated; NaN saturates high, as the
reference's min/max clamp leaves it).
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
    dequantize,
    qrange,
    round_half_away,
    to_compute,
    version_for_types,
)
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
_TYPES[Op.RSQRT] = (*FLOAT_TYPES, *QUANT8_TYPES)


def validate_unary(v: ValidationContext) -> HalVersion:
    v.expect_counts(1, 1)
    t = v.expect_input_type_in(INPUT, _TYPES[v.op_type])
    v.expect_types([t], [t])
    if v.op_type == Op.FLOOR:
        v.expect_rank(INPUT, 4, at_most=True)
        return version_for_types([t])
    if v.op_type == Op.ABS and t == T.TENSOR_INT32:
        return HalVersion.V1_3
    if t in QUANT8_TYPES:
        return HalVersion.AIDL_V3
    return HalVersion.V1_2


def _quantized(ctx: ExecutionContext, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        y = _FUNC[ctx.op_type](dequantize(x, ctx.scale(INPUT), ctx.zero_point(INPUT)))
        q = round_half_away(y / np.float32(ctx.out_scale(OUTPUT))) + np.float32(ctx.out_zero_point(OUTPUT))
    lo, hi = qrange(ctx.out_type(OUTPUT))
    return np.clip(np.nan_to_num(q, nan=hi), lo, hi)


def execute_unary(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    if ctx.in_type(INPUT) in QUANT8_TYPES:
        ctx.set_output(OUTPUT, _quantized(ctx, x))
        return
    # Out-of-domain inputs give NaN/Inf (as in C); int32 ABS/NEG wrap at INT32_MIN.
    with np.errstate(all="ignore"):
        ctx.set_output(OUTPUT, _FUNC[ctx.op_type](to_compute(x)))


for _op in _FUNC:
    register(_op, validate=validate_unary, execute=execute_unary)

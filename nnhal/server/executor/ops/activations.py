"""Activation operations: RELU, RELU1, RELU6, LOGISTIC, TANH, ELU, HARD_SWISH.

types.hal: RELU/RELU1/RELU6 take one tensor (any rank <= 4 before 1.3) and keep
the input's scale and zero point for quantized types.
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import FusedActivationFunc, HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops.common import (
    FLOAT_TYPES,
    QUANT8_TYPES,
    T,
    activation_range_quant,
    version_for_types,
)
from nnhal.server.executor.registry import register

INPUT = 0
OUTPUT = 0

_RELU_FUNC = {
    OperationType.RELU: FusedActivationFunc.RELU,
    OperationType.RELU1: FusedActivationFunc.RELU1,
    OperationType.RELU6: FusedActivationFunc.RELU6,
}
_RELU_BOUNDS = {
    FusedActivationFunc.RELU: (0.0, np.inf),
    FusedActivationFunc.RELU1: (-1.0, 1.0),
    FusedActivationFunc.RELU6: (0.0, 6.0),
}


def validate_relu(v: ValidationContext) -> HalVersion:
    v.expect_counts(1, 1)
    t = v.expect_input_type_in(INPUT, (*FLOAT_TYPES, *QUANT8_TYPES))
    v.expect_types([t], [t])
    rank = v.input_rank(INPUT)
    version = version_for_types([t])
    if rank is None or rank > 4:
        version = max(version, HalVersion.V1_2 if rank is None else HalVersion.V1_3)
    if t in QUANT8_TYPES:
        out = v.outputs[OUTPUT]
        inp = v.inputs[INPUT]
        v.require(
            out.scale == inp.scale and out.zero_point == inp.zero_point,
            "quantized output must have the input's scale and zero point",
        )
    return version


def execute_relu(ctx: ExecutionContext) -> None:
    x = ctx.tensor(INPUT)
    func = _RELU_FUNC[ctx.op_type]
    t = ctx.in_type(INPUT)
    if t in QUANT8_TYPES:
        lo, hi = activation_range_quant(func, ctx.scale(INPUT), ctx.zero_point(INPUT), t)
        ctx.set_output(OUTPUT, np.clip(x, lo, hi))
    else:
        lo_f, hi_f = _RELU_BOUNDS[func]
        ctx.set_output(OUTPUT, np.clip(x, lo_f, hi_f))


for _op in _RELU_FUNC:
    register(_op, validate=validate_relu, execute=execute_relu)

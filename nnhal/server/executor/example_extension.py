"""The example vendor extension ``com.example.nnhal`` (``nnhal serve --example-extension``).

Operand types:
  0 ``TENSOR_FLOAT64``: a tensor of IEEE binary64 values.
Operations:
  0 ``SCALED_ADD``: ``output = input0 + alpha * input1``, element-wise with numpy
    broadcasting. Inputs: 0 and 1 tensors of one type (TENSOR_FLOAT32, TENSOR_FLOAT16 or
    this extension's TENSOR_FLOAT64), 2 a FLOAT32 scalar alpha. Output 0: that type.

A model names the extension in ``extensionNameToPrefix`` with a prefix of its choosing
and uses ``prefix << 16 | number`` as the type (``nnhal.core.enums.extension_type``).
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import HalVersion, OperandType
from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.extensions import (
    ExtensionDefinition,
    ExtensionOperandType,
    ExtensionOperation,
    install,
    prefix_of,
)

NAME = "com.example.nnhal"
TENSOR_FLOAT64 = 0
SCALED_ADD = 0


def _float64_type() -> int:
    prefix = prefix_of(NAME)
    assert prefix is not None, "validated only once installed"
    return prefix << 16 | TENSOR_FLOAT64


def validate_scaled_add(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 1)
    t = v.input_type(0)
    allowed = (OperandType.TENSOR_FLOAT32, OperandType.TENSOR_FLOAT16, _float64_type())
    v.require(t in allowed, f"input 0 has unsupported type {t.name}")
    v.expect_types([t, t, OperandType.FLOAT32], [t])
    return HalVersion.V1_2


def execute_scaled_add(ctx: ExecutionContext) -> None:
    a, b = ctx.tensor(0), ctx.tensor(1)
    alpha = ctx.scalar(2)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        ctx.fail(f"shapes {list(a.shape)} and {list(b.shape)} cannot be broadcast")
    reserve_shape(shape, 8)
    # float64 stays float64; float16 is computed in float32 and narrowed by set_output.
    compute = np.dtype(np.float64) if a.dtype == np.float64 else np.dtype(np.float32)
    ctx.set_output(0, a.astype(compute) + np.asarray(alpha, compute) * b.astype(compute))


DEFINITION = ExtensionDefinition(
    NAME,
    operand_types=(ExtensionOperandType(TENSOR_FLOAT64, np.dtype("<f8"), True),),
    operations=(ExtensionOperation(SCALED_ADD, validate_scaled_add, execute_scaled_add),),
)


def enable() -> str:
    """Install the extension in this process; returns its name (for the device's list)."""
    install(DEFINITION)
    return NAME

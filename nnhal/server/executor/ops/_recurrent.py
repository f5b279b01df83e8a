"""Helpers shared by the recurrent families (RNN / SVDF, float LSTM, quantized LSTM):
operand types of float cells, constant parameters, the cell activation and the
time-major view of sequences."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from nnhal.core.enums import OperandType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops._activations import RECURRENT_ACTIVATIONS
from nnhal.server.executor.ops.common import FLOAT_TYPES, T, float_scalar_type


def expect_float_types(
    v: ValidationContext,
    tensors: Iterable[int],
    ints: Iterable[int] = (),
    floats: Iterable[int] = (),
    bools: Iterable[int] = (),
    required: Iterable[int] = (),
) -> OperandType:
    """Input 0's float type is every listed tensor's and every output's; scalars have theirs."""
    t = v.expect_input_type_in(0, FLOAT_TYPES)
    expected: dict[int, OperandType] = {i: t for i in tensors}
    expected.update({i: T.INT32 for i in ints})
    expected.update({i: float_scalar_type(t) for i in floats})
    expected.update({i: T.BOOL for i in bools})
    for i, want in expected.items():
        if not v.is_omitted(i) and v.input_type(i) != want:
            v.fail(f"input {i} must be {want.name}, got {v.input_type(i).name}")
    for k in range(v.num_outputs):
        if v.output_type(k) != t:
            v.fail(f"output {k} must be {t.name}, got {v.output_type(k).name}")
    for i in required:
        v.require(not v.is_omitted(i), f"required input {i} is omitted")
    return t


def check_constant_in(v: ValidationContext, i: int, allowed: Sequence[int], what: str) -> None:
    """A constant scalar input ``i`` is one of ``allowed``."""
    value = v.constant_scalar(i)
    if value is not None:
        v.require(int(value) in allowed, f"unsupported {what} {value}")


def check_cell_activation(v: ValidationContext, i: int) -> None:
    check_constant_in(v, i, RECURRENT_ACTIVATIONS, "activation function")


def check_constant_nonneg(v: ValidationContext, i: int, what: str) -> None:
    value = v.constant_scalar(i)
    if value is not None and not v.is_omitted(i):
        v.require(float(value) >= 0, f"{what} must be >= 0, got {value}")


def runtime_cell_activation(ctx: ExecutionContext, i: int) -> int:
    """The activation code of scalar input ``i``, checked."""
    code = int(ctx.scalar(i))
    ctx.require(code in RECURRENT_ACTIVATIONS, f"unsupported activation function {code}")
    return code


def to_time_major(a: np.ndarray, time_major: bool) -> np.ndarray:
    """A [batch, time, ...] sequence as [time, batch, ...] (and back: the swap is its own inverse)."""
    return a if time_major else a.transpose(1, 0, 2)


def check_merge_outputs(v: ValidationContext, merge_input: int, n_states: int) -> None:
    """A bidirectional operation's output count fits a constant merge_outputs flag.

    Merged: one sequence output, else two; then optionally ``n_states`` final states.
    """
    merge = v.constant_scalar(merge_input)
    if merge is not None:
        allowed = (1, 1 + n_states) if merge else (2, 2 + n_states)
        v.require(v.num_outputs in allowed, f"{v.num_outputs} outputs do not match merge_outputs={bool(merge)}")


def runtime_merge_outputs(ctx: ExecutionContext, merge_input: int, n_states: int) -> bool:
    """The merge_outputs flag of a bidirectional operation, checked against its output count."""
    merge = bool(ctx.scalar(merge_input))
    n_out = len(ctx.out_operands)
    ctx.require(
        n_out in ((1, 1 + n_states) if merge else (2, 2 + n_states)),
        f"{n_out} outputs do not match merge_outputs={merge}",
    )
    return merge


def set_bidirectional_outputs(
    ctx: ExecutionContext,
    fw_out: np.ndarray,
    bw_out: np.ndarray,
    time_major: bool,
    merge: bool,
    states: Sequence[np.ndarray],
) -> None:
    """Time-major sequences [T, B, O] out in the operation's order: merged along the last axis or
    forward then backward, followed by the final ``states`` when the operation outputs them."""
    if merge:
        ctx.set_output(0, to_time_major(np.concatenate([fw_out, bw_out], axis=2), time_major))
        first_state = 1
    else:
        ctx.set_output(0, to_time_major(fw_out, time_major))
        ctx.set_output(1, to_time_major(bw_out, time_major))
        first_state = 2
    if len(ctx.out_operands) > first_state:
        for k, value in enumerate(states):
            ctx.set_output(first_state + k, value)

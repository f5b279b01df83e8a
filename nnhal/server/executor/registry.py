"""The operation registry: one entry per OperationType with validate / prepare / execute.

Each family module under ``ops/`` calls :func:`register` at import time;
``ops/__init__.py`` imports every family explicitly. Validation works without
the kernels (it sees only operand metadata and constant values).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nnhal.core.enums import HalVersion, OperationType
from nnhal.core.errors import HalError
from nnhal.server.executor.errors import OP_FAILED

if TYPE_CHECKING:
    import numpy as np

    from nnhal.server.executor.context import ExecutionContext, ValidationContext

#: Checks an operation's operands; returns the minimum HAL version this use needs.
#: Raises InvalidArgument naming the problem.
Validator = Callable[["ValidationContext"], HalVersion]
#: Computes the outputs from the inputs; sets every output through the context.
Kernel = Callable[["ExecutionContext"], None]
#: Optional, runs once at prepare with constant operands known; its result is
#: handed to every execution as ``ctx.state`` (e.g. re-laid-out weights).
Preparer = Callable[["ValidationContext"], Any]
#: A kernel bound at prepare to one operation's constant parameters and static shapes: from the
#: input values (a sequence, in operation order) and one buffer per output (an array of the output's dtype
#: and declared shape, or None) it returns the outputs (of the operand dtypes and the declared
#: shapes), or None when the inputs are not what it was bound to (then the general kernel runs).
#: An output given a buffer is written into it (and that buffer returned); one given None is a new
#: array. It never writes into its inputs, and reserves (executor.allocation) scratch beyond the
#: size of its largest input before allocating it. It does no validation: its binder proved the
#: operation valid.
FastKernel = Callable[["Sequence[np.ndarray | None]", "Sequence[np.ndarray | None]"], "list[np.ndarray] | None"]
#: Optional, runs once at prepare after ``Preparer`` (whose state it receives): a FastKernel
#: for this use of the operation, or None when it has none for it. A family that registers one
#: promises that neither its bound nor its general kernel returns a view of an input (the
#: executor's arena reuses an input's memory once its last such reader has run), unless it
#: registers with ``views``: then its bound kernel may return a view of an input instead of
#: writing into a buffer (it gets none), and its inputs keep their memory for the execution.
Binder = Callable[["ValidationContext", Any], FastKernel | None]
#: One numpy call with every argument fixed (a step of a static program).
Call = Callable[[], object]
#: An operation's bound kernel as fixed calls: from input arrays that hold the step's inputs for
#: every execution (constants, or arena buffers an earlier static step writes; operation order)
#: and its output buffers, the calls that do what its FastKernel does on those arrays — the same
#: numpy calls with the same arguments, in order, writing the outputs into the buffers and
#: allocating nothing — or None when it has no such form for them.
StaticKernel = Callable[["Sequence[np.ndarray | None]", "Sequence[np.ndarray]"], "tuple[Call, ...] | None"]
#: Optional, with ``bind``, runs once at prepare after it: this use's StaticKernel, or None.
Emitter = Callable[["ValidationContext", Any], StaticKernel | None]
#: The HalError class an operation's execution-time checks raise.
FailureStatus = type[HalError]


@dataclass(frozen=True, slots=True)
class OperationSpec:
    type: OperationType
    validate: Validator
    execute: Kernel
    prepare: Preparer | None = None
    #: The status ``ExecutionContext.fail`` raises for this operation (see executor.errors).
    execution_failure: FailureStatus = OP_FAILED
    bind: Binder | None = None
    #: Its kernels may return a view of an input (see Binder).
    views: bool = False
    emit: Emitter | None = None


_REGISTRY: dict[OperationType, OperationSpec] = {}


def register(
    op_type: OperationType,
    *,
    validate: Validator,
    execute: Kernel,
    prepare: Preparer | None = None,
    execution_failure: type[HalError] = OP_FAILED,
    bind: Binder | None = None,
    views: bool = False,
    emit: Emitter | None = None,
) -> None:
    """Register ``op_type``; registering one type twice is a programming error.

    ``bind`` (optional) makes a FastKernel per use at prepare (see Binder); ``views``: the
    family's kernels may return views of their inputs; ``emit`` (optional, with ``bind``) gives
    the bound kernel's fixed-call form (see StaticKernel).
    ``execution_failure`` is the status of the operation's execution-time checks
    (GENERAL_FAILURE unless the family says otherwise; see executor.errors).
    """
    if op_type in _REGISTRY:
        raise RuntimeError(f"operation {op_type.name} registered twice")
    if emit is not None and bind is None:
        raise RuntimeError(f"operation {op_type.name} registers emit without bind")
    _REGISTRY[op_type] = OperationSpec(op_type, validate, execute, prepare, execution_failure, bind, views, emit)


def lookup(op_type: OperationType) -> OperationSpec | None:
    return _REGISTRY.get(op_type)


def registered() -> frozenset[OperationType]:
    return frozenset(_REGISTRY)

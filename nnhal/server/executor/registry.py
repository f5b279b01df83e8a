"""The operation registry: one entry per OperationType with validate / prepare / execute.

Each family module under ``ops/`` calls :func:`register` at import time;
``ops/__init__.py`` imports every family explicitly. Validation works without
the kernels (it sees only operand metadata and constant values).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nnhal.core.enums import HalVersion, OperationType
from nnhal.core.errors import HalError
from nnhal.server.executor.errors import OP_FAILED

if TYPE_CHECKING:
    from nnhal.server.executor.context import ExecutionContext, ValidationContext

#: Checks an operation's operands; returns the minimum HAL version this use needs.
#: Raises InvalidArgument naming the problem.
Validator = Callable[["ValidationContext"], HalVersion]
#: Computes the outputs from the inputs; sets every output through the context.
Kernel = Callable[["ExecutionContext"], None]
#: Optional, runs once at prepare with constant operands known; its result is
#: handed to every execution as ``ctx.state`` (e.g. re-laid-out weights).
Preparer = Callable[["ValidationContext"], Any]
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


_REGISTRY: dict[OperationType, OperationSpec] = {}


def register(
    op_type: OperationType,
    *,
    validate: Validator,
    execute: Kernel,
    prepare: Preparer | None = None,
    execution_failure: type[HalError] = OP_FAILED,
) -> None:
    """Register ``op_type``; registering one type twice is a programming error.

    ``execution_failure`` is the status of the operation's execution-time checks
    (GENERAL_FAILURE unless the family says otherwise; see executor.errors).
    """
    if op_type in _REGISTRY:
        raise RuntimeError(f"operation {op_type.name} registered twice")
    _REGISTRY[op_type] = OperationSpec(op_type, validate, execute, prepare, execution_failure)


def lookup(op_type: OperationType) -> OperationSpec | None:
    return _REGISTRY.get(op_type)


def registered() -> frozenset[OperationType]:
    return frozenset(_REGISTRY)

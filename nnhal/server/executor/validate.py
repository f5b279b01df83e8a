"""Bridges core model validation to the operation registry, and reports support."""

from __future__ import annotations

from collections.abc import Sequence

from nnhal.core.enums import OPERATION_INTRODUCED, HalVersion, OperationType
from nnhal.core.errors import HalError
from nnhal.core.types import Model, Operation, Subgraph
from nnhal.core.validation import OperationValidator, validate_model
from nnhal.server.executor import ops as _ops  # noqa: F401  (registers every operation)
from nnhal.server.executor.context import ValidationContext
from nnhal.server.executor.graph import Buffer, constant_value, unsupported
from nnhal.server.executor.registry import lookup


def validation_context(model: Model, sg: Subgraph, operation: Operation, pools: Sequence[Buffer]) -> ValidationContext:
    return ValidationContext(
        operation.type,
        [sg.operands[i] for i in operation.inputs],
        [sg.operands[i] for i in operation.outputs],
        lambda k: constant_value(model, pools, sg.operands[operation.inputs[k]]),
        model.relax_computation_float32_to_float16,
        model.referenced,
        operation.inputs,
    )


def make_operation_validator(pools: Sequence[Buffer]) -> OperationValidator:
    def validate(model: Model, sg: Subgraph, operation: Operation) -> HalVersion:
        spec = lookup(operation.type)
        if spec is None:
            unsupported(operation.type)
        return spec.validate(validation_context(model, sg, operation, pools))

    return validate


def validate_full(model: Model, pools: Sequence[Buffer]) -> HalVersion:
    """Structural and per-operation validation; returns the minimum HAL version."""
    return validate_model(model, [len(memoryview(p)) for p in pools], make_operation_validator(pools))


def supported_operations(
    model: Model, pools: Sequence[Buffer], feature_level: HalVersion
) -> tuple[list[bool], list[str]]:
    """Per main-subgraph operation: supported or not, and why not.

    The model as a whole must be structurally valid (else InvalidArgument).
    """
    validate_model(model, [len(memoryview(p)) for p in pools], None)
    supported: list[bool] = []
    reasons: list[str] = []
    for operation in model.main.operations:
        ok, reason = _supports(model, model.main, operation, pools, feature_level)
        supported.append(ok)
        reasons.append(reason)
    return supported, reasons


def _supports(
    model: Model, sg: Subgraph, operation: Operation, pools: Sequence[Buffer], level: HalVersion
) -> tuple[bool, str]:
    spec = lookup(operation.type)
    if spec is None:
        return False, f"{operation.type.name} is not implemented by this driver"
    introduced = OPERATION_INTRODUCED[operation.type]
    if introduced > level:
        return (
            False,
            f"{operation.type.name} was introduced in NN HAL {introduced.label}; the device serves {level.label}",
        )
    try:
        version = spec.validate(validation_context(model, sg, operation, pools))
    except HalError as err:
        return False, err.message
    if version > level:
        return False, f"this use of {operation.type.name} needs HAL {version.label}, the device serves {level.label}"
    if operation.type in (OperationType.IF, OperationType.WHILE):
        for k in operation.inputs:
            ref = sg.operands[k]
            if ref.type.name == "SUBGRAPH":
                inner = model.referenced[ref.location.offset]
                for op in inner.operations:
                    ok, why = _supports(model, inner, op, pools, level)
                    if not ok:
                        return False, f"referenced subgraph {ref.location.offset}: {why}"
    return True, ""

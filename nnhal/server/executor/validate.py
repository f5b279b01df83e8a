"""Bridges core model validation to the operation registry, and reports support.

The VTS rules (ValidateModel.cpp): a model that is invalid — in its structure, in any
operation's operands (counts, types, ranks, constant parameters), or because it needs a
newer feature level than the device serves (an operation, operand type or use the
level does not have) — is INVALID_ARGUMENT from getSupportedOperations as from
prepareModel. "Unsupported" is kept for valid models this device cannot run: an
operation no family registered (OEM_OPERATION, an extension the device lacks).
"""

from __future__ import annotations

from collections.abc import Sequence

from nnhal.core.enums import OPERATION_INTRODUCED, HalVersion, OperandType, OperationType
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Model, Operation, Subgraph
from nnhal.core.validation import OperationValidator, validate_model
from nnhal.server.executor import ops as _ops  # noqa: F401  (registers every operation)
from nnhal.server.executor.constants import Buffer, constant_value
from nnhal.server.executor.context import ValidationContext
from nnhal.server.executor.registry import lookup
from nnhal.server.executor.step_plan import unsupported


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


def make_operation_validator(pools: Sequence[Buffer], *, unknown_is_invalid: bool = True) -> OperationValidator:
    """Per-operation validation through the registry. An operation no family registered is
    INVALID_ARGUMENT (``unknown_is_invalid``: prepare cannot run it) or passes unchecked
    (getSupportedOperations reports it unsupported instead)."""

    def validate(model: Model, sg: Subgraph, operation: Operation) -> HalVersion:
        spec = lookup(operation.type)
        if spec is None:
            if unknown_is_invalid:
                unsupported(operation.type)
            return OPERATION_INTRODUCED.get(operation.type, HalVersion.V1_0)
        return spec.validate(validation_context(model, sg, operation, pools))

    return validate


def check_level(version: HalVersion, level: HalVersion) -> None:
    """INVALID_ARGUMENT when content needing ``version`` reaches a device at ``level``."""
    if version > level:
        raise InvalidArgument(f"the model needs NN HAL {version.label}; this device serves {level.label}")


def validate_full(model: Model, pools: Sequence[Buffer], level: HalVersion | None = None) -> HalVersion:
    """Structural and per-operation validation; returns the minimum HAL version.
    With ``level``, a model needing a newer one is INVALID_ARGUMENT too."""
    version = validate_model(model, [len(memoryview(p)) for p in pools], make_operation_validator(pools))
    if level is not None:
        check_level(version, level)
    return version


def supported_operations(
    model: Model, pools: Sequence[Buffer], feature_level: HalVersion
) -> tuple[list[bool], list[str]]:
    """Per main-subgraph operation: supported or not, and why not.

    INVALID_ARGUMENT for an invalid model or one newer than ``feature_level`` (above)."""
    validator = make_operation_validator(pools, unknown_is_invalid=False)
    version = validate_model(model, [len(memoryview(p)) for p in pools], validator)
    check_level(version, feature_level)
    supported: list[bool] = []
    reasons: list[str] = []
    for operation in model.main.operations:
        why = _unsupported_reason(model, model.main, operation)
        supported.append(not why)
        reasons.append(why)
    return supported, reasons


def _unsupported_reason(model: Model, sg: Subgraph, operation: Operation) -> str:
    """Why this device cannot run a valid ``operation`` ("" when it can)."""
    if lookup(operation.type) is None:
        return f"{operation.type.name} is not implemented by this driver"
    if operation.type in (OperationType.IF, OperationType.WHILE):
        for k in operation.inputs:
            ref = sg.operands[k]
            if ref.type == OperandType.SUBGRAPH:
                inner = model.referenced[ref.location.offset]
                for op in inner.operations:
                    why = _unsupported_reason(model, inner, op)
                    if why:
                        return f"referenced subgraph {ref.location.offset}: {why}"
    return ""

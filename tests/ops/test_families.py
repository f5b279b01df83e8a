"""The shape of the ops package: every family has a test module, no family imports another,
and failures speak one vocabulary (INVALID_ARGUMENT while validating, the family's registered
status while executing)."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import numpy as np
import pytest

import nnhal.server.executor.ops as ops_package
from nnhal.core.enums import OperationType as Op
from nnhal.core.errors import GeneralFailure, HalError, InvalidArgument, MissedDeadlinePersistent
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.executor.registry import lookup
from tests.ops.elementwise_runner import T, tensor

_TESTS = Path(__file__).resolve().parent
_FAMILIES = sorted(
    m.name for m in pkgutil.iter_modules(ops_package.__path__) if not m.name.startswith("_") and m.name != "common"
)


def test_every_family_has_a_test_module() -> None:
    missing = [f for f in _FAMILIES if not (_TESTS / f"test_{f}.py").exists()]
    assert not missing, f"families without tests/ops/test_<family>.py: {missing}"


@pytest.mark.parametrize("family", _FAMILIES)
def test_no_family_imports_another(family: str) -> None:
    source = (Path(ops_package.__path__[0]) / f"{family}.py").read_text()
    imported = {
        node.module.rsplit(".", 1)[-1]
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nnhal.server.executor.ops.")
    }
    assert not imported & set(_FAMILIES), f"{family} imports families {sorted(imported & set(_FAMILIES))}"


def _execution_context(op: Op) -> ExecutionContext:
    operand = tensor(T.TENSOR_FLOAT32, (1,))
    return ExecutionContext(op, [None], [operand], [operand], None, False, ExecutionControl())


def test_validation_failures_are_invalid_argument_naming_the_operation() -> None:
    v = ValidationContext(Op.CONV_2D, [], [], lambda i: None, relaxed=False)
    with pytest.raises(InvalidArgument) as info:
        v.require(False, "bad filter")
    assert info.value.message == "CONV_2D: bad filter"


@pytest.mark.parametrize(
    "op,status",
    [
        (Op.CONV_2D, GeneralFailure),
        (Op.AVERAGE_POOL_2D, GeneralFailure),
        (Op.ROI_ALIGN, GeneralFailure),
        (Op.RESHAPE, InvalidArgument),
        (Op.GATHER, InvalidArgument),
        (Op.MEAN, InvalidArgument),
        (Op.EMBEDDING_LOOKUP, InvalidArgument),
        (Op.RNN, InvalidArgument),
        (Op.LSTM, InvalidArgument),
        (Op.QUANTIZED_LSTM, InvalidArgument),
    ],
)
def test_execution_failures_carry_the_status_the_family_registered(op: Op, status: type[HalError]) -> None:
    spec = lookup(op)
    assert spec is not None and spec.execution_failure is status
    ctx = _execution_context(op)
    with pytest.raises(status) as failed:
        ctx.require(False, "runtime value")
    assert type(failed.value) is status and failed.value.message == f"{op.name}: runtime value"
    with pytest.raises(MissedDeadlinePersistent) as named:
        ctx.fail("named status", MissedDeadlinePersistent)
    assert named.value.message == f"{op.name}: named status"


def test_a_required_input_without_value_is_invalid_in_every_family() -> None:
    for op in (Op.CONV_2D, Op.RESHAPE):
        with pytest.raises(InvalidArgument, match="input 0 is required but has no value"):
            _execution_context(op).tensor(0)


def test_an_output_of_the_wrong_shape_is_general_failure() -> None:
    operand = tensor(T.TENSOR_FLOAT32, (2,))
    ctx = ExecutionContext(Op.RESHAPE, [None], [operand], [operand], None, False, ExecutionControl())
    with pytest.raises(GeneralFailure, match="RESHAPE: output 0 has shape"):
        ctx.set_output(0, np.zeros(3, np.float32))

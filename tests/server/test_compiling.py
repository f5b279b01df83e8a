"""What the compiling devices share (nnhal.server.compiling)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import pytest

from nnhal.client.builder import ModelBuilder
from nnhal.core.enums import OperandType as T, OperationType as O
from nnhal.core.errors import GeneralFailure, MissedDeadlineTransient
from nnhal.core.types import Model, Operand
from nnhal.server.compiling import Unsupported, convert_all, guarded, io_reason, run_compiled
from nnhal.server.executor.control import ExecutionControl


def _relu(dims: tuple[int, ...]) -> Model:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, dims)
    return b.outputs(b.op(O.RELU, [x], T.TENSOR_FLOAT32, dims)).finish()


def test_io_reason_names_the_operand_and_needs_static_shapes() -> None:
    def no_reason(op: Operand) -> str:
        return ""

    assert io_reason(_relu((1, 2)), no_reason) == ""
    assert "unknown dimensions" in io_reason(_relu((1, 0)), no_reason)
    assert io_reason(_relu((1, 2)), lambda op: "not this type") == "model input 0: not this type"


def test_conversion_failures_are_reasons_and_compile_failures_name_the_operation() -> None:
    def refuse() -> str:
        raise Unsupported("no faithful form")

    def crash() -> str:
        raise IndexError("shape")

    assert guarded("RELU", refuse) == "RELU: no faithful form"
    assert guarded("RELU", crash) == "RELU: cannot be converted (shape)"
    with pytest.raises(GeneralFailure, match="operation 0 is not supported by this device: nope"):
        convert_all(_relu((1, 2)), "", object(), lambda g, k: "nope")
    with pytest.raises(GeneralFailure, match="bad io"):
        convert_all(_relu((1, 2)), "bad io", object(), lambda g, k: "")


def test_run_compiled_is_one_step_and_wraps_the_library_errors() -> None:
    x = np.ones((1, 2), np.float32)
    control = ExecutionControl()

    def double(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [2 * inputs[0]]

    np.testing.assert_array_equal(run_compiled("lib", double, [x], control)[0], 2 * x)
    assert control.operations_run == 1
    with pytest.raises(GeneralFailure, match="input 0: this device needs a value"):
        run_compiled("lib", double, [None], None)

    def broken(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        raise RuntimeError("kernel exploded")

    with pytest.raises(GeneralFailure, match="lib failed: kernel exploded"):
        run_compiled("lib", broken, [x], None)


def test_run_compiled_checks_the_deadline_before_and_after_and_hands_on_the_places() -> None:
    """A deadline passed before the run refuses it before the library is asked (the first
    checkpoint, taken as the run starts); one passed during it is raised after; ``into`` goes to
    ``invoke`` as its second argument."""
    x = np.ones((1, 2), np.float32)
    calls: list[object] = []

    def invoke(inputs: Sequence[np.ndarray], into: Sequence[np.ndarray | None] = ()) -> list[np.ndarray]:
        calls.append(into)
        return [2 * inputs[0]]

    with pytest.raises(MissedDeadlineTransient):
        run_compiled("lib", invoke, [x], ExecutionControl(deadline_ns=time.monotonic_ns() - 1))
    assert calls == []

    def late(inputs: Sequence[np.ndarray], into: Sequence[np.ndarray | None] = ()) -> list[np.ndarray]:
        time.sleep(0.02)
        return invoke(inputs, into)

    with pytest.raises(MissedDeadlineTransient):
        run_compiled("lib", late, [x], ExecutionControl(deadline_ns=time.monotonic_ns() + 5_000_000))
    assert calls == [()]
    place = np.zeros((1, 2), np.float32)
    run_compiled("lib", invoke, [x], ExecutionControl(), [place])
    assert calls[-1] == [place]


def test_run_compiled_runs_the_hook_at_its_last_checkpoint_when_its_time_came() -> None:
    """The last checkpoint (nothing planned after it) still asks the hook (a gone client,
    pre-emption) once its interval passed during the run, and raises what it raises."""
    x = np.ones((1, 2), np.float32)
    asked: list[int] = []

    def hook() -> None:
        asked.append(1)
        raise GeneralFailure("the client went away")

    def slow(inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        time.sleep(0.002)
        return [inputs[0]]

    with pytest.raises(GeneralFailure, match="the client went away"):
        run_compiled("lib", slow, [x], ExecutionControl(checkpoint_hook=hook))
    assert asked == [1]
    control = ExecutionControl(checkpoint_hook=lambda: None)
    run_compiled("lib", slow, [x], control)  # a later run plans afresh at its start
    assert control.operations_run == 1

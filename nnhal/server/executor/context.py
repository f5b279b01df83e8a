"""The two views an operation has of its operands: one for validation, one for execution.

Operations never see the model, the pools or gRPC; only these contexts. Both
report problems through ``fail`` / ``require`` (see executor.errors): the
message is prefixed with the operation's name, and the status is the one of
the stage (INVALID_ARGUMENT while validating; the family's declared status
while executing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from nnhal.core.enums import OperandLifeTime, OperandType, OperationType
from nnhal.core.errors import HalError
from nnhal.core.operand_types import DTYPE, INFO
from nnhal.core.types import Operand, Subgraph
from nnhal.server.executor.errors import INVALID, OP_FAILED, fail
from nnhal.server.executor.registry import lookup

if TYPE_CHECKING:
    from nnhal.server.executor.control import ExecutionControl

_CONSTANT = (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)


class ValidationContext:
    """Operation metadata at model-validation and prepare time.

    ``constant(i)`` gives the value of constant inputs (scalars such as an
    activation or an axis are usually constant), else None.
    """

    def __init__(
        self,
        operation_type: OperationType,
        inputs: Sequence[Operand],
        outputs: Sequence[Operand],
        constant: Callable[[int], np.ndarray | None],
        relaxed: bool,
        referenced: Sequence[Subgraph] = (),
        input_indexes: Sequence[int] = (),
    ) -> None:
        self.op_type = operation_type
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self._constant = constant
        self.relaxed = relaxed
        self.referenced = referenced
        self.input_indexes = list(input_indexes)

    # -- reporting --------------------------------------------------------
    def fail(self, message: str) -> NoReturn:
        """INVALID_ARGUMENT naming the operation: the model breaks its rules."""
        fail(f"{self.op_type.name}: {message}")

    def require(self, condition: object, message: str) -> None:
        if not condition:
            self.fail(message)

    # -- operands ---------------------------------------------------------
    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    def input_type(self, i: int) -> OperandType:
        return self.inputs[i].type

    def output_type(self, i: int) -> OperandType:
        return self.outputs[i].type

    def input_dims(self, i: int) -> tuple[int, ...]:
        return self.inputs[i].dimensions

    def input_rank(self, i: int) -> int | None:
        """Declared rank, or None when unknown (a tensor declared with no dims)."""
        op = self.inputs[i]
        if INFO[op.type].is_tensor and not op.dimensions:
            return None
        return len(op.dimensions)

    def is_omitted(self, i: int) -> bool:
        return i >= len(self.inputs) or self.inputs[i].lifetime == OperandLifeTime.NO_VALUE

    def is_constant(self, i: int) -> bool:
        return self.inputs[i].lifetime in _CONSTANT

    def constant(self, i: int) -> np.ndarray | None:
        """The value of input ``i`` when it is a constant operand, else None."""
        if not self.is_constant(i):
            return None
        return self._constant(i)

    def constant_scalar(self, i: int) -> Any:
        value = self.constant(i)
        return None if value is None else value.reshape(-1)[0].item()

    # -- common checks ----------------------------------------------------
    def expect_counts(self, inputs: int | Iterable[int], outputs: int | Iterable[int]) -> None:
        ins = {inputs} if isinstance(inputs, int) else set(inputs)
        outs = {outputs} if isinstance(outputs, int) else set(outputs)
        if self.num_inputs not in ins:
            self.fail(f"expected {' or '.join(map(str, sorted(ins)))} inputs, got {self.num_inputs}")
        if self.num_outputs not in outs:
            self.fail(f"expected {' or '.join(map(str, sorted(outs)))} outputs, got {self.num_outputs}")

    def expect_types(self, inputs: Sequence[OperandType], outputs: Sequence[OperandType]) -> None:
        """Each input/output has the given type. An omitted optional input (NO_VALUE) is
        declared with its type too, and the VTS requires that type (a retyped one is invalid)."""
        for i, want in enumerate(inputs):
            if i < self.num_inputs and self.inputs[i].type != want:
                self.fail(f"input {i} must be {want.name}, got {self.inputs[i].type.name}")
        for i, want in enumerate(outputs):
            if i < self.num_outputs and self.outputs[i].type != want:
                self.fail(f"output {i} must be {want.name}, got {self.outputs[i].type.name}")

    def expect_input_type_in(self, i: int, allowed: Iterable[OperandType]) -> OperandType:
        allowed = tuple(allowed)
        t = self.inputs[i].type
        if t not in allowed:
            names = ", ".join(a.name for a in allowed)
            self.fail(f"input {i} has unsupported type {t.name} (supported: {names})")
        return t

    def expect_rank(self, i: int, rank: int | Iterable[int], *, at_most: bool = False) -> None:
        r = self.input_rank(i)
        if r is None:
            return
        if at_most:
            assert isinstance(rank, int)
            self.require(r <= rank, f"input {i} must have rank <= {rank}, got {r}")
            return
        ranks = {rank} if isinstance(rank, int) else set(rank)
        self.require(r in ranks, f"input {i} must have rank {' or '.join(map(str, sorted(ranks)))}, got {r}")


class ExecutionContext:
    """Operand values during one operation's execution.

    Inputs are numpy arrays of the operand's dtype (0-d for scalars; None for
    omitted optional inputs). Kernels must not modify inputs in place and must
    call ``set_output`` once per output.
    """

    __slots__ = (
        "control",
        "in_operands",
        "inputs",
        "op_type",
        "out_operands",
        "outputs",
        "relaxed",
        "state",
    )

    def __init__(
        self,
        op_type: OperationType,
        inputs: list[np.ndarray | None],
        in_operands: Sequence[Operand],
        out_operands: Sequence[Operand],
        state: Any,
        relaxed: bool,
        control: ExecutionControl,
    ) -> None:
        self.op_type = op_type
        self.inputs = inputs
        self.in_operands = in_operands
        self.out_operands = out_operands
        self.outputs: list[np.ndarray | None] = [None] * len(out_operands)
        self.state = state
        self.relaxed = relaxed
        self.control = control

    # -- reporting ----------------------------------------------------------
    def fail(self, message: str, status: type[HalError] | None = None) -> NoReturn:
        """Raise ``status``, by default the one the operation's family registered, naming the operation."""
        if status is None:
            spec = lookup(self.op_type)
            status = OP_FAILED if spec is None else spec.execution_failure
        fail(f"{self.op_type.name}: {message}", status)

    def require(self, condition: object, message: str, status: type[HalError] | None = None) -> None:
        if not condition:
            self.fail(message, status)

    # -- inputs -------------------------------------------------------------
    def tensor(self, i: int) -> np.ndarray:
        value = self.inputs[i]
        if value is None:
            # A required operand the request left without a value, whatever the family.
            self.fail(f"input {i} is required but has no value", INVALID)
        return value

    def optional(self, i: int) -> np.ndarray | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def scalar(self, i: int) -> Any:
        return self.tensor(i).reshape(-1)[0].item()

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def in_type(self, i: int) -> OperandType:
        return self.in_operands[i].type

    def scale(self, i: int) -> float:
        return self.in_operands[i].scale

    def zero_point(self, i: int) -> int:
        return self.in_operands[i].zero_point

    # -- outputs ------------------------------------------------------------
    def out(self, i: int) -> Operand:
        return self.out_operands[i]

    def out_type(self, i: int) -> OperandType:
        return self.out_operands[i].type

    def out_scale(self, i: int) -> float:
        return self.out_operands[i].scale

    def out_zero_point(self, i: int) -> int:
        return self.out_operands[i].zero_point

    def set_output(self, i: int, value: np.ndarray) -> None:
        """Store output ``i``; casts to the operand dtype, checks declared dims."""
        operand = self.out_operands[i]
        dtype = DTYPE[operand.type]
        if type(value) is np.ndarray and value.dtype == dtype:
            arr = value  # what np.asarray would return, without the error-state switch
        else:
            with np.errstate(over="ignore", invalid="ignore"):  # float16 narrowing saturates to inf
                arr = np.asarray(value, dtype=dtype)
        dims = operand.dimensions
        if (
            dims
            and arr.shape != dims
            and INFO[operand.type].is_tensor
            and (len(dims) != arr.ndim or any(d and d != a for d, a in zip(dims, arr.shape)))
        ):
            self.fail(f"output {i} has shape {list(arr.shape)}, incompatible with the declared {list(dims)}", OP_FAILED)
        self.outputs[i] = arr

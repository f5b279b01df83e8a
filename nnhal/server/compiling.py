"""What the compiling devices (``nnhal.server.litert``, ``nnhal.server.ort``) share: the
shape of their converters' answers and of running a compiled graph as one step.

A converter turns one NNAPI operation into the library's graph or raises
:class:`Unsupported` saying why it cannot do so faithfully. ``supported_by_conversion``
answers ``getSupportedOperations``: the reference executor's validation first (an invalid
use is unsupported everywhere), then the model's inputs and outputs (``io_reason``), then
each operation converted on a scratch graph. ``convert_all`` converts a whole model whose
every operation is supported, in the model's (topological) order; an operation that does
not convert there is GENERAL_FAILURE naming it (the runtime only sends a device what it
said it supports).

``run_compiled`` runs a compiled graph as one step for the scheduler: deadlines and
pre-emption are checked before and after it, not inside; every input must have a value
(the graphs are static); the library's own exceptions become GENERAL_FAILURE.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from nnhal.core.enums import HalVersion
from nnhal.core.errors import GeneralFailure, ResourceExhaustedTransient, allocation_failed
from nnhal.core.operand_types import INFO
from nnhal.core.types import Capabilities, Model, Operand
from nnhal.server.backend import Backend, reference_capabilities
from nnhal.server.executor.constants import Buffer
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.executor.validate import supported_operations as reference_support

G = TypeVar("G")
R = TypeVar("R")


class Unsupported(Exception):
    """This operation (or operand) has no faithful form in the library; the message says why."""


#: What a converter may raise on shapes or parameters it did not foresee: not convertible, never a crash.
_UNFORESEEN = (ValueError, IndexError, KeyError, TypeError, ArithmeticError)


def io_reason(model: Model, operand_reason: Callable[[Operand], str], scalars: bool = False) -> str:
    """Why the model's inputs or outputs cannot be the compiled graph's ("" if they can):
    ``operand_reason`` says why the library does not take an operand's type ("" if it does),
    and every tensor (every operand, unless ``scalars``) must have known dimensions (the
    graph is static)."""
    main = model.main
    for role, indexes in (("input", main.input_indexes), ("output", main.output_indexes)):
        for k, index in enumerate(indexes):
            op = main.operands[index]
            reason = operand_reason(op)
            if reason:
                return f"model {role} {k}: {reason}"
            if scalars and not INFO[op.type].is_tensor:
                continue
            if not op.dimensions or 0 in op.dimensions:
                return (
                    f"model {role} {k} has unknown dimensions {list(op.dimensions)}; this device builds a static graph"
                )
    return ""


def guarded(name: str, convert: Callable[[], str]) -> str:
    """``convert()`` ("" or why not), with Unsupported and unforeseen errors as the reason
    for operation type ``name``."""
    try:
        return convert()
    except Unsupported as err:
        return f"{name}: {err}"
    except _UNFORESEEN as err:
        return f"{name}: cannot be converted ({err})"


def supported_by_conversion(
    model: Model,
    pools: Sequence[Buffer],
    level: HalVersion,
    io: str,
    scratch: Callable[[], G],
    convert: Callable[[G, int], str],
) -> tuple[list[bool], list[str]]:
    """Per main-subgraph operation: supported, and why not (see the module's docstring).
    ``io``: ``io_reason`` of the model; ``scratch()``: a graph to convert into (called once
    per operation); ``convert(graph, k)``: "" or why operation ``k`` does not convert.
    InvalidArgument for a structurally invalid model (as the reference device)."""
    supported, reasons = reference_support(model, pools, level)
    for k in range(len(model.main.operations)):
        if not supported[k]:
            continue
        reason = io or convert(scratch(), k)
        if reason:
            supported[k], reasons[k] = False, reason
    return supported, reasons


def convert_all(model: Model, io: str, graph: G, convert: Callable[[G, int], str]) -> G:
    """``graph`` with every main operation of ``model`` converted into it, in order.
    GeneralFailure when the inputs or outputs (``io``) or an operation do not convert."""
    if io:
        raise GeneralFailure(io)
    for k in range(len(model.main.operations)):
        reason = convert(graph, k)
        if reason:
            raise GeneralFailure(f"operation {k} is not supported by this device: {reason}")
    return graph


def run_compiled(
    library: str,
    invoke: Callable[..., R],
    inputs: Sequence[object],
    control: ExecutionControl | None,
    into: Sequence[object] | None = None,
) -> R:
    """``invoke(inputs)`` — ``invoke(inputs, into)`` when ``into`` is given (the outputs'
    places, ``ExecutableGraph.run``; a lane's, ``backend.Lane``) — as one scheduler step (see
    the module's docstring); ``library`` names the library in errors."""
    if control is not None:
        control.start(True)  # and the first checkpoint
    for k, value in enumerate(inputs):  # a loop: ``None in inputs`` would compare arrays
        if value is None:
            raise GeneralFailure(f"input {k}: this device needs a value for every input")
    try:
        outputs = invoke(inputs) if into is None else invoke(inputs, into)
    except GeneralFailure:
        raise
    except Exception as err:  # each library raises its own exception types
        if allocation_failed(err):
            raise ResourceExhaustedTransient(f"{library} ran out of memory: {err}") from None
        raise GeneralFailure(f"{library} failed: {err}") from None
    if control is not None:
        control.checkpoint(True)  # its last: a later step's run starts (and plans) afresh
        control.operations_run += 1
    return outputs


class CompiledLane:
    """A library's ``backend.Lane``: ``__call__(inputs, into)`` copies in, invokes the library
    and copies out, raising the library's own exceptions; ``run`` runs it as one scheduler step
    (:func:`run_compiled`: its checks and its words for those exceptions)."""

    #: The library's name in errors.
    library = ""

    def __call__(self, inputs: Sequence[memoryview], into: Sequence[memoryview]) -> Sequence[memoryview]:
        raise NotImplementedError

    def run(self, inputs: Sequence[memoryview], into: Sequence[memoryview], control: ExecutionControl) -> object:
        return run_compiled(self.library, self, inputs, control, into)


def backend_capabilities(backend: Backend, measure: bool) -> Capabilities:
    """Capabilities measured against the CPU device at start (``capabilities``), or the
    reference's when not measuring (tests)."""
    if not measure:
        return reference_capabilities()
    from nnhal.server.capabilities import measured_capabilities

    return measured_capabilities(backend)

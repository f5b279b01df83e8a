"""NNAPI model → ONNX model, and which operations can be converted.

``supported_operations`` answers per main-subgraph operation: the reference
executor's validation first (an invalid use is unsupported everywhere), then this
device's converter run on a scratch graph, whose :class:`Unsupported` message is
the reason. ``compile_model`` converts a whole model whose every operation is
supported, in the model's (topological) order; an unsupported operation there is
GENERAL_FAILURE naming it (the runtime only sends a device what it said it supports).
Control flow (IF, WHILE) has no conversion, so a model's referenced subgraphs are never
compiled: a model holding them runs here when its main graph does not use them.
"""

from __future__ import annotations

from collections.abc import Sequence

from nnhal.core.enums import HalVersion, OperandLifeTime, OperationType
from nnhal.core.errors import GeneralFailure
from nnhal.core.operand_types import INFO
from nnhal.core.types import Model
from nnhal.server.executor.graph import Buffer
from nnhal.server.executor.validate import supported_operations as reference_support
from nnhal.server.ort import dense, elementwise, misc, shape, spatial
from nnhal.server.ort.emit import ONNX_ELEM, Converter, GraphBuilder, OpView, Unsupported

CONVERTERS: dict[OperationType, Converter] = {
    **spatial.CONVERTERS,
    **dense.CONVERTERS,
    **elementwise.CONVERTERS,
    **shape.CONVERTERS,
    **misc.CONVERTERS,
}

_PRODUCED = (OperandLifeTime.TEMPORARY_VARIABLE, OperandLifeTime.SUBGRAPH_INPUT, OperandLifeTime.SUBGRAPH_OUTPUT)


def _check_io(model: Model) -> str:
    """Why the model's inputs or outputs cannot be ONNX graph inputs or outputs ("" if they can)."""
    main = model.main
    for role, indexes in (("input", main.input_indexes), ("output", main.output_indexes)):
        for k, index in enumerate(indexes):
            op = main.operands[index]
            if op.type not in ONNX_ELEM:
                return f"model {role} {k} is {op.type.name}, which this device does not take"
            if INFO[op.type].is_tensor and (not op.dimensions or 0 in op.dimensions):
                return (
                    f"model {role} {k} has unknown dimensions {list(op.dimensions)}; this device builds a static graph"
                )
    return ""


def _convert(b: GraphBuilder, index: int) -> str:
    """ "" when operation ``index`` converted into ``b``, else why not."""
    operation = b.main.operations[index]
    converter = CONVERTERS.get(operation.type)
    if converter is None:
        return f"{operation.type.name} has no ONNX Runtime conversion in this device"
    try:
        converter(OpView(b, operation))
    except Unsupported as err:
        return f"{operation.type.name}: {err}"
    except (ValueError, IndexError, KeyError, TypeError) as err:
        # Shapes or parameters the converter did not foresee: not convertible, never a crash.
        return f"{operation.type.name}: cannot be converted ({err})"
    return ""


def supported_operations(model: Model, pools: Sequence[Buffer], level: HalVersion) -> tuple[list[bool], list[str]]:
    """Per main-subgraph operation: supported, and why not. InvalidArgument for a
    structurally invalid model (as the reference device)."""
    supported, reasons = reference_support(model, pools, level)
    io_reason = _check_io(model)
    scratch = GraphBuilder(model, pools)
    for i, op in enumerate(model.main.operands):
        if op.lifetime in _PRODUCED:
            scratch.names[i] = f"t{i}"
    for k in range(len(model.main.operations)):
        if not supported[k]:
            continue
        reason = io_reason or _convert(scratch, k)
        if reason:
            supported[k], reasons[k] = False, reason
    return supported, reasons


def compile_model(model: Model, pools: Sequence[Buffer]) -> bytes:
    """The serialized ONNX model computing ``model`` (validated by the caller). Raises
    GeneralFailure when an operation cannot be converted."""
    # Referenced subgraphs are only reachable through IF / WHILE, which have no conversion.
    reason = _check_io(model)
    if reason:
        raise GeneralFailure(reason)
    b = GraphBuilder(model, pools)
    b.bind_inputs()
    for k in range(len(model.main.operations)):
        reason = _convert(b, k)
        if reason:
            raise GeneralFailure(f"operation {k} is not supported by this device: {reason}")
    return b.finish()

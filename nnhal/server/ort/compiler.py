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
from nnhal.core.types import Model, Operand
from nnhal.server.compiling import convert_all, guarded, io_reason, supported_by_conversion
from nnhal.server.executor.constants import Buffer
from nnhal.server.ort import dense, elementwise, misc, shape, spatial
from nnhal.server.ort.emit import ONNX_ELEM, Converter, GraphBuilder, OpView

CONVERTERS: dict[OperationType, Converter] = {
    **spatial.CONVERTERS,
    **dense.CONVERTERS,
    **elementwise.CONVERTERS,
    **shape.CONVERTERS,
    **misc.CONVERTERS,
}

_PRODUCED = (OperandLifeTime.TEMPORARY_VARIABLE, OperandLifeTime.SUBGRAPH_INPUT, OperandLifeTime.SUBGRAPH_OUTPUT)


def _operand_reason(op: Operand) -> str:
    """Why a model input or output of ``op``'s type cannot be an ONNX graph's ("" if it can)."""
    return "" if op.type in ONNX_ELEM else f"it is {op.type.name}, which this device does not take"


def _convert(b: GraphBuilder, index: int) -> str:
    """ "" when operation ``index`` converted into ``b``, else why not."""
    operation = b.main.operations[index]
    converter = CONVERTERS.get(operation.type)
    if converter is None:
        return f"{operation.type.name} has no ONNX Runtime conversion in this device"

    def convert() -> str:
        converter(OpView(b, operation))
        return ""

    return guarded(operation.type.name, convert)


def _scratch(model: Model, pools: Sequence[Buffer]) -> GraphBuilder:
    """A graph to try conversions in: every produced operand already has its name."""
    scratch = GraphBuilder(model, pools)
    for i, op in enumerate(model.main.operands):
        if op.lifetime in _PRODUCED:
            scratch.names[i] = f"t{i}"
    return scratch


def supported_operations(model: Model, pools: Sequence[Buffer], level: HalVersion) -> tuple[list[bool], list[str]]:
    """Per main-subgraph operation: supported, and why not. InvalidArgument for a
    structurally invalid model (as the reference device)."""
    io = io_reason(model, _operand_reason, scalars=True)
    scratch = _scratch(model, pools)  # one for every operation: each writes only its own outputs
    return supported_by_conversion(model, pools, level, io, lambda: scratch, _convert)


def compile_model(model: Model, pools: Sequence[Buffer]) -> bytes:
    """The serialized ONNX model computing ``model`` (validated by the caller). Raises
    GeneralFailure when an operation cannot be converted."""
    # Referenced subgraphs are only reachable through IF / WHILE, which have no conversion.
    io = io_reason(model, _operand_reason, scalars=True)
    b = GraphBuilder(model, pools)
    if not io:
        b.bind_inputs()
    return convert_all(model, io, b, _convert).finish()

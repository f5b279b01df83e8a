"""Building an ONNX graph from NNAPI operations: names, constants, layouts, quantization.

``GraphBuilder`` holds the nodes and initializers of the graph being built and the
ONNX name of every NNAPI operand already produced. ``OpView`` is what one operation's
converter sees: its operands, their constant values and a way to emit nodes. A
converter that cannot keep NNAPI's semantics raises :class:`Unsupported` with the
reason, before emitting anything that matters (support checks run converters on a
scratch builder and throw it away, so emitting is cheap: initializers stay numpy
arrays until ``finish``).

Layouts: NNAPI's spatial operations take NHWC by default; ONNX's take NCHW. A
converter wraps such an operation in two Transposes; onnxruntime's transpose
optimizer cancels the pairs between consecutive spatial operations, so a chain of
convolutions runs in one layout.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from nnhal.core.enums import OperandLifeTime, OperandType
from nnhal.core.operand_types import INFO
from nnhal.core.types import Model, Operand, Operation, Subgraph
from nnhal.server import compiling
from nnhal.server.executor.constants import Buffer, constant_value
from nnhal.server.executor.ops._activations import FUSED_BOUNDS, activation_range_quant

T = OperandType

#: ONNX TensorProto element types (onnx.TensorProto.FLOAT, ...), by NNAPI operand type.
ONNX_ELEM: dict[OperandType, int] = {
    T.TENSOR_FLOAT32: 1,
    T.TENSOR_QUANT8_ASYMM: 2,
    T.TENSOR_QUANT8_ASYMM_SIGNED: 3,
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL: 3,
    T.TENSOR_QUANT8_SYMM: 3,
    T.TENSOR_INT32: 6,
    T.TENSOR_BOOL8: 9,
    T.TENSOR_FLOAT16: 10,
}
#: float16 operands are computed in float32 (cast once at the graph's edges): more precise
#: than float16 arithmetic, well inside float16's tolerance.
_COMPUTED = {T.TENSOR_FLOAT16: T.TENSOR_FLOAT32, T.FLOAT16: T.FLOAT32}


def computed(operand: Operand) -> Operand:
    """``operand`` with the type it is computed in (float16 as float32)."""
    t = _COMPUTED.get(operand.type)
    return operand if t is None else replace(operand, type=t)


def _computed_value(value: np.ndarray) -> np.ndarray:
    return value.astype(np.float32) if value.dtype == np.float16 else np.array(value)


QUANT8 = frozenset({T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED})
FLOAT32 = T.TENSOR_FLOAT32
NHWC_TO_NCHW = (0, 3, 1, 2)
NCHW_TO_NHWC = (0, 2, 3, 1)
#: Opsets of the graphs we build: the default domain and onnxruntime's contrib ops.
OPSET = 17


# The converters' refusal, shared with the other compiling device (re-exported here).
Unsupported = compiling.Unsupported


@dataclass
class GraphBuilder:
    model: Model
    pools: Sequence[Buffer]
    nodes: list[Any] = field(default_factory=list)
    initializers: dict[str, np.ndarray] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)
    _counter: int = 0

    @property
    def main(self) -> Subgraph:
        return self.model.main

    def fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}_{self._counter}"

    def const(self, value: np.ndarray | np.generic | float | int, dtype: Any = None) -> str:
        name = self.fresh("c")
        self.initializers[name] = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        return name

    def node(self, op_type: str, inputs: Sequence[str], n_out: int = 1, domain: str = "", **attrs: Any) -> list[str]:
        from onnx import helper

        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        kwargs: dict[str, Any] = dict(attrs)
        if domain:
            kwargs["domain"] = domain
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **kwargs))
        return outs

    def one(self, op_type: str, inputs: Sequence[str], domain: str = "", **attrs: Any) -> str:
        return self.node(op_type, inputs, 1, domain, **attrs)[0]

    def operand_name(self, index: int) -> str:
        """The ONNX value of NNAPI operand ``index``: produced earlier, a model input, or a
        constant tensor (made an initializer on first use)."""
        name = self.names.get(index)
        if name is not None:
            return name
        operand = self.main.operands[index]
        value = constant_value(self.model, self.pools, operand)
        if value is None:
            raise Unsupported(f"operand {index} is not produced before it is used")
        name = self.const(_computed_value(value))
        self.names[index] = name
        return name

    def bind_inputs(self) -> None:
        """Name the model's inputs ``in{k}`` (float16 ones cast to float32 once)."""
        for k, index in enumerate(self.main.input_indexes):
            name = f"in{k}"
            if self.main.operands[index].type == T.TENSOR_FLOAT16:
                name = self.one("Cast", [name], to=1)
            self.names[index] = name

    def finish(self, graph_name: str = "nnhal") -> bytes:
        """The serialized ONNX model: main subgraph inputs and outputs by position."""
        from onnx import helper, numpy_helper

        inputs, outputs = [], []
        for k, index in enumerate(self.main.input_indexes):
            op = self.main.operands[index]
            inputs.append(helper.make_tensor_value_info(f"in{k}", ONNX_ELEM[op.type], list(op.dimensions)))
        nodes = list(self.nodes)
        for k, index in enumerate(self.main.output_indexes):
            op = self.main.operands[index]
            value = self.operand_name(index)
            if op.type == T.TENSOR_FLOAT16:
                value = self.fresh("cast")
                nodes.append(helper.make_node("Cast", [self.operand_name(index)], [value], to=10))
            nodes.append(helper.make_node("Identity", [value], [f"out{k}"]))
            outputs.append(helper.make_tensor_value_info(f"out{k}", ONNX_ELEM[op.type], list(op.dimensions)))
        inits = [numpy_helper.from_array(v, n) for n, v in self.initializers.items()]
        graph = helper.make_graph(nodes, graph_name, inputs, outputs, inits)
        opsets = [helper.make_opsetid("", OPSET), helper.make_opsetid("com.microsoft", 1)]
        onnx_model = helper.make_model(graph, opset_imports=opsets, producer_name="nnhal")
        onnx_model.ir_version = 8
        return bytes(onnx_model.SerializeToString())


@dataclass
class OpView:
    """One NNAPI operation as its converter sees it."""

    b: GraphBuilder
    operation: Operation

    def operand(self, k: int) -> Operand:
        return computed(self.b.main.operands[self.operation.inputs[k]])

    def out(self, k: int = 0) -> Operand:
        return computed(self.b.main.operands[self.operation.outputs[k]])

    def is_const(self, k: int) -> bool:
        return self.operand(k).lifetime in (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)

    @property
    def n_inputs(self) -> int:
        return len(self.operation.inputs)

    def is_omitted(self, k: int) -> bool:
        return k >= self.n_inputs or self.operand(k).lifetime == OperandLifeTime.NO_VALUE

    def const(self, k: int) -> np.ndarray:
        """The constant value of input ``k``; Unsupported when it is computed or an input."""
        value = constant_value(self.b.model, self.b.pools, self.b.main.operands[self.operation.inputs[k]])
        if value is None:
            raise Unsupported(f"input {k} must be a constant for this device (it builds a static graph)")
        return _computed_value(value)

    def scalar(self, k: int, default: Any = None) -> Any:
        if self.is_omitted(k):
            if default is None:
                raise Unsupported(f"input {k} is missing")
            return default
        return self.const(k).item()

    def value(self, k: int) -> str:
        return self.b.operand_name(self.operation.inputs[k])

    def produce(self, name: str, k: int = 0) -> None:
        self.b.names[self.operation.outputs[k]] = name

    def require_types(self, allowed: Sequence[OperandType], *inputs: int) -> OperandType:
        """The type of input ``inputs[0]`` (and of the output), which must be in ``allowed``."""
        t = self.operand(inputs[0] if inputs else 0).type
        if t not in allowed:
            raise Unsupported(f"{t.name} inputs are not supported by this device")
        return t

    def require_static(self) -> None:
        """Every tensor operand of the operation has known, non-zero dimensions."""
        for role, indexes in (("input", self.operation.inputs), ("output", self.operation.outputs)):
            for k, index in enumerate(indexes):
                op = self.b.main.operands[index]
                if op.lifetime == OperandLifeTime.NO_VALUE or not INFO[op.type].is_tensor:
                    continue
                if not op.dimensions or 0 in op.dimensions:
                    raise Unsupported(
                        f"{role} {k} has unknown or zero dimensions {list(op.dimensions)}; this device builds "
                        "a static graph"
                    )

    # -- layouts and activations -------------------------------------------------------
    def to_nchw(self, name: str, nchw: bool) -> str:
        return name if nchw else self.b.one("Transpose", [name], perm=list(NHWC_TO_NCHW))

    def from_nchw(self, name: str, nchw: bool) -> str:
        return name if nchw else self.b.one("Transpose", [name], perm=list(NCHW_TO_NHWC))

    def fused(self, name: str, act: int, out: Operand) -> str:
        """The fused activation ``act`` on ``name`` (float values, or quantized with ``out``'s
        scale and zero point: the reference's CalculateActivationRange)."""
        if act not in FUSED_BOUNDS:
            raise Unsupported(f"fused activation {act} is not one of NONE, RELU, RELU1, RELU6")
        lo, hi = FUSED_BOUNDS[act]
        if out.type in QUANT8:
            qlo, qhi = activation_range_quant(act, out.scale, out.zero_point, out.type)
            info = INFO[out.type]
            full = (-128, 127) if info.dtype == np.int8 else (0, 255)
            if (qlo, qhi) == full:
                return name
            dt = info.dtype
            return self.b.one("Clip", [name, self.b.const(qlo, dt), self.b.const(qhi, dt)])
        if lo == -math.inf and hi == math.inf:
            return name
        if hi == math.inf:
            return self.b.one("Relu", [name])
        return self.b.one("Clip", [name, self.b.const(np.float32(lo)), self.b.const(np.float32(hi))])

    # -- quantization -------------------------------------------------------------------
    def qparams(self, operand: Operand) -> tuple[str, str]:
        """The (scale, zero point) initializers of a quant8 operand."""
        dt = INFO[operand.type].dtype
        return self.b.const(np.float32(operand.scale)), self.b.const(operand.zero_point, dt)

    def dequant(self, name: str, operand: Operand) -> str:
        if operand.type not in QUANT8:
            return name
        return self.b.one("DequantizeLinear", [name, *self.qparams(operand)])

    def quant(self, name: str, operand: Operand) -> str:
        if operand.type not in QUANT8:
            return name
        return self.b.one("QuantizeLinear", [name, *self.qparams(operand)])


Converter = Callable[[OpView], None]

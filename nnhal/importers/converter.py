"""The state of one import: TFLite tensors become NNAPI operands as operators are mapped.

``Converter`` is what every mapper (``nnhal.importers.ops_*``) sees. It owns a ``ModelBuilder``
and the table from TFLite tensor index to NNAPI operand index, and it knows the operand type
of each tensor the way the NNAPI delegate chooses it:

- float32/float16/int32/bool tensors keep their type; uint8 with quantization is
  TENSOR_QUANT8_ASYMM, int8 is TENSOR_QUANT8_ASYMM_SIGNED (NNAPI 1.3), int8 weights with one
  scale per channel are TENSOR_QUANT8_SYMM_PER_CHANNEL along TFLite's ``quantized_dimension``,
  int16 with zero point 0 is TENSOR_QUANT16_SYMM; constant int64 that fits becomes int32;
- constants are added when first used (``ModelBuilder`` puts those over 128 bytes in a
  CONSTANT_REFERENCE pool, smaller ones in operandValues), once per tensor;
- ``fold`` records a constant that an operator computes from constants at import time (a
  float16 DEQUANTIZE, a DENSIFY), so the operator disappears as it does in the delegate.

Anything a mapper cannot express raises ``Unmappable`` with the reason; nothing is approximated.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import tflite

from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import OperandType as T, OperationType as O
from nnhal.core.types import SymmPerChannelQuantParams
from nnhal.importers.errors import Unmappable
from nnhal.importers.reader import TfGraph, TfOperator, TfTensor
from nnhal.tflite_map.tables import ACTIVATION_NAME, FUSE_CODE, PLAIN_TYPES, QUANT_TYPES

TT = tflite.TensorType
_FOLDED_TYPES = {
    "float32": T.TENSOR_FLOAT32,
    "float16": T.TENSOR_FLOAT16,
    "int32": T.TENSOR_INT32,
    "bool": T.TENSOR_BOOL8,
}


def option(op: TfOperator, name: str, default: Any) -> Any:
    """``op.options.<name>()``, or ``default`` when the operator carries no options table."""
    return default if op.options is None else getattr(op.options, name)()


class Converter:
    def __init__(self, graph: TfGraph) -> None:
        self.graph = graph
        self.b = ModelBuilder()
        self.operand: dict[int, int] = {}
        self.folded: dict[int, np.ndarray] = {}
        self.per_channel_forced: set[int] = set()

    # -- tensors -------------------------------------------------------------------
    def tensor_info(self, t: int) -> TfTensor:
        return self.graph.tensors[t]

    def value(self, t: int) -> np.ndarray | None:
        """The constant value of tensor ``t`` (stored or folded), None for a computed tensor."""
        if t in self.folded:
            return self.folded[t]
        return self.graph.tensors[t].data

    def const(self, t: int, what: str) -> np.ndarray:
        v = self.value(t)
        if v is None:
            raise Unmappable(f"{what} must be a constant tensor (NNAPI takes it as an operand value)")
        return v

    def ints(self, t: int, what: str) -> list[int]:
        return [int(x) for x in np.asarray(self.const(t, what)).reshape(-1)]

    def shape(self, t: int) -> tuple[int, ...]:
        """The operand shape of tensor ``t``: a rank-0 tensor is ``[1]`` (NNAPI reads rank 0 as
        "unknown rank"), as the delegate does for scalar inputs."""
        return self.graph.tensors[t].shape or (1,)

    def operand_type(self, t: int) -> tuple[T, float, int, SymmPerChannelQuantParams | None]:
        info = self.graph.tensors[t]
        if t in self.folded:
            return _FOLDED_TYPES[self.folded[t].dtype.name], 0.0, 0, None
        q = info.quant
        if q is None and info.type in QUANT_TYPES:
            # Plain integers in a quantized NNAPI type with scale 1, zero point 0: the real value is
            # the stored value, which is what the TFLite tensor means.
            return QUANT_TYPES[info.type], 1.0, 0, None
        if info.type in PLAIN_TYPES or (info.type == TT.INT64 and self.value(t) is not None):
            kind = PLAIN_TYPES.get(info.type, T.TENSOR_INT32)
            scale = q.scales[0] if (q and kind == T.TENSOR_INT32 and not q.per_channel) else 0.0
            return kind, scale, 0, None
        if info.type not in (TT.UINT8, TT.INT8, TT.INT16):
            raise Unmappable(f"tensor '{info.name}' has type {info.type_name}, which NNAPI cannot hold")
        if q is None:
            raise Unmappable(f"tensor '{info.name}' of type {info.type_name} has no quantization parameters")
        if info.type == TT.INT8 and (q.per_channel or t in self.per_channel_forced):
            if any(z != 0 for z in q.zero_points):
                raise Unmappable(f"per-channel tensor '{info.name}' has non-zero zero points")
            channels = info.shape[q.axis] if q.axis < len(info.shape) else 1
            scales = q.scales if len(q.scales) == channels else q.scales * channels
            return T.TENSOR_QUANT8_SYMM_PER_CHANNEL, 0.0, 0, SymmPerChannelQuantParams(tuple(scales), q.axis)
        if q.per_channel:
            raise Unmappable(f"tensor '{info.name}': per-channel quantization of {info.type_name} has no NNAPI type")
        if info.type == TT.INT16:
            if q.zero_points[0] != 0:
                raise Unmappable(
                    f"int16 tensor '{info.name}' has zero point {q.zero_points[0]} (NNAPI: symmetric only)"
                )
            return T.TENSOR_QUANT16_SYMM, q.scales[0], 0, None
        kind = T.TENSOR_QUANT8_ASYMM if info.type == TT.UINT8 else T.TENSOR_QUANT8_ASYMM_SIGNED
        return kind, q.scales[0], q.zero_points[0], None

    def input(self, t: int) -> int:
        """The operand of tensor ``t`` as an operation input: its producer's output, or a constant."""
        if t < 0:
            raise Unmappable("a required input is omitted")
        if t in self.operand:
            return self.operand[t]
        value = self.value(t)
        if value is None:
            info = self.graph.tensors[t]
            if info.is_variable:
                raise Unmappable(f"tensor '{info.name}' is a variable (state kept across invocations)")
            raise Unmappable(f"tensor '{info.name}' is used before any operator produces it")
        kind, scale, zp, channel = self.operand_type(t)
        if self.graph.tensors[t].type == TT.INT64:
            if value.size and (value.max() > 2**31 - 1 or value.min() < -(2**31)):
                raise Unmappable(f"int64 constant '{self.graph.tensors[t].name}' does not fit int32")
            value = value.astype(np.int32)
        index = self.b.constant(np.asarray(value).reshape(self.shape(t)), kind, scale, zp, channel)
        self.operand[t] = index
        return index

    def output(self, t: int) -> int:
        """A new operand for tensor ``t``, produced by the operation being mapped."""
        if t in self.operand:
            raise Unmappable(f"tensor '{self.graph.tensors[t].name}' is produced twice")
        kind, scale, zp, channel = self.operand_type(t)
        index = self.b.add_operand(kind, self.shape(t), scale, zp, channel)
        self.operand[t] = index
        return index

    def temporary(self, like: int, shape: Sequence[int] | None = None) -> int:
        """An operand of tensor ``like``'s type (and its shape unless given), not bound to a tensor."""
        kind, scale, zp, channel = self.operand_type(like)
        return self.b.add_operand(kind, self.shape(like) if shape is None else shape, scale, zp, channel)

    def fold(self, t: int, value: np.ndarray) -> None:
        self.folded[t] = value

    # -- scalars -------------------------------------------------------------------
    def i32(self, value: int) -> int:
        return self.b.int32(int(value))

    def f32(self, value: float) -> int:
        return self.b.float32(float(value))

    def boolean(self, value: bool) -> int:
        return self.b.boolean(bool(value))

    # -- operations ------------------------------------------------------------------
    def emit(self, kind: O, inputs: Sequence[int], outputs: Sequence[int]) -> None:
        self.b.add_operation(kind, list(inputs), list(outputs))

    def fuse_code(self, activation: int) -> int:
        """NNAPI's FuseCode for a TFLite fused activation. TANH and SIGN_BIT have none, and TFLite's
        own kernels clamp only for the RELU family (they ignore a fused TANH), so mapping either
        way would disagree with TFLite or with the file: unmappable."""
        if activation not in FUSE_CODE:
            raise Unmappable(
                f"fused activation {ACTIVATION_NAME.get(activation, activation)}: NNAPI has no fuse code for it "
                "and TFLite's kernels do not apply it"
            )
        return FUSE_CODE[activation]

    def emit_fused(self, kind: O, inputs: Sequence[int], activation: int, out: int, tail: Sequence[int] = ()) -> None:
        """``kind`` with its fused activation after ``inputs`` (then ``tail``: layout, dilation)."""
        self.emit(kind, [*inputs, self.i32(self.fuse_code(activation)), *tail], [self.output(out)])

    def activation_after(self, activation: int, source: int, out: int) -> None:
        """Apply ``activation`` to operand ``source`` into tensor ``out`` as a separate operation
        (for operators whose NNAPI form has no fused activation input)."""
        unary = {1: O.RELU, 2: O.RELU1, 3: O.RELU6}[self.fuse_code(activation)]
        self.emit(unary, [source], [self.output(out)])

    def maybe_fused_after(self, kind: O, inputs: Sequence[int], activation: int, out: int) -> None:
        """``kind`` (which takes no fuse code) followed by ``activation`` when there is one."""
        if activation == tflite.ActivationFunctionType.NONE:
            self.emit(kind, inputs, [self.output(out)])
            return
        mid = self.temporary(out)
        self.emit(kind, inputs, [mid])
        self.activation_after(activation, mid, out)

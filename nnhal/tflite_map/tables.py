"""The NNAPI ↔ TFLite correspondences, as tables with their inverses.

- ``FUSE_CODE``: TFLite ``ActivationFunctionType`` → NNAPI FuseCode (NONE, RELU, RELU1, RELU6);
  TFLite's TANH and SIGN_BIT have no FuseCode.
- ``PADDING_CODE``: TFLite ``Padding`` (SAME 0, VALID 1) → NNAPI implicit PaddingCode (SAME 1,
  VALID 2); both put the odd pixel of SAME at the end.
- ``PLAIN_TYPES`` / ``QUANT_TYPES``: TFLite ``TensorType`` → operand type for tensors that keep
  their type and for quantized integers (uint8 asymmetric, int8 asymmetric signed, int16
  symmetric); an int8 tensor with per-channel scales is TENSOR_QUANT8_SYMM_PER_CHANNEL.
- ``SAME_OPERANDS``: builtin operator name → NNAPI operation taking the same tensors in the
  same order and nothing else (unary math, activations, comparisons, logic, min/max).
- ``FUSED_BINARY``: builtin name → NNAPI operation of ``a op b`` with a fused activation (the
  FuseCode is NNAPI's third input, TFLite's option).
"""

from __future__ import annotations

import tflite

from nnhal.core.enums import OperandType as T, OperationType as O

AF = tflite.ActivationFunctionType
TT = tflite.TensorType

FUSE_CODE: dict[int, int] = {AF.NONE: 0, AF.RELU: 1, AF.RELU_N1_TO_1: 2, AF.RELU6: 3}
ACTIVATION: dict[int, int] = {code: af for af, code in FUSE_CODE.items()}
ACTIVATION_NAME: dict[int, str] = {v: k for k, v in vars(AF).items() if not k.startswith("_")}

PADDING_CODE: dict[int, int] = {tflite.Padding.SAME: 1, tflite.Padding.VALID: 2}
PADDING: dict[int, int] = {code: p for p, code in PADDING_CODE.items()}

PLAIN_TYPES: dict[int, T] = {
    TT.FLOAT32: T.TENSOR_FLOAT32,
    TT.FLOAT16: T.TENSOR_FLOAT16,
    TT.INT32: T.TENSOR_INT32,
    TT.BOOL: T.TENSOR_BOOL8,
}
QUANT_TYPES: dict[int, T] = {
    TT.UINT8: T.TENSOR_QUANT8_ASYMM,
    TT.INT8: T.TENSOR_QUANT8_ASYMM_SIGNED,
    TT.INT16: T.TENSOR_QUANT16_SYMM,
}
#: Operand type → TFLite tensor type (per-channel int8 filters are INT8 with per-channel scales).
TENSOR_TYPE: dict[T, int] = {
    **{t: tt for tt, t in PLAIN_TYPES.items()},
    **{t: tt for tt, t in QUANT_TYPES.items()},
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL: TT.INT8,
}

SAME_OPERANDS: dict[str, O] = {
    "ABS": O.ABS,
    "EXP": O.EXP,
    "LOG": O.LOG,
    "SQRT": O.SQRT,
    "RSQRT": O.RSQRT,
    "SIN": O.SIN,
    "NEG": O.NEG,
    "FLOOR": O.FLOOR,
    "RELU": O.RELU,
    "RELU6": O.RELU6,
    "RELU_N1_TO_1": O.RELU1,
    "LOGISTIC": O.LOGISTIC,
    "TANH": O.TANH,
    "HARD_SWISH": O.HARD_SWISH,
    "LOGICAL_NOT": O.LOGICAL_NOT,
    "CAST": O.CAST,
    "MAXIMUM": O.MAXIMUM,
    "MINIMUM": O.MINIMUM,
    "POW": O.POW,
    "LESS": O.LESS,
    "LESS_EQUAL": O.LESS_EQUAL,
    "GREATER": O.GREATER,
    "GREATER_EQUAL": O.GREATER_EQUAL,
    "EQUAL": O.EQUAL,
    "NOT_EQUAL": O.NOT_EQUAL,
    "LOGICAL_AND": O.LOGICAL_AND,
    "LOGICAL_OR": O.LOGICAL_OR,
    "SELECT": O.SELECT,
    "PRELU": O.PRELU,
    "DEQUANTIZE": O.DEQUANTIZE,
    "QUANTIZE": O.QUANTIZE,
}
FUSED_BINARY: dict[str, O] = {"ADD": O.ADD, "SUB": O.SUB, "MUL": O.MUL, "DIV": O.DIV}

#: NNAPI operation → builtin name, for the operations of ``SAME_OPERANDS`` and ``FUSED_BINARY``.
BUILTIN_NAME: dict[O, str] = {kind: name for name, kind in {**SAME_OPERANDS, **FUSED_BINARY}.items()}

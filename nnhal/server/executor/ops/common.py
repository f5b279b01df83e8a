"""Shared numpy bases for kernels: operand-type sets and version helpers,
(de)quantization as the reference computes it, rounding, broadcasting and the
NHWC / NCHW layout.

Fixed-point arithmetic lives in ``_fixed_point`` (and ``_fixed_point_math``),
fused activations in ``_activations``, window geometry in ``_padding`` and
shared operand checks in ``_validation``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from nnhal.core.enums import HalVersion, OperandType, OperationType
from nnhal.core.operand_types import DTYPE
from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.errors import OP_FAILED, fail

T = OperandType

FLOAT_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_FLOAT16)
QUANT8_TYPES = (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED)
#: float16/32 and both 8-bit asymmetric types: the common "data movement" set.
MOVE_TYPES = (*FLOAT_TYPES, *QUANT8_TYPES)
#: The same plus TENSOR_INT32 (ops introduced in 1.2 mostly take it).
MOVE_TYPES_INT = (*FLOAT_TYPES, T.TENSOR_INT32, *QUANT8_TYPES)

#: The HAL version each tensor operand type first appears in an operation signature.
_TYPE_VERSION: dict[OperandType, HalVersion] = {
    T.TENSOR_FLOAT16: HalVersion.V1_2,
    T.FLOAT16: HalVersion.V1_2,
    T.TENSOR_QUANT8_ASYMM_SIGNED: HalVersion.V1_3,
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL: HalVersion.V1_2,
    T.TENSOR_QUANT16_ASYMM: HalVersion.V1_2,
    T.TENSOR_QUANT16_SYMM: HalVersion.V1_2,
    T.TENSOR_QUANT8_SYMM: HalVersion.V1_2,
    T.TENSOR_BOOL8: HalVersion.V1_2,
    T.BOOL: HalVersion.V1_2,
}


def version_for_types(types: Iterable[OperandType], base: HalVersion = HalVersion.V1_0) -> HalVersion:
    """The least version at which operands of these types can appear (at least ``base``)."""
    v = base
    for t in types:
        v = max(v, _TYPE_VERSION.get(t, HalVersion.V1_0))
    return v


def float_scalar_type(t: OperandType) -> OperandType:
    """The scalar type of a float tensor's float parameters (FLOAT16 for TENSOR_FLOAT16, else FLOAT32)."""
    return T.FLOAT16 if t == T.TENSOR_FLOAT16 else T.FLOAT32


def qrange(t: OperandType) -> tuple[int, int]:
    """The representable integer range of a quantized operand type."""
    info = np.iinfo(DTYPE[t])
    return int(info.min), int(info.max)


def to_compute(x: np.ndarray) -> np.ndarray:
    """Float16 inputs are computed in float32 (results cast back by set_output)."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


# -- rounding --------------------------------------------------------------------
def round_away(x: float) -> float:
    """std::round of a scalar: half away from zero."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def round_half_away(x: np.ndarray) -> np.ndarray:
    """std::round element-wise: half away from zero, in the input's float type."""
    return np.asarray(np.where(x >= 0, np.floor(x + 0.5), -np.floor(-x + 0.5)))


# -- (de)quantization -----------------------------------------------------------
def dequantize(x: np.ndarray, scale: float, zero_point: int) -> np.ndarray:
    return (x.astype(np.float32) - np.float32(zero_point)) * np.float32(scale)


def quantize(x: np.ndarray, scale: float, zero_point: int, t: OperandType) -> np.ndarray:
    """Round half away from zero, add zp, saturate to the type's range."""
    lo, hi = qrange(t)
    q = round_half_away(np.asarray(x, np.float32) / np.float32(scale))
    return np.asarray(np.clip(q + zero_point, lo, hi).astype(DTYPE[t]))


def requantize_to(x: np.ndarray, scale: float, zero_point: int, out_scale: float, out_zp: int, t: T) -> np.ndarray:
    """Re-express quantized values on another scale (rounded half away, saturated).

    The reference dequantizes in float (int * float) and divides in double.
    """
    real = ((x.astype(np.int32) - np.int32(zero_point)).astype(np.float32) * np.float32(scale)).astype(np.float64)
    q = round_half_away(real / float(np.float32(out_scale)) + out_zp)
    lo, hi = qrange(t)
    return np.asarray(np.clip(q, lo, hi), dtype=np.int64)


# -- shapes and layout ------------------------------------------------------------
def broadcast_shape(op_type: OperationType, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The numpy broadcast result shape; GENERAL_FAILURE naming the shapes that do not broadcast."""
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(list(s)) for s in shapes)
        fail(f"{op_type.name}: shapes {listed} cannot be broadcast", OP_FAILED)
    # Broadcasting is where small operands become a large result: computed in float64 or int64.
    reserve_shape(shape, 8)
    return shape


def to_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    """A view of a 4-D tensor in NHWC order (``nchw``: the tensor is stored NCHW)."""
    return x.transpose(0, 2, 3, 1) if nchw else x


def from_nhwc(x: np.ndarray, nchw: bool) -> np.ndarray:
    """An NHWC result in the operation's layout (a C-ordered copy when transposed)."""
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if nchw else x


def static_shapes(*shapes: tuple[int, ...]) -> bool:
    """Every shape is known at prepare: a rank and no unknown (0) dimension, hence non-empty."""
    return all(shape and all(d > 0 for d in shape) for shape in shapes)

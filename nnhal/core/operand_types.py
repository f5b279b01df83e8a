"""Tables describing each OperandType: element size, numpy dtype, scalar or tensor.

Mappings are tables (with a round-trip test), never if/elif chains. Extension operand
types (prefix << 16 | type) a process registers (``register_extension_operand_type``,
done by the server's extension registry with the server's own prefixes) are looked up
in the same tables; an extension type nobody registered is a KeyError there, and
``extension_info`` answers None for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nnhal.core.enums import OperandType as T


@dataclass(frozen=True, slots=True)
class OperandTypeInfo:
    dtype: np.dtype
    is_tensor: bool
    #: Quantized types must carry scale > 0 (zero point rules are per type).
    is_quantized: bool
    #: Inclusive zero-point range for quantized types; (0, 0) when it must be 0.
    zero_point_range: tuple[int, int]

    @property
    def byte_size(self) -> int:
        return int(self.dtype.itemsize)


def _info(dtype: str, tensor: bool, quant: bool = False, zp: tuple[int, int] = (0, 0)) -> OperandTypeInfo:
    return OperandTypeInfo(np.dtype(dtype), tensor, quant, zp)


class _TypeTable(dict[T, "OperandTypeInfo"]):
    """The built-in types, then the registered extension operand types."""

    def __missing__(self, key: T) -> OperandTypeInfo:
        return _EXTENSIONS[key]


_EXTENSIONS: dict[int, OperandTypeInfo] = {}


def register_extension_operand_type(value: int, dtype: np.dtype, is_tensor: bool) -> None:
    """Make extension operand type ``value`` (the registering process's own prefix) known."""
    _EXTENSIONS[value] = OperandTypeInfo(np.dtype(dtype), is_tensor, False, (0, 0))


def extension_info(t: int) -> OperandTypeInfo | None:
    """The registered extension operand type ``t``, or None."""
    return _EXTENSIONS.get(t)


INFO: dict[T, OperandTypeInfo] = _TypeTable(
    {
        T.FLOAT32: _info("<f4", False),
        T.INT32: _info("<i4", False),
        T.UINT32: _info("<u4", False),
        T.TENSOR_FLOAT32: _info("<f4", True),
        T.TENSOR_INT32: _info("<i4", True),
        T.TENSOR_QUANT8_ASYMM: _info("u1", True, True, (0, 255)),
        T.BOOL: _info("?", False),
        T.TENSOR_QUANT16_SYMM: _info("<i2", True, True),
        T.TENSOR_FLOAT16: _info("<f2", True),
        T.TENSOR_BOOL8: _info("?", True),
        T.FLOAT16: _info("<f2", False),
        T.TENSOR_QUANT8_SYMM_PER_CHANNEL: _info("i1", True),
        T.TENSOR_QUANT16_ASYMM: _info("<u2", True, True, (0, 65535)),
        T.TENSOR_QUANT8_SYMM: _info("i1", True, True),
        T.TENSOR_QUANT8_ASYMM_SIGNED: _info("i1", True, True, (-128, 127)),
        T.SUBGRAPH: _info("<u4", False),
        T.OEM: _info("u1", False),
        T.TENSOR_OEM_BYTE: _info("u1", True),
    }
)


class _DtypeTable(dict[T, np.dtype]):
    def __missing__(self, key: T) -> np.dtype:
        return _EXTENSIONS[key].dtype


#: numpy dtype of each operand type (for building arrays).
DTYPE: dict[T, np.dtype] = _DtypeTable({t: i.dtype for t, i in INFO.items()})

FLOAT_TENSORS = frozenset({T.TENSOR_FLOAT32, T.TENSOR_FLOAT16})
QUANT8_ASYMM_TENSORS = frozenset({T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED})


def is_tensor(t: T) -> bool:
    return INFO[t].is_tensor


def is_scalar(t: T) -> bool:
    return not INFO[t].is_tensor


def element_count(dims: tuple[int, ...]) -> int:
    return math.prod(dims)


def byte_size(t: T, dims: tuple[int, ...]) -> int:
    """Bytes of a fully specified operand of type ``t`` and shape ``dims``."""
    info = INFO[t]
    if not info.is_tensor:
        return info.byte_size
    return info.byte_size * math.prod(dims)


def has_unknown_dims(t: T, dims: tuple[int, ...]) -> bool:
    """Tensor with unknown rank (no dims) or an unknown (0) dimension."""
    return INFO[t].is_tensor and (len(dims) == 0 or 0 in dims)

"""nnhal.core.operand_types: one row per OperandType, consistent with itself."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import OperandType as T
from nnhal.core.operand_types import DTYPE, INFO, byte_size, has_unknown_dims, is_scalar, is_tensor


def test_every_operand_type_has_a_row() -> None:
    assert set(INFO) == set(T) and set(DTYPE) == set(T)


@pytest.mark.parametrize("t", list(T), ids=lambda t: t.name)
def test_row_is_consistent(t: T) -> None:
    info = INFO[t]
    assert DTYPE[t] == info.dtype and info.byte_size == np.dtype(info.dtype).itemsize
    assert is_tensor(t) == info.is_tensor == (not is_scalar(t))
    assert t.name.startswith("TENSOR_") == info.is_tensor
    lo, hi = info.zero_point_range
    if (lo, hi) != (0, 0):
        assert info.is_quantized and (lo, hi) == (np.iinfo(info.dtype).min, np.iinfo(info.dtype).max)
    if info.is_tensor:
        assert byte_size(t, (2, 3)) == 6 * info.byte_size
        assert has_unknown_dims(t, ()) and has_unknown_dims(t, (2, 0)) and not has_unknown_dims(t, (2, 3))
    else:
        assert byte_size(t, ()) == info.byte_size and not has_unknown_dims(t, ())

"""BATCH_MATMUL (feature level 6): validation, every type, adjoints, quantized requantization."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import HalError, InvalidArgument
from nnhal.core.types import Operand
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

B = T.BOOL


def _mm(t: T, x: np.ndarray, y: np.ndarray, adj_x: bool = False, adj_y: bool = False, **q: float) -> np.ndarray:
    out_dims = [*x.shape[:-2], x.shape[-1] if adj_x else x.shape[-2], y.shape[-2] if adj_y else y.shape[-1]]
    xs, ys, os = q.get("xs", 0.0), q.get("ys", 0.0), q.get("os", 0.0)
    ins = [
        (tensor(t, x.shape, xs, int(q.get("xz", 0))), x),
        (tensor(t, y.shape, ys, int(q.get("yz", 0))), y),
        (scalar(B), adj_x),
        (scalar(B), adj_y),
    ]
    (out,) = run(Op.BATCH_MATMUL, ins, [tensor(t, out_dims, os, int(q.get("oz", 0)))])
    return out


@pytest.mark.parametrize("t", [T.TENSOR_FLOAT32, T.TENSOR_FLOAT16, T.TENSOR_INT32])
@pytest.mark.parametrize(("adj_x", "adj_y"), [(False, False), (True, False), (False, True), (True, True)])
def test_float_and_int_with_adjoints(t: T, adj_x: bool, adj_y: bool) -> None:
    rng = np.random.default_rng(1)
    x = rng.integers(-4, 5, (2, 3, 4))
    y = rng.integers(-4, 5, (2, 4, 5))
    xi = np.swapaxes(x, -1, -2) if adj_x else x
    yi = np.swapaxes(y, -1, -2) if adj_y else y
    out = _mm(t, xi, yi, adj_x, adj_y)
    np.testing.assert_array_equal(out.astype(np.int64), x @ y)


def test_quantized_signed_matches_real_arithmetic() -> None:
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (1, 2, 3, 4)).astype(np.int8)
    y = rng.integers(-128, 128, (1, 2, 4, 2)).astype(np.int8)
    q = {"xs": 0.5, "xz": -3, "ys": 0.25, "yz": 2, "os": 8.0, "oz": 1}
    out = _mm(T.TENSOR_QUANT8_ASYMM_SIGNED, x, y, False, False, **q)
    real = ((x.astype(np.int64) + 3) * 0.5) @ ((y.astype(np.int64) - 2) * 0.25)
    want = np.clip(np.round(real / 8.0) + 1, -128, 127)
    assert np.max(np.abs(out.astype(np.int64) - want)) <= 1


def test_validation() -> None:
    f = tensor(T.TENSOR_FLOAT32, [2, 2])
    assert validate(Op.BATCH_MATMUL, [(f, None), (f, None), (scalar(B), 0), (scalar(B), 0)], [f]) == HalVersion.AIDL_V2
    bad: dict[str, tuple[list[tuple[Operand, object]], list[Operand]]] = {
        "3 inputs": ([(f, None), (f, None), (scalar(B), 0)], [f]),
        "type mix": ([(f, None), (tensor(T.TENSOR_INT32, [2, 2]), None), (scalar(B), 0), (scalar(B), 0)], [f]),
        "rank 1": ([(tensor(T.TENSOR_FLOAT32, [2]), None), (f, None), (scalar(B), 0), (scalar(B), 0)], [f]),
        "quant8 unsigned": (
            [(tensor(T.TENSOR_QUANT8_ASYMM, [2, 2], 1.0), None)] * 2 + [(scalar(B), 0), (scalar(B), 0)],
            [tensor(T.TENSOR_QUANT8_ASYMM, [2, 2], 1.0)],
        ),
        "int adj": ([(f, None), (f, None), (scalar(T.INT32), 0), (scalar(B), 0)], [f]),
    }
    for name, (ins, outs) in bad.items():
        with pytest.raises(InvalidArgument):
            validate(Op.BATCH_MATMUL, ins, outs)
        assert name


def test_mismatched_slices_fail_at_execution() -> None:
    with pytest.raises(HalError, match="cannot multiply"):
        _mm(T.TENSOR_FLOAT32, np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
    with pytest.raises(HalError, match="batch"):
        _mm(T.TENSOR_FLOAT32, np.ones((2, 2, 3), np.float32), np.ones((3, 3, 2), np.float32))

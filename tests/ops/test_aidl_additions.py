"""The AIDL additions outside BATCH_MATMUL: PACK (feature level 6), MIRROR_PAD and REVERSE
(feature level 7), RESHAPE of TENSOR_INT32 (6) and quantized RSQRT (7)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperandLifeTime, OperationType as Op
from nnhal.core.errors import HalError, InvalidArgument
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

I32 = T.TENSOR_INT32


def test_pack_along_every_axis() -> None:
    a, b = np.arange(6).reshape(2, 3), -np.arange(6).reshape(2, 3)
    for axis in range(3):
        want = np.stack([a, b], axis)
        ins = [(scalar(T.INT32), axis), (tensor(I32, [2, 3]), a), (tensor(I32, [2, 3]), b)]
        (out,) = run(Op.PACK, ins, [tensor(I32, want.shape)])
        np.testing.assert_array_equal(out, want)
    assert validate(Op.PACK, ins, [tensor(I32, want.shape)]) == HalVersion.AIDL_V2


def test_pack_rejects_bad_models() -> None:
    f = tensor(T.TENSOR_FLOAT32, [2])
    with pytest.raises(InvalidArgument, match="axis"):
        validate(Op.PACK, [(scalar(T.INT32), 2), (f, None)], [tensor(T.TENSOR_FLOAT32, [1, 2])])
    with pytest.raises(InvalidArgument, match="rank"):
        validate(Op.PACK, [(scalar(T.INT32), 0), (f, None)], [tensor(T.TENSOR_FLOAT32, [1, 1, 2])])
    q = tensor(T.TENSOR_QUANT8_ASYMM, [2], 0.5, 1)
    with pytest.raises(InvalidArgument, match="scale"):
        validate(Op.PACK, [(scalar(T.INT32), 0), (q, None)], [tensor(T.TENSOR_QUANT8_ASYMM, [1, 2], 0.5, 2)])
    with pytest.raises(InvalidArgument):
        validate(Op.PACK, [(scalar(T.INT32), 0)], [f])


@pytest.mark.parametrize(("mode", "want"), [(0, [1, 2, 3, 2, 1]), (1, [1, 2, 3, 3, 2])])
def test_mirror_pad_modes(mode: int, want: list[int]) -> None:
    ins = [(tensor(I32, [3]), [1, 2, 3]), (tensor(I32, [1, 2]), [0, 2]), (scalar(T.INT32), mode)]
    (out,) = run(Op.MIRROR_PAD, ins, [tensor(I32, [5])])
    assert out.tolist() == want
    assert validate(Op.MIRROR_PAD, ins, [tensor(I32, [5])]) == HalVersion.AIDL_V3


def test_mirror_pad_limits() -> None:
    ins = [(tensor(I32, [3]), [1, 2, 3]), (tensor(I32, [1, 2]), [0, 3]), (scalar(T.INT32), 0)]
    with pytest.raises(HalError, match="exceeds"):
        run(Op.MIRROR_PAD, ins, [tensor(I32, [6])])
    with pytest.raises(InvalidArgument, match="mode"):
        validate(Op.MIRROR_PAD, [*ins[:2], (scalar(T.INT32), 2)], [tensor(I32, [6])])


def test_reverse() -> None:
    x = np.arange(24).reshape(2, 3, 4)
    for axis in range(3):
        ins = [(tensor(I32, x.shape), x), (tensor(I32, [1]), [axis])]
        (out,) = run(Op.REVERSE, ins, [tensor(I32, x.shape)])
        np.testing.assert_array_equal(out, np.flip(x, axis))
    assert validate(Op.REVERSE, ins, [tensor(I32, x.shape)]) == HalVersion.AIDL_V3
    const_axis = replace(tensor(I32, [1]), lifetime=OperandLifeTime.CONSTANT_COPY)
    with pytest.raises(InvalidArgument, match="axis"):
        validate(Op.REVERSE, [(tensor(I32, x.shape), None), (const_axis, [3])], [tensor(I32, x.shape)])
    with pytest.raises(InvalidArgument, match="shape"):
        validate(Op.REVERSE, [(tensor(I32, x.shape), None), (tensor(I32, [2]), None)], [tensor(I32, x.shape)])


def test_reshape_int32_needs_feature_level_6() -> None:
    ins = [(tensor(I32, [2, 3]), np.arange(6)), (tensor(I32, [1]), [-1])]
    (out,) = run(Op.RESHAPE, ins, [tensor(I32, [6])])
    assert out.tolist() == list(range(6))
    assert validate(Op.RESHAPE, ins, [tensor(I32, [6])]) == HalVersion.AIDL_V2


@pytest.mark.parametrize(("t", "zp"), [(T.TENSOR_QUANT8_ASYMM, 128), (T.TENSOR_QUANT8_ASYMM_SIGNED, 0)])
def test_quantized_rsqrt_needs_feature_level_7(t: T, zp: int) -> None:
    x = tensor(t, [4], 0.25, zp)
    out_operand = tensor(t, [4], 1 / 64, zp - 100)
    codes = np.array([zp + 1, zp + 4, zp + 16, zp], dtype=np.int64)
    (out,) = run(Op.RSQRT, [(x, codes)], [out_operand])
    # 1/sqrt(0.25)=2, 1/sqrt(1)=1, 1/sqrt(4)=0.5 on scale 1/64; 1/sqrt(0) saturates high.
    hi = 255 if t == T.TENSOR_QUANT8_ASYMM else 127
    assert out.tolist() == [zp - 100 + 128, zp - 100 + 64, zp - 100 + 32, hi]
    assert validate(Op.RSQRT, [(x, None)], [out_operand]) == HalVersion.AIDL_V3

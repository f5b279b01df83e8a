"""ROI_ALIGN and ROI_POOLING: hand-computed results and rejected inputs."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperationType as Op
from nnhal.core.errors import GeneralFailure, InvalidArgument
from nnhal.core.types import Operand
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F = T.TENSOR_FLOAT32


Q16 = T.TENSOR_QUANT16_ASYMM


I32 = T.TENSOR_INT32


def _roi_align_inputs(
    x: tuple[Operand, object], rois: tuple[Operand, object], sampling: int = 2, stride_t: T = T.FLOAT32
) -> list[tuple[Operand, object]]:
    return [
        x,
        rois,
        (tensor(I32, [1]), [0]),
        (scalar(T.INT32), 1),
        (scalar(T.INT32), 1),
        (scalar(stride_t), 1.0),
        (scalar(stride_t), 1.0),
        (scalar(T.INT32), sampling),
        (scalar(T.INT32), sampling),
        (scalar(T.BOOL), False),
    ]


def test_roi_align_float_bilinear_average() -> None:
    # Samples at (0.5, 0.5), (0.5, 1.5), (1.5, 0.5), (1.5, 1.5); the last row/column clamps.
    ins = _roi_align_inputs((tensor(F, [1, 2, 2, 1]), [1, 2, 3, 4]), (tensor(F, [1, 4]), [0, 0, 2, 2]))
    (y,) = run(Op.ROI_ALIGN, ins, [tensor(F, [1, 1, 1, 1])])
    assert y.reshape(-1)[0] == pytest.approx((2.5 + 3.5 + 3.0 + 4.0) / 4)


def test_roi_align_quant8_integer_weights() -> None:
    x = tensor(T.TENSOR_QUANT8_ASYMM, [1, 2, 2, 1], 0.5, 0)
    rois = tensor(Q16, [1, 4], 0.125, 0)
    ins = _roi_align_inputs((x, [2, 4, 6, 8]), (rois, [0, 0, 16, 16]))
    (y,) = run(Op.ROI_ALIGN, ins, [tensor(T.TENSOR_QUANT8_ASYMM, [1, 1, 1, 1], 0.5, 0)])
    # Weights are round(w / float32(1/255)): 0.25 -> 64, 0.5 -> 127 (127.49998 in float32), 1 -> 255,
    # so the sum is 1280 + 1778 + 1524 + 2040 = 6622 and 6622 / 1020 = 6.49 rounds to 6.
    assert y.reshape(-1).tolist() == [6]


def test_roi_align_validation() -> None:
    ins = _roi_align_inputs((tensor(F, [1, 2, 2, 1]), None), (tensor(T.TENSOR_FLOAT16, [1, 4]), None))
    with pytest.raises(InvalidArgument):
        validate(Op.ROI_ALIGN, ins, [tensor(F, [1, 1, 1, 1])])
    q = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [1, 2, 2, 1], 0.5, 0)
    bad_scale = _roi_align_inputs((q, None), (tensor(Q16, [1, 4], 0.25, 0), None))
    with pytest.raises(InvalidArgument):
        validate(Op.ROI_ALIGN, bad_scale, [q])
    good = _roi_align_inputs((q, None), (tensor(Q16, [1, 4], 0.125, 0), None))
    assert validate(Op.ROI_ALIGN, good, [q]) == HalVersion.V1_3
    with pytest.raises(InvalidArgument):
        validate(Op.ROI_ALIGN, good[:9], [q])


def test_roi_align_rejects_roi_outside_feature_map() -> None:
    ins = _roi_align_inputs((tensor(F, [1, 2, 2, 1]), [1, 2, 3, 4]), (tensor(F, [1, 4]), [0, 0, 3, 2]))
    with pytest.raises(GeneralFailure):
        run(Op.ROI_ALIGN, ins, [tensor(F, [1, 1, 1, 1])])


def _roi_pool_inputs(
    x: tuple[Operand, object], rois: tuple[Operand, object], out: int, nchw: bool = False
) -> list[tuple[Operand, object]]:
    return [
        x,
        rois,
        (tensor(I32, [1]), [0]),
        (scalar(T.INT32), out),
        (scalar(T.INT32), out),
        (scalar(T.FLOAT32), 1.0),
        (scalar(T.FLOAT32), 1.0),
        (scalar(T.BOOL), nchw),
    ]


def test_roi_pooling_max_per_cell_float16_nchw() -> None:
    x = (tensor(T.TENSOR_FLOAT16, [1, 1, 2, 2]), [1, 2, 3, 4])
    ins = _roi_pool_inputs(x, (tensor(T.TENSOR_FLOAT16, [1, 4]), [0, 0, 1, 1]), 2, nchw=True)
    ins[5] = (scalar(T.FLOAT16), 1.0)
    ins[6] = (scalar(T.FLOAT16), 1.0)
    (y,) = run(Op.ROI_POOLING, ins, [tensor(T.TENSOR_FLOAT16, [1, 1, 2, 2])])
    assert y.reshape(-1).tolist() == [1, 2, 3, 4]
    ins = _roi_pool_inputs((tensor(F, [1, 2, 2, 1]), [1, 2, 3, 4]), (tensor(F, [1, 4]), [0, 0, 1, 1]), 1)
    (y,) = run(Op.ROI_POOLING, ins, [tensor(F, [1, 1, 1, 1])])
    assert y.reshape(-1).tolist() == [4]


def test_roi_pooling_quant_output_must_keep_input_quantization() -> None:
    x = tensor(T.TENSOR_QUANT8_ASYMM, [1, 2, 2, 1], 0.5, 3)
    ins = _roi_pool_inputs((x, None), (tensor(Q16, [1, 4], 0.125, 0), None), 1)
    with pytest.raises(InvalidArgument):
        validate(Op.ROI_POOLING, ins, [tensor(T.TENSOR_QUANT8_ASYMM, [1, 1, 1, 1], 0.5, 0)])
    assert validate(Op.ROI_POOLING, ins, [tensor(T.TENSOR_QUANT8_ASYMM, [1, 1, 1, 1], 0.5, 3)]) == HalVersion.V1_2


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_roi_align_rejects_non_finite_rois(bad: float) -> None:
    """Found by the fuzz campaign: a NaN box became index -2^63 (IndexError, "internal error")."""
    ins = _roi_align_inputs((tensor(F, [1, 2, 2, 1]), [1, 2, 3, 4]), (tensor(F, [1, 4]), [0, 0, bad, 2]))
    with pytest.raises(GeneralFailure, match="malformed"):
        run(Op.ROI_ALIGN, ins, [tensor(F, [1, 1, 1, 1])])


def test_roi_pooling_loops_observe_the_execution_time_limit() -> None:
    """Found by make fuzz: a 1-box pooling to a huge output size ran 52 s in a Python loop;
    the loop now checkpoints, so the server's maximum execution time ends it."""
    from nnhal.core.errors import MissedDeadlinePersistent
    from nnhal.server.executor.context import ExecutionContext
    from nnhal.server.executor.control import ExecutionControl
    from nnhal.server.executor.registry import lookup

    ins = _roi_pool_inputs((tensor(F, [1, 2, 2, 1]), [1, 2, 3, 4]), (tensor(F, [1, 4]), [0, 0, 1, 1]), 64)
    values: list[np.ndarray | None] = [
        np.asarray(v, np.float32).reshape(o.dimensions) if o.dimensions else np.asarray(v) for o, v in ins
    ]
    control = ExecutionControl(max_execution_ns=0)
    control.start()
    ctx = ExecutionContext(Op.ROI_POOLING, values, [o for o, _ in ins], [tensor(F)], None, False, control)
    spec = lookup(Op.ROI_POOLING)
    assert spec is not None
    with pytest.raises(MissedDeadlinePersistent):
        spec.execute(ctx)

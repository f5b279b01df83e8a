"""Detection operations: validation failures and hand-computed results."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnhal.core.enums import HalVersion
from nnhal.core.enums import OperationType as Op
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


def test_bbox_transform_float_and_quant() -> None:
    ins = [
        (tensor(F, [1, 4]), [0, 0, 10, 10]),
        (tensor(F, [1, 8]), [0, 0, 0, 0, 0.1, 0, math.log(2.0), 0]),
        (tensor(I32, [1]), [0]),
        (tensor(F, [1, 2]), [20, 20]),
    ]
    (y,) = run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, [tensor(F, [1, 8])])
    np.testing.assert_allclose(y.reshape(-1), [0, 0, 10, 10, 0, 0, 16, 10], atol=1e-5)

    deltas = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [1, 4], 0.05, 0)
    qins = [
        (tensor(Q16, [1, 4], 0.125, 0), [0, 0, 80, 80]),
        (deltas, [2, 0, 0, 0]),
        (tensor(I32, [1]), [0]),
        (tensor(Q16, [1, 2], 0.125, 0), [160, 160]),
    ]
    out = tensor(Q16, [1, 4], 0.125, 0)
    assert validate(Op.AXIS_ALIGNED_BBOX_TRANSFORM, qins, [out]) == HalVersion.V1_3
    (y,) = run(Op.AXIS_ALIGNED_BBOX_TRANSFORM, qins, [out])
    assert y.reshape(-1).tolist() == [8, 0, 88, 80]


def test_bbox_transform_validation() -> None:
    ins = [(tensor(F, [1, 4]), None), (tensor(F, [1, 4]), None), (tensor(I32, [1]), None)]
    with pytest.raises(InvalidArgument):
        validate(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, [tensor(F, [1, 4])])
    ins.append((tensor(F, [1, 2]), None))
    with pytest.raises(InvalidArgument):
        validate(Op.AXIS_ALIGNED_BBOX_TRANSFORM, ins, [tensor(T.TENSOR_FLOAT16, [1, 4])])


_NMS_SCORES = [[0.1, 0.9], [0.1, 0.8], [0.1, 0.7]]
_NMS_BOXES = [
    [0, 0, 1, 1, 0, 0, 10, 10],
    [0, 0, 1, 1, 1, 1, 11, 11],  # IoU with the first = 81 / 119
    [0, 0, 1, 1, 20, 20, 30, 30],
]


def _nms_inputs(
    score_thr: float, max_det: int, kernel: int, iou: float, nms_thr: float
) -> list[tuple[Operand, object]]:
    return [
        (tensor(F, [3, 2]), _NMS_SCORES),
        (tensor(F, [3, 8]), _NMS_BOXES),
        (tensor(I32, [3]), [0, 0, 0]),
        (scalar(T.FLOAT32), score_thr),
        (scalar(T.INT32), max_det),
        (scalar(T.INT32), kernel),
        (scalar(T.FLOAT32), iou),
        (scalar(T.FLOAT32), 0.5),
        (scalar(T.FLOAT32), nms_thr),
    ]


def _nms_outputs() -> list[Operand]:
    return [tensor(F, [0]), tensor(F, [0, 4]), tensor(I32, [0]), tensor(I32, [0])]


def test_box_with_nms_limit_hard_and_linear() -> None:
    scores, boxes, classes, batches = run(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(0.0, -1, 0, 0.5, 0.1), _nms_outputs())
    np.testing.assert_allclose(scores, [0.9, 0.7])
    assert boxes.tolist() == [[0, 0, 10, 10], [20, 20, 30, 30]]
    assert classes.tolist() == [1, 1] and batches.tolist() == [0, 0]

    scores, boxes, _, _ = run(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(0.0, -1, 1, 0.5, 0.1), _nms_outputs())
    np.testing.assert_allclose(scores, [0.9, 0.7, 0.8 * (1 - 81 / 119)], rtol=1e-5)
    assert boxes[2].tolist() == [1, 1, 11, 11]

    scores, _, _, _ = run(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(0.0, 1, 2, 0.5, 0.1), _nms_outputs())
    np.testing.assert_allclose(scores, [0.9])


def test_box_with_nms_limit_no_detections() -> None:
    outs = run(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(0.95, -1, 0, 0.5, 0.1), _nms_outputs())
    assert [o.shape for o in outs] == [(0,), (0, 4), (0,), (0,)]


def test_box_with_nms_limit_validation() -> None:
    outs = _nms_outputs()
    outs[2] = tensor(F, [0])
    with pytest.raises(InvalidArgument):
        validate(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(0.0, -1, 0, 0.5, 0.1), outs)
    with pytest.raises(InvalidArgument):
        validate(Op.BOX_WITH_NMS_LIMIT, _nms_inputs(0.0, -1, 3, 0.5, 0.1), _nms_outputs())


def _proposal_inputs(iou: float) -> list[tuple[Operand, object]]:
    return [
        (tensor(F, [1, 1, 1, 2]), [0.6, 0.9]),
        (tensor(F, [1, 1, 1, 8]), [0] * 8),
        (tensor(F, [2, 4]), [[0, 0, 4, 4], [0, 0, 8, 8]]),
        (tensor(F, [1, 2]), [10, 10]),
        (scalar(T.FLOAT32), 1.0),
        (scalar(T.FLOAT32), 1.0),
        (scalar(T.INT32), -1),
        (scalar(T.INT32), -1),
        (scalar(T.FLOAT32), iou),
        (scalar(T.FLOAT32), 1.0),
        (scalar(T.BOOL), False),
    ]


def test_generate_proposals_orders_by_score_and_suppresses() -> None:
    outs = [tensor(F, [0]), tensor(F, [0, 4]), tensor(I32, [0])]
    scores, boxes, batches = run(Op.GENERATE_PROPOSALS, _proposal_inputs(0.3), outs)  # IoU 0.25 keeps both
    np.testing.assert_allclose(scores, [0.9, 0.6])
    assert boxes.tolist() == [[0, 0, 8, 8], [0, 0, 4, 4]] and batches.tolist() == [0, 0]
    scores, _, _ = run(Op.GENERATE_PROPOSALS, _proposal_inputs(0.2), outs)
    np.testing.assert_allclose(scores, [0.9])
    bad = _proposal_inputs(0.3)
    bad[2] = (tensor(T.TENSOR_QUANT16_SYMM, [2, 4], 0.125), None)
    with pytest.raises(InvalidArgument):
        validate(Op.GENERATE_PROPOSALS, bad, outs)


def _postprocess_inputs(regular: bool) -> list[tuple[Operand, object]]:
    return [
        (tensor(F, [1, 2, 3]), [[0, 0.9, 0.1], [0, 0.8, 0.7]]),
        (tensor(F, [1, 2, 4]), [0] * 8),
        (tensor(F, [2, 4]), [[5, 5, 10, 10], [5, 5, 10, 10]]),
        *[(scalar(T.FLOAT32), 1.0) for _ in range(4)],
        (scalar(T.BOOL), regular),
        (scalar(T.INT32), 3),
        (scalar(T.INT32), 1),
        (scalar(T.INT32), 1),
        (scalar(T.FLOAT32), 0.0),
        (scalar(T.FLOAT32), 0.5),
        (scalar(T.BOOL), False),
    ]


def _postprocess_outputs() -> list[Operand]:
    return [tensor(F, [1, 3]), tensor(F, [1, 3, 4]), tensor(I32, [1, 3]), tensor(I32, [1])]


def test_detection_postprocessing_regular_and_fast() -> None:
    scores, boxes, classes, counts = run(Op.DETECTION_POSTPROCESSING, _postprocess_inputs(True), _postprocess_outputs())
    np.testing.assert_allclose(scores, [[0.9, 0.7, 0]])
    assert classes.tolist() == [[0, 1, 0]] and counts.tolist() == [2]
    assert boxes[0, :2].tolist() == [[0, 0, 10, 10], [0, 0, 10, 10]]

    scores, _, classes, counts = run(Op.DETECTION_POSTPROCESSING, _postprocess_inputs(False), _postprocess_outputs())
    np.testing.assert_allclose(scores, [[0.9, 0, 0]])
    assert classes.tolist() == [[0, 0, 0]] and counts.tolist() == [1]


def test_detection_postprocessing_validation() -> None:
    ins = _postprocess_inputs(True)
    ins[0] = (tensor(T.TENSOR_QUANT8_ASYMM, [1, 2, 3], 0.1, 0), None)
    with pytest.raises(InvalidArgument):
        validate(Op.DETECTION_POSTPROCESSING, ins, _postprocess_outputs())
    ins = _postprocess_inputs(True)
    ins[8] = (scalar(T.INT32), 0)
    with pytest.raises(InvalidArgument):
        validate(Op.DETECTION_POSTPROCESSING, ins, _postprocess_outputs())


def test_heatmap_max_keypoint_subpixel_peak() -> None:
    heatmap = [0, 1, 0, 1, 4, 2, 0, 1, 0]  # 3x3, one keypoint
    ins = [(tensor(F, [1, 3, 3, 1]), heatmap), (tensor(F, [1, 4]), [0, 0, 6, 6]), (scalar(T.BOOL), False)]
    score, keypoint = run(Op.HEATMAP_MAX_KEYPOINT, ins, [tensor(F, [1, 1]), tensor(F, [1, 1, 2])])
    # b = (-0.5, 0), A = diag(-5, -6): delta = (0.1, 0), score = 4 + 0.05 - 0.025.
    assert score.reshape(-1)[0] == pytest.approx(4.025, rel=1e-5)
    np.testing.assert_allclose(keypoint.reshape(-1), [3.2, 3.0], rtol=1e-5)


def test_heatmap_max_keypoint_quant_signed() -> None:
    x = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [1, 1, 3, 3], 0.5, -128)
    boxes = tensor(Q16, [1, 4], 0.125, 0)
    out_score = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [1, 1], 0.5, -128)
    out_kp = tensor(Q16, [1, 1, 2], 0.125, 0)
    codes = [-128, -126, -128, -126, -120, -126, -128, -126, -128]  # 0, 1, 0 / 1, 4, 1 / 0, 1, 0
    ins = [(x, codes), (boxes, [0, 0, 48, 48]), (scalar(T.BOOL), True)]
    assert validate(Op.HEATMAP_MAX_KEYPOINT, ins, [out_score, out_kp]) == HalVersion.V1_3
    score, keypoint = run(Op.HEATMAP_MAX_KEYPOINT, ins, [out_score, out_kp])
    assert score.tolist() == [[-120]]
    assert keypoint.reshape(-1).tolist() == [24, 24]
    with pytest.raises(InvalidArgument):
        validate(Op.HEATMAP_MAX_KEYPOINT, ins, [out_score, tensor(Q16, [1, 1, 2], 0.25, 0)])

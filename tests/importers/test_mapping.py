"""The importer's operator mappings on small synthetic models: each runs in-process through the
executor and in LiteRT on the same inputs, and the outputs must agree (a table drives them);
plus what the mapping must look like (fused activations, folded float16 weights, per-channel
types, constant pools)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from nnhal.core.enums import OperandLifeTime, OperandType, OperationType
from nnhal.importers.compare import diff
from nnhal.importers.errors import UnsupportedOperators
from nnhal.importers.litert import LiteRtRunner
from nnhal.importers.tflite_model import import_tflite
from tests.conftest import sized
from tests.importers.conftest import needs_litert, run_in_process
from tests.importers.tflite_writer import Op, Sparse, Tensor

RNG = np.random.default_rng(7)
F = Callable[..., Path]
Case = tuple[list[Tensor], list[Op], list[int], list[int]]


def _w(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def conv_same_stride2_relu6() -> Case:
    ts = [Tensor("x", (1, 9, 9, 3)), Tensor("w", (4, 3, 3, 3), data=_w(4, 3, 3, 3)), Tensor("b", (4,), data=_w(4))]
    ts.append(Tensor("y", (1, 5, 5, 4)))
    ops = [
        Op(
            "CONV_2D",
            [0, 1, 2],
            [3],
            "Conv2DOptions",
            {"Padding": 0, "StrideW": 2, "StrideH": 2, "FusedActivationFunction": 3},
        )
    ]
    return ts, ops, [0], [3]


def conv_dilated_valid() -> Case:
    ts = [Tensor("x", (1, 9, 9, 2)), Tensor("w", (3, 3, 3, 2), data=_w(3, 3, 3, 2)), Tensor("b", (3,), data=_w(3))]
    ts.append(Tensor("y", (1, 5, 5, 3)))
    fields = {"Padding": 1, "StrideW": 1, "StrideH": 1, "DilationWFactor": 2, "DilationHFactor": 2}
    return ts, [Op("CONV_2D", [0, 1, 2], [3], "Conv2DOptions", fields)], [0], [3]


def depthwise_multiplier(activation: int = 1) -> Case:
    ts = [Tensor("x", (1, 6, 6, 2)), Tensor("w", (1, 3, 3, 4), data=_w(1, 3, 3, 4)), Tensor("b", (4,), data=_w(4))]
    ts.append(Tensor("y", (1, 6, 6, 4)))
    fields = {"Padding": 0, "StrideW": 1, "StrideH": 1, "DepthMultiplier": 2, "FusedActivationFunction": activation}
    return ts, [Op("DEPTHWISE_CONV_2D", [0, 1, 2], [3], "DepthwiseConv2DOptions", fields)], [0], [3]


def fully_connected_keep_dims_no_bias() -> Case:
    ts = [Tensor("x", (2, 3, 5)), Tensor("w", (4, 5), data=_w(4, 5)), Tensor("y", (2, 3, 4))]
    ops = [
        Op(
            "FULLY_CONNECTED",
            [0, 1, -1],
            [2],
            "FullyConnectedOptions",
            {"KeepNumDims": True, "FusedActivationFunction": 1},
        )
    ]
    return ts, ops, [0], [2]


def pad_concat_mean_softmax() -> Case:
    ts = [
        Tensor("a", (1, 4, 4, 2)),
        Tensor("b", (1, 4, 4, 3)),
        Tensor("pads", (4, 2), "int32", np.array([[0, 0], [1, 1], [2, 0], [0, 0]], np.int32)),
        Tensor("padded", (1, 6, 6, 2)),
        Tensor("pads_b", (4, 2), "int32", np.array([[0, 0], [1, 1], [2, 0], [0, 0]], np.int32)),
        Tensor("padded_b", (1, 6, 6, 3)),
        Tensor("cat", (1, 6, 6, 5)),
        Tensor("axes", (2,), "int32", np.array([1, 2], np.int32)),
        Tensor("mean", (1, 5)),
        Tensor("probs", (1, 5)),
    ]
    ops = [
        Op("PAD", [0, 2], [3]),
        Op("PAD", [1, 4], [5]),
        Op("CONCATENATION", [3, 5], [6], "ConcatenationOptions", {"Axis": -1, "FusedActivationFunction": 1}),
        Op("MEAN", [6, 7], [8], "ReducerOptions", {"KeepDims": False}),
        Op("SOFTMAX", [8], [9], "SoftmaxOptions", {"Beta": 0.5}),
    ]
    return ts, ops, [0, 1], [9]


def slices_and_shapes() -> Case:
    ts = [
        Tensor("x", (1, 6, 4, 3)),
        Tensor("begin", (4,), "int32", np.array([0, 1, 0, 0], np.int32)),
        Tensor("end", (4,), "int32", np.array([1, 6, 4, 3], np.int32)),
        Tensor("strides", (4,), "int32", np.array([1, 2, 1, 1], np.int32)),
        Tensor("sliced", (5, 4, 3) if False else (3, 4, 3)),
        Tensor("perm", (3,), "int32", np.array([2, 0, 1], np.int32)),
        Tensor("t", (3, 3, 4)),
        Tensor("shape", (2,), "int32", np.array([9, -1], np.int32)),
        Tensor("r", (9, 4)),
        Tensor("y", (9, 4)),
    ]
    ops = [
        Op("STRIDED_SLICE", [0, 1, 2, 3], [4], "StridedSliceOptions", {"ShrinkAxisMask": 1}),
        Op("TRANSPOSE", [4, 5], [6]),
        Op("RESHAPE", [6, 7], [8]),
        Op("LOGISTIC", [8], [9]),
    ]
    return ts, ops, [0], [9]


def resize_half_pixel() -> Case:
    ts = [
        Tensor("x", (1, 3, 5, 2)),
        Tensor("size", (2,), "int32", np.array([6, 7], np.int32)),
        Tensor("y", (1, 6, 7, 2)),
    ]
    ops = [Op("RESIZE_BILINEAR", [0, 1], [2], "ResizeBilinearOptions", {"HalfPixelCenters": True})]
    return ts, ops, [0], [2]


def float16_weights_dequantized() -> Case:
    w = _w(3, 1, 1, 2).astype(np.float16)
    ts = [Tensor("x", (1, 4, 4, 2)), Tensor("w16", (3, 1, 1, 2), "float16", w), Tensor("w", (3, 1, 1, 2))]
    ts += [Tensor("b", (3,), data=_w(3)), Tensor("y", (1, 4, 4, 3))]
    ops = [
        Op("DEQUANTIZE", [1], [2]),
        Op("CONV_2D", [0, 2, 3], [4], "Conv2DOptions", {"Padding": 1, "StrideW": 1, "StrideH": 1}),
    ]
    return ts, ops, [0], [4]


def sparse_weights_densified() -> Case:
    dense = np.zeros((3, 4), np.float32)
    dense[0, 1], dense[0, 3], dense[2, 0] = 1.5, -2.0, 0.25
    sparse = Sparse(segments=[0, 2, 2, 3], indices=[1, 3, 0])
    ts = [Tensor("x", (2, 4)), Tensor("ws", (3, 4), data=np.array([1.5, -2.0, 0.25], np.float32), sparse=sparse)]
    ts += [Tensor("w", (3, 4)), Tensor("y", (2, 3))]
    ops = [Op("DENSIFY", [1], [2]), Op("FULLY_CONNECTED", [0, 2, -1], [3], "FullyConnectedOptions", {})]
    return ts, ops, [0], [3]


def quantized_per_channel_conv() -> Case:
    wq = RNG.integers(-127, 128, (3, 3, 3, 2)).astype(np.int8)
    ts = [
        Tensor("x", (1, 5, 5, 2)),
        Tensor("xq", (1, 5, 5, 2), "int8", scales=(0.02,), zero_points=(-3,)),
        Tensor("w", (3, 3, 3, 2), "int8", wq, scales=(0.01, 0.02, 0.005), zero_points=(0, 0, 0), axis=0),
        Tensor("b", (3,), "int32", np.array([10, -20, 5], np.int32), scales=(0.0002, 0.0004, 0.0001), axis=0),
        Tensor("yq", (1, 5, 5, 3), "int8", scales=(0.05,), zero_points=(2,)),
        Tensor("y", (1, 5, 5, 3)),
    ]
    ops = [
        Op("QUANTIZE", [0], [1]),
        Op(
            "CONV_2D",
            [1, 2, 3],
            [4],
            "Conv2DOptions",
            {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": 1},
        ),
        Op("DEQUANTIZE", [4], [5]),
    ]
    return ts, ops, [0], [5]


def elementwise_mix() -> Case:
    ts = [
        Tensor("a", (2, 3)),
        Tensor("b", (3,), data=_w(3)),
        Tensor("sum", (2, 3)),
        Tensor("prod", (2, 3)),
        Tensor("alpha", (3,), data=np.abs(_w(3))),
        Tensor("pr", (2, 3)),
        Tensor("hs", (2, 3)),
        Tensor("lr", (2, 3)),
    ]
    ops = [
        Op("ADD", [0, 1], [2], "AddOptions", {"FusedActivationFunction": 2}),
        Op("MUL", [2, 0], [3], "MulOptions", {}),
        Op("PRELU", [3, 4], [5]),
        Op("HARD_SWISH", [5], [6]),
        Op("LEAKY_RELU", [6], [7], "LeakyReluOptions", {"Alpha": 0.1}),
    ]
    return ts, ops, [0], [7]


CASES = [
    conv_same_stride2_relu6,
    conv_dilated_valid,
    depthwise_multiplier,
    fully_connected_keep_dims_no_bias,
    pad_concat_mean_softmax,
    slices_and_shapes,
    resize_half_pixel,
    float16_weights_dequantized,
    sparse_weights_densified,
    quantized_per_channel_conv,
    elementwise_mix,
]


@needs_litert
@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_agrees_with_litert(case: Callable[[], Case], model_file: F) -> None:
    path = model_file(*case())
    imported = import_tflite(path)
    inputs = imported.random_inputs(3)
    ours = run_in_process(imported, inputs)
    reference = LiteRtRunner(path).run(inputs)
    for spec, a, b in zip(imported.outputs, ours, reference):
        d = diff(a, b)
        if case is quantized_per_channel_conv:  # requantization rounding: within one output step
            assert d.max_abs <= 0.05 + 1e-6, (spec.name, d)
        else:
            assert d.ok, (spec.name, d)


def _ops(path: Path) -> list[OperationType]:
    return [op.type for op in import_tflite(path).model.main.operations]


def test_fused_tanh_is_unmappable(model_file: F) -> None:
    # TFLite's kernels ignore a fused TANH and NNAPI has no fuse code for it: either mapping would lie.
    with pytest.raises(UnsupportedOperators, match=r"#0 DEPTHWISE_CONV_2D: fused activation TANH"):
        import_tflite(model_file(*depthwise_multiplier(activation=4)))


def test_concatenation_activation_is_applied_after(model_file: F) -> None:
    kinds = _ops(model_file(*pad_concat_mean_softmax()))
    assert kinds[:4] == [OperationType.PAD, OperationType.PAD, OperationType.CONCATENATION, OperationType.RELU]


def test_float16_dequantize_and_densify_fold_into_float32_constants(model_file: F) -> None:
    for case in (float16_weights_dequantized, sparse_weights_densified):
        model = import_tflite(model_file(*case())).model
        assert OperationType.DEQUANTIZE not in [op.type for op in model.main.operations]
        weights = model.main.operands[model.main.operations[0].inputs[1]]
        assert weights.type == OperandType.TENSOR_FLOAT32
        assert weights.lifetime in (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE)


def test_per_channel_filter_and_bias(model_file: F) -> None:
    model = import_tflite(model_file(*quantized_per_channel_conv())).model
    conv = next(op for op in model.main.operations if op.type == OperationType.CONV_2D)
    x, w, b = (model.main.operands[i] for i in conv.inputs[:3])
    assert x.type == OperandType.TENSOR_QUANT8_ASYMM_SIGNED and (x.scale, x.zero_point) == pytest.approx((0.02, -3))
    assert w.type == OperandType.TENSOR_QUANT8_SYMM_PER_CHANNEL
    assert w.channel_quant is not None and w.channel_quant.channel_dim == 0
    assert w.channel_quant.scales == pytest.approx((0.01, 0.02, 0.005))
    assert b.type == OperandType.TENSOR_INT32 and b.scale == 0.0


def test_large_constants_go_to_a_pool(model_file: F) -> None:
    model = import_tflite(model_file(*conv_same_stride2_relu6())).model
    conv = model.main.operations[0]
    weights, bias = (model.main.operands[i] for i in conv.inputs[1:3])
    assert weights.lifetime == OperandLifeTime.CONSTANT_REFERENCE  # 432 bytes
    assert bias.lifetime == OperandLifeTime.CONSTANT_COPY  # 16 bytes
    assert model.pools and sized(model.pools[0]).size >= 432


def test_inputs_and_outputs_keep_tflite_order_and_names(model_file: F) -> None:
    imported = import_tflite(model_file(*pad_concat_mean_softmax()))
    assert [s.name for s in imported.inputs] == ["a", "b"]
    assert [(s.name, s.shape, s.dtype) for s in imported.outputs] == [("probs", (1, 5), "float32")]
    assert [imported.model.main.operands[i].dimensions for i in imported.model.main.input_indexes] == [
        (1, 4, 4, 2),
        (1, 4, 4, 3),
    ]

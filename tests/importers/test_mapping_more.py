"""More operator mappings against LiteRT: splits, gathers, packs, transposed convolution,
pooling, resizing, reductions, uint8 arithmetic (a table of small synthetic models)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from nnhal.importers.compare import diff
from nnhal.importers.litert import LiteRtRunner
from nnhal.importers.tflite_model import import_tflite
from tests.importers.conftest import needs_litert, run_in_process
from tests.importers.tflite_writer import Op, Tensor

RNG = np.random.default_rng(11)
Case = tuple[list[Tensor], list[Op], list[int], list[int]]


def _i32(*values: int) -> np.ndarray:
    return np.asarray(values, np.int32)


def splits_and_pack() -> Case:
    ts = [
        Tensor("x", (2, 6, 3)),
        Tensor("axis", (), "int32", _i32(1).reshape(())),
        Tensor("s0", (2, 3, 3)),
        Tensor("s1", (2, 3, 3)),
        Tensor("sizes", (2,), "int32", _i32(1, 2)),
        Tensor("axis_v", (), "int32", _i32(2).reshape(())),
        Tensor("v0", (2, 3, 1)),
        Tensor("v1", (2, 3, 2)),
        Tensor("packed", (2, 2, 3, 3)),
        Tensor("v1s", (2, 3, 2)),
    ]
    ops = [
        Op("SPLIT", [1, 0], [2, 3], "SplitOptions", {"NumSplits": 2}),
        Op("SPLIT_V", [3, 4, 5], [6, 7], "SplitVOptions", {"NumSplits": 2}),
        Op("PACK", [2, 3], [8], "PackOptions", {"ValuesCount": 2, "Axis": 1}),
        Op("EXP", [7], [9]),
    ]
    return ts, ops, [0], [8, 6, 9]


def gather_tile_squeeze() -> Case:
    ts = [
        Tensor("x", (4, 1, 3)),
        Tensor("idx", (2,), "int32", _i32(3, 1)),
        Tensor("g", (2, 1, 3)),
        Tensor("sq", (2, 3)),
        Tensor("mult", (2,), "int32", _i32(2, 1)),
        Tensor("t", (4, 3)),
        Tensor("ax", (1,), "int32", _i32(0)),
        Tensor("e", (1, 4, 3)),
    ]
    ops = [
        Op("GATHER", [0, 1], [2], "GatherOptions", {"Axis": 0}),
        Op("SQUEEZE", [2], [3], "SqueezeOptions", {}),
        Op("TILE", [3, 4], [5]),
        Op("EXPAND_DIMS", [5, 6], [7]),
    ]
    return ts, ops, [0], [7]


def transpose_conv_bias() -> Case:
    w = RNG.standard_normal((3, 3, 3, 2)).astype(np.float32)
    ts = [
        Tensor("shape", (4,), "int32", _i32(1, 8, 8, 3)),
        Tensor("w", (3, 3, 3, 2), data=w),
        Tensor("x", (1, 4, 4, 2)),
        Tensor("b", (3,), data=RNG.standard_normal(3).astype(np.float32)),
        Tensor("y", (1, 8, 8, 3)),
    ]
    return (
        ts,
        [Op("TRANSPOSE_CONV", [0, 1, 2, 3], [4], "TransposeConvOptions", {"Padding": 0, "StrideW": 2, "StrideH": 2})],
        [2],
        [4],
    )


def pools_resize_norm() -> Case:
    ts = [
        Tensor("x", (1, 7, 7, 2)),
        Tensor("avg", (1, 4, 4, 2)),
        Tensor("size", (2,), "int32", _i32(9, 5)),
        Tensor("nn", (1, 9, 5, 2)),
        Tensor("l2", (1, 9, 5, 2)),
        Tensor("d2s_in", (1, 2, 2, 8)),
        Tensor("d2s", (1, 4, 4, 2)),
    ]
    ops = [
        Op(
            "AVERAGE_POOL_2D",
            [0],
            [1],
            "Pool2DOptions",
            {"Padding": 0, "StrideW": 2, "StrideH": 2, "FilterWidth": 3, "FilterHeight": 3},
        ),
        Op("RESIZE_NEAREST_NEIGHBOR", [1, 2], [3], "ResizeNearestNeighborOptions", {}),
        Op("L2_NORMALIZATION", [3], [4], "L2NormOptions", {}),
        Op("DEPTH_TO_SPACE", [5], [6], "DepthToSpaceOptions", {"BlockSize": 2}),
    ]
    return ts, ops, [0, 5], [4, 6]


def reductions_and_arith() -> Case:
    ts = [
        Tensor("a", (2, 3, 4)),
        Tensor("b", (2, 3, 4)),
        Tensor("d", (2, 3, 4)),
        Tensor("q", (2, 3, 4)),
        Tensor("axes", (1,), "int32", _i32(-1)),
        Tensor("mx", (2, 3)),
        Tensor("am", (2, 3), "int32"),
        Tensor("ls", (2, 3)),
        Tensor("begin", (3,), "int32", _i32(0, 1, 1)),
        Tensor("size", (3,), "int32", _i32(2, -1, 2)),
        Tensor("sl", (2, 2, 2)),
    ]
    ops = [
        Op("SUB", [0, 1], [2], "SubOptions", {"FusedActivationFunction": 0}),
        Op("DIV", [2, 1], [3], "DivOptions", {}),
        Op("REDUCE_MAX", [3, 4], [5], "ReducerOptions", {"KeepDims": False}),
        Op("ARG_MAX", [0, 4], [6], "ArgMaxOptions", {"OutputType": 2}),
        Op("LOG_SOFTMAX", [5], [7]),
        Op("SLICE", [3, 8, 9], [10]),
    ]
    return ts, ops, [0, 1], [7, 6, 10]


def uint8_add() -> Case:
    ts = [
        Tensor("a", (1, 8)),
        Tensor("b", (1, 8)),
        Tensor("qa", (1, 8), "uint8", scales=(1 / 128,), zero_points=(10,)),
        Tensor("qb", (1, 8), "uint8", scales=(1 / 64,), zero_points=(120,)),
        Tensor("qs", (1, 8), "uint8", scales=(1 / 50,), zero_points=(30,)),
        Tensor("s", (1, 8)),
        Tensor("pads", (2, 2), "int32", np.array([[0, 0], [1, 2]], np.int32)),
        Tensor("val", (), data=np.array(0.5, np.float32)),
        Tensor("p", (1, 11)),
    ]
    ops = [
        Op("QUANTIZE", [0], [2]),
        Op("QUANTIZE", [1], [3]),
        Op("ADD", [2, 3], [4], "AddOptions", {}),
        Op("DEQUANTIZE", [4], [5]),
        Op("PADV2", [5, 6, 7], [8]),
    ]
    return ts, ops, [0, 1], [8]


def uint8_conv_net() -> Case:
    """A quantized MobileNet-style chain: uint8 CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, SOFTMAX."""
    sx, sw, sd, sf = 1 / 128, 0.02, 0.03, 0.01
    w = RNG.integers(0, 256, (4, 3, 3, 2)).astype(np.uint8)
    dw = RNG.integers(0, 256, (1, 3, 3, 4)).astype(np.uint8)
    fc = RNG.integers(0, 256, (5, 64)).astype(np.uint8)
    s1, s2, s3 = 0.1, 0.1, 0.2
    ts = [
        Tensor("x", (1, 8, 8, 2)),
        Tensor("xq", (1, 8, 8, 2), "uint8", scales=(sx,), zero_points=(128,)),
        Tensor("w", (4, 3, 3, 2), "uint8", w, scales=(sw,), zero_points=(120,)),
        Tensor("b", (4,), "int32", _i32(100, -50, 0, 7), scales=(sx * sw,)),
        Tensor("c", (1, 8, 8, 4), "uint8", scales=(s1,), zero_points=(0,)),
        Tensor("dw", (1, 3, 3, 4), "uint8", dw, scales=(sd,), zero_points=(130,)),
        Tensor("db", (4,), "int32", _i32(0, 10, -10, 3), scales=(s1 * sd,)),
        Tensor("d", (1, 4, 4, 4), "uint8", scales=(s2,), zero_points=(5,)),
        Tensor("fw", (5, 64), "uint8", fc, scales=(sf,), zero_points=(127,)),
        Tensor("fb", (5,), "int32", _i32(1, 2, 3, 4, 5), scales=(s2 * sf,)),
        Tensor("f", (1, 5), "uint8", scales=(s3,), zero_points=(128,)),
        Tensor("p", (1, 5), "uint8", scales=(1 / 256,), zero_points=(0,)),
        Tensor("y", (1, 5)),
    ]
    ops = [
        Op("QUANTIZE", [0], [1]),
        Op(
            "CONV_2D",
            [1, 2, 3],
            [4],
            "Conv2DOptions",
            {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": 3},
        ),
        Op(
            "DEPTHWISE_CONV_2D",
            [4, 5, 6],
            [7],
            "DepthwiseConv2DOptions",
            {"Padding": 0, "StrideW": 2, "StrideH": 2, "DepthMultiplier": 1},
        ),
        Op("FULLY_CONNECTED", [7, 8, 9], [10], "FullyConnectedOptions", {}),
        Op("SOFTMAX", [10], [11], "SoftmaxOptions", {"Beta": 1.0}),
        Op("DEQUANTIZE", [11], [12]),
    ]
    return ts, ops, [0], [12]


CASES = [
    splits_and_pack,
    gather_tile_squeeze,
    transpose_conv_bias,
    pools_resize_norm,
    reductions_and_arith,
    uint8_add,
    uint8_conv_net,
]


@needs_litert
@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_agrees_with_litert(case: Callable[[], Case], model_file: Callable[..., Path]) -> None:
    path = model_file(*case())
    imported = import_tflite(path)
    inputs = imported.random_inputs(4)
    ours = run_in_process(imported, inputs)
    reference = LiteRtRunner(path).run(inputs)
    assert len(ours) == len(reference)
    for spec, a, b in zip(imported.outputs, ours, reference):
        d = diff(a, b)
        step = {uint8_add: 1 / 50, uint8_conv_net: 1 / 256}.get(case)
        tolerance_ok = d.ok if step is None else d.max_abs <= step + 1e-6  # one output step
        assert tolerance_ok, (spec.name, d)

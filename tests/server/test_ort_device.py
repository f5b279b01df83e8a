"""The ort device's backend in-process: conversions against the reference executor, support
reasons, and its compilation cache (nnhal.server.ort, nnhal.server.artifacts)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import HalVersion, OperandType as T, OperationType as O, Priority
from nnhal.core.errors import GeneralFailure, InvalidArgument
from nnhal.core.types import Model, SymmPerChannelQuantParams
from nnhal.server.artifacts import open_cache, sealer
from nnhal.server.backend import ReferenceBackend
from tests.server.conftest import CompilingDeviceCheck

pytest.importorskip("onnxruntime")
from nnhal.server.ort.runtime import OrtBackend, unpack

F32, Q8, S8 = T.TENSOR_FLOAT32, T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_SYMM_PER_CHANNEL
RNG = np.random.default_rng(0)
ORT = OrtBackend(1, measure_capabilities=False)
TOKEN, SECRET = bytes(32), b"s" * 32


def conv_f32_explicit_nchw() -> Model:
    b = ModelBuilder()
    x = b.input(F32, (1, 3, 7, 6))
    w = b.constant(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    bias = b.constant(RNG.standard_normal(4).astype(np.float32))
    args = [x, w, bias, *b.ints(1, 0, 2, 1, 2, 1, 3), b.boolean(True)]  # pads l r t b, stride w h, RELU6, NCHW
    return b.outputs(b.op(O.CONV_2D, args, F32, (1, 4, 8, 3))).finish()


def depthwise_q8_per_channel() -> Model:
    b = ModelBuilder()
    x = b.input(Q8, (1, 5, 5, 2), 0.5, 120)
    scales = (0.1, 0.25, 0.05, 0.2)
    w = b.constant(
        RNG.integers(-100, 100, (1, 3, 3, 4), dtype=np.int8), S8, channel_quant=SymmPerChannelQuantParams(scales, 3)
    )
    bias = b.constant(RNG.integers(-50, 50, 4, dtype=np.int32), T.TENSOR_INT32)
    out = b.op(O.DEPTHWISE_CONV_2D, [x, w, bias, *b.ints(1, 2, 2, 2, 1)], Q8, (1, 3, 3, 4), 1.5, 100)
    return b.outputs(out).finish()


def pools_and_dense_q8() -> Model:
    """AVERAGE_POOL_2D → MAX_POOL_2D (RELU) → RESHAPE → FULLY_CONNECTED → SOFTMAX, quant8."""
    b = ModelBuilder()
    x = b.input(Q8, (2, 6, 6, 3), 0.1, 128)
    a = b.op(O.AVERAGE_POOL_2D, [x, *b.ints(1, 2, 2, 3, 3, 0)], Q8, (2, 3, 3, 3), 0.1, 128)
    m = b.op(O.MAX_POOL_2D, [a, *b.ints(2, 1, 1, 2, 2, 1)], Q8, (2, 2, 2, 3), 0.1, 128)
    flat = b.op(O.RESHAPE, [m, b.constant(np.array([2, 12], np.int32))], Q8, (2, 12), 0.1, 128)
    w = b.constant(RNG.integers(0, 255, (5, 12), dtype=np.uint8), Q8, 0.02, 128)
    bias = b.constant(RNG.integers(-100, 100, 5, dtype=np.int32), T.TENSOR_INT32, 0.002)
    fc = b.op(O.FULLY_CONNECTED, [flat, w, bias, b.int32(0)], Q8, (2, 5), 0.05, 120)
    return b.outputs(b.op(O.SOFTMAX, [fc, b.float32(1.0)], Q8, (2, 5), 1.0 / 256, 0)).finish()


def elementwise_mixed() -> Model:
    """ADD (broadcast, RELU) and CONCATENATION of differently quantized inputs, quant8."""
    b = ModelBuilder()
    x = b.input(Q8, (2, 3), 0.2, 100)
    y = b.input(Q8, (3,), 0.1, 50)
    s = b.op(O.ADD, [x, y, b.int32(1)], Q8, (2, 3), 0.3, 10)
    return b.outputs(b.op(O.CONCATENATION, [s, x, b.int32(0)], Q8, (4, 3), 0.25, 90)).finish()


def transpose_conv_f16() -> Model:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT16, (1, 2, 2, 1))
    w = b.constant(RNG.standard_normal((2, 3, 3, 1)).astype(np.float16))
    bias = b.constant(np.zeros(2, np.float16))
    shape = b.constant(np.array([1, 3, 4, 2], np.int32))
    out = b.op(
        O.TRANSPOSE_CONV_2D, [x, w, bias, shape, *b.ints(1, 2, 2, 0), b.boolean(False)], T.TENSOR_FLOAT16, (1, 3, 4, 2)
    )
    return b.outputs(out).finish()


def slices_and_norms_f32() -> Model:
    """STRIDED_SLICE (masks, a negative stride, a shrunk axis) → L2_NORMALIZATION."""
    b = ModelBuilder()
    x = b.input(F32, (2, 6, 5))
    begin = b.constant(np.array([0, 5, 1], np.int32))
    end = b.constant(np.array([1, 0, 5], np.int32))
    strides = b.constant(np.array([1, -2, 2], np.int32))
    s = b.op(O.STRIDED_SLICE, [x, begin, end, strides, *b.ints(0, 0, 1)], F32, (3, 2))
    return b.outputs(b.op(O.L2_NORMALIZATION, [s, b.int32(-1)], F32, (3, 2))).finish()


def resize_and_space_to_batch_q8() -> Model:
    """RESIZE_NEAREST_NEIGHBOR (align_corners) → SPACE_TO_BATCH_ND (padded), quant8."""
    b = ModelBuilder()
    x = b.input(Q8, (1, 3, 4, 2), 0.5, 100)
    r = b.op(
        O.RESIZE_NEAREST_NEIGHBOR,
        [x, b.int32(5), b.int32(5), b.boolean(False), b.boolean(True), b.boolean(False)],
        Q8,
        (1, 5, 5, 2),
        0.5,
        100,
    )
    block = b.constant(np.array([2, 3], np.int32))
    pads = b.constant(np.array([[1, 0], [0, 1]], np.int32))
    return b.outputs(b.op(O.SPACE_TO_BATCH_ND, [r, block, pads], Q8, (6, 3, 2, 2), 0.5, 100)).finish()


CASES: list[Callable[[], Model]] = [
    slices_and_norms_f32,
    resize_and_space_to_batch_q8,
    conv_f32_explicit_nchw,
    depthwise_q8_per_channel,
    pools_and_dense_q8,
    elementwise_mixed,
    transpose_conv_f16,
]


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__)
def test_conversion_matches_the_reference_within_conformance_tolerance(
    make: Callable[[], Model], compiling: CompilingDeviceCheck
) -> None:
    assert compiling.matches_reference(ORT, make(), RNG)


def test_unsupported_operations_say_why() -> None:
    b = ModelBuilder()
    x = b.input(F32, (1, 4))
    n = b.op(O.LOCAL_RESPONSE_NORMALIZATION, [x, b.int32(1), *(b.float32(v) for v in (1.0, 1.0, 0.5))], F32, (1, 4))
    model = b.outputs(b.op(O.RELU, [n], F32, (1, 4))).finish()
    supported, reasons = ORT.supported_operations(model, [], HalVersion.V1_3)
    assert supported == [False, True]
    assert "LOCAL_RESPONSE_NORMALIZATION has no ONNX Runtime conversion" in reasons[0]
    with pytest.raises(GeneralFailure, match="operation 0 is not supported"):
        ORT.compile(model, [])


def test_unknown_output_dimensions_are_unsupported_with_the_reason() -> None:
    b = ModelBuilder()
    x = b.input(F32, (2, 3))
    model = b.outputs(b.op(O.RELU, [x], F32, (0, 0))).finish()
    supported, reasons = ORT.supported_operations(model, [], HalVersion.V1_3)
    assert supported == [False] and "static graph" in reasons[0]


def test_the_cache_carries_the_compiled_artifact_and_the_device_kind(compiling: CompilingDeviceCheck) -> None:
    model = depthwise_q8_per_channel()
    _, artifact = ORT.compile(model, compiling.pools(model))
    blob = sealer(ORT, SECRET, TOKEN, HalVersion.V1_3)(model, Priority.HIGH, artifact)
    skeleton, priority, opened = open_cache(ORT, SECRET, TOKEN, blob, HalVersion.V1_3)
    assert isinstance(opened, memoryview) and opened == artifact
    assert priority == Priority.HIGH and skeleton.operand_values == b""
    assert skeleton.main.operations == model.main.operations
    cpu_blob = sealer(ReferenceBackend(), SECRET, TOKEN, HalVersion.V1_3)(model, Priority.LOW, b"")
    with pytest.raises(InvalidArgument, match="another kind of device"):
        open_cache(ORT, SECRET, TOKEN, cpu_blob, HalVersion.V1_3)
    with pytest.raises(InvalidArgument, match="another kind of device"):
        open_cache(ReferenceBackend(), SECRET, TOKEN, blob, HalVersion.V1_3)
    tampered = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(InvalidArgument, match="authentication"):
        open_cache(ORT, SECRET, TOKEN, tampered, HalVersion.V1_3)


def conv_f32_large_filter() -> Model:
    """A convolution whose filter (16x3x3x3 float32, 1728 bytes) is large enough to live in
    the artifact's weights, not in its graph."""
    b = ModelBuilder()
    x = b.input(F32, (1, 6, 6, 3))
    w = b.constant(RNG.standard_normal((16, 3, 3, 3)).astype(np.float32))
    bias = b.constant(RNG.standard_normal(16).astype(np.float32))
    args = [x, w, bias, *b.ints(1, 1, 1, 1, 1, 1, 0)]  # pads l r t b, stride w h, no activation
    return b.outputs(b.op(O.CONV_2D, args, F32, (1, 6, 6, 16))).finish()


def test_the_artifact_carries_the_weights_that_the_session_reads_in_place(compiling: CompilingDeviceCheck) -> None:
    model = conv_f32_large_filter()
    artifact = compiling.matches_reference(ORT, model, RNG)
    graph, names, values = unpack(artifact)
    assert names and all(not v.flags.writeable for v in values)
    assert len(graph) < len(artifact) and sum(v.nbytes for v in values) >= 16 * 3 * 3 * 3 * 4
    inputs = compiling.inputs(model, RNG)
    expected = ORT.load(model, [], artifact).run(inputs)[0]
    # Loaded from a private copy that only the graph holds afterwards, then memory reused.
    loaded = ORT.load(model, [], memoryview(bytes(bytearray(artifact))))
    churn = [bytearray(1 << 20) for _ in range(32)]
    del churn
    assert np.array_equal(loaded.run(inputs)[0], expected)


@pytest.mark.parametrize("cut", [0, 8, 16, -1])
def test_an_artifact_that_is_not_this_devices_is_a_general_failure(cut: int, compiling: CompilingDeviceCheck) -> None:
    artifact = compiling.matches_reference(ORT, conv_f32_large_filter(), RNG)
    with pytest.raises(GeneralFailure, match="artifact"):
        ORT.load(conv_f32_large_filter(), [], artifact[:cut])
    with pytest.raises(GeneralFailure, match="not one of this ort device's"):
        ORT.load(conv_f32_large_filter(), [], b"NNORTX0\0" + artifact[8:])

"""The litert device's backend in-process: conversions against the reference executor and
against LiteRT running the original file, support reasons, and its compilation cache
(nnhal.server.litert, nnhal.tflite_map.writer)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from nnhal.client.builder import ModelBuilder
from nnhal.core.enums import HalVersion, OperandType as T, OperationType as O, Priority
from nnhal.core.errors import GeneralFailure
from nnhal.core.types import Model, SymmPerChannelQuantParams
from nnhal.models import FACE_DETECTION, tflite_model
from nnhal.server.artifacts import open_cache, sealer
from nnhal.server.backend import LaneGraph
from tests.server.conftest import CompilingDeviceCheck

pytest.importorskip("ai_edge_litert")
from nnhal.importers.litert import LiteRtRunner
from nnhal.importers.tflite_model import import_tflite
from nnhal.server.litert.runtime import LiteRtBackend

F32, Q8, S8, I8 = (
    T.TENSOR_FLOAT32,
    T.TENSOR_QUANT8_ASYMM,
    T.TENSOR_QUANT8_SYMM_PER_CHANNEL,
    T.TENSOR_QUANT8_ASYMM_SIGNED,
)
RNG = np.random.default_rng(0)
LITERT = LiteRtBackend(1, measure_capabilities=False)
TOKEN, SECRET = bytes(32), b"s" * 32
MODELS = tflite_model(FACE_DETECTION).parent


def conv_f32_explicit_padding() -> Model:
    """CONV_2D with explicit pads that are neither SAME nor VALID (a PAD before it), RELU6."""
    b = ModelBuilder()
    x = b.input(F32, (1, 7, 6, 3))
    w = b.constant(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    bias = b.constant(RNG.standard_normal(4).astype(np.float32))
    args = [x, w, bias, *b.ints(1, 0, 2, 1, 2, 1, 3)]  # pads l r t b, stride w h, RELU6
    return b.outputs(b.op(O.CONV_2D, args, F32, (1, 8, 3, 4))).finish()


def conv_and_pool_q8_nchw() -> Model:
    """CONV_2D (implicit SAME, dilation 2) and MAX_POOL_2D on NCHW tensors, quant8."""
    rng = np.random.default_rng(5)  # its own: the other cases keep the module RNG's draws
    b = ModelBuilder()
    x = b.input(Q8, (1, 3, 7, 6), 0.5, 120)
    w = b.constant(rng.integers(0, 255, (4, 3, 3, 3), dtype=np.uint8), Q8, 0.02, 128)
    bias = b.constant(rng.integers(-50, 50, 4, dtype=np.int32), T.TENSOR_INT32, 0.01)
    args = [x, w, bias, *b.ints(1, 1, 1, 1), b.boolean(True), *b.ints(2, 2)]
    c = b.op(O.CONV_2D, args, Q8, (1, 4, 7, 6), 1.0, 100)
    p = b.op(O.MAX_POOL_2D, [c, *b.ints(2, 2, 2, 2, 2, 0), b.boolean(True)], Q8, (1, 4, 3, 3), 1.0, 100)
    return b.outputs(p).finish()


def depthwise_s8_per_channel() -> Model:
    b = ModelBuilder()
    x = b.input(I8, (1, 5, 5, 2), 0.5, -8)
    scales = (0.1, 0.25, 0.05, 0.2)
    w = b.constant(
        RNG.integers(-100, 100, (1, 3, 3, 4), dtype=np.int8), S8, channel_quant=SymmPerChannelQuantParams(scales, 3)
    )
    bias = b.constant(RNG.integers(-50, 50, 4, dtype=np.int32), T.TENSOR_INT32)
    out = b.op(O.DEPTHWISE_CONV_2D, [x, w, bias, *b.ints(1, 2, 2, 2, 1)], I8, (1, 3, 3, 4), 1.5, -28)
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


def elementwise_f32() -> Model:
    """ADD (broadcast, RELU), MUL, LOGISTIC, CONCATENATION, MEAN, float32."""
    b = ModelBuilder()
    x = b.input(F32, (2, 3))
    y = b.input(F32, (3,))
    s = b.op(O.ADD, [x, y, b.int32(1)], F32, (2, 3))
    m = b.op(O.MUL, [s, x, b.int32(0)], F32, (2, 3))
    sig = b.op(O.LOGISTIC, [m], F32, (2, 3))
    cat = b.op(O.CONCATENATION, [sig, x, b.int32(0)], F32, (4, 3))
    return b.outputs(b.op(O.MEAN, [cat, b.constant(np.array([1], np.int32)), b.int32(1)], F32, (4, 1))).finish()


CASES: list[Callable[[], Model]] = [
    conv_f32_explicit_padding,
    conv_and_pool_q8_nchw,
    depthwise_s8_per_channel,
    pools_and_dense_q8,
    elementwise_f32,
]


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__)
def test_conversion_matches_the_reference_within_conformance_tolerance(
    make: Callable[[], Model], compiling: CompilingDeviceCheck
) -> None:
    assert compiling.matches_reference(LITERT, make(), RNG)[4:8] == b"TFL3"


@pytest.mark.parametrize("name", ["face_detection_short_range", "face_landmark"])
def test_a_real_model_round_trips_to_what_litert_computes_on_the_original_file(
    name: str, compiling: CompilingDeviceCheck
) -> None:
    path = MODELS / f"{name}.tflite"
    imported = import_tflite(path)
    model = imported.model
    pools = compiling.pools(model)
    assert all(LITERT.supported_operations(model, pools, HalVersion.V1_3)[0])
    inputs = imported.random_inputs(0)
    ours = LITERT.compile(model, pools)[0].run(inputs)
    theirs = LiteRtRunner(path).run(inputs)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_unsupported_operations_say_why(compiling: CompilingDeviceCheck) -> None:
    b = ModelBuilder()
    x = b.input(F32, (1, 4))
    n = b.op(O.LOCAL_RESPONSE_NORMALIZATION, [x, b.int32(1), *(b.float32(v) for v in (1.0, 1.0, 0.5))], F32, (1, 4))
    nchw = b.op(
        O.SPACE_TO_DEPTH,
        [
            b.op(O.RESHAPE, [n, b.constant(np.array([1, 2, 2, 1], np.int32))], F32, (1, 2, 2, 1)),
            b.int32(2),
            b.boolean(True),
        ],
        F32,
        (1, 1, 1, 4),
    )
    model = b.outputs(nchw).finish()
    supported, reasons = LITERT.supported_operations(model, compiling.pools(model), HalVersion.V1_3)
    assert supported == [False, True, False]
    assert "LOCAL_RESPONSE_NORMALIZATION has no LiteRT conversion" in reasons[0]
    assert "NCHW" in reasons[2]
    with pytest.raises(GeneralFailure, match="operation 0 is not supported"):
        LITERT.compile(model, compiling.pools(model))


def test_the_cache_carries_the_flatbuffer_and_the_device_kind(compiling: CompilingDeviceCheck) -> None:
    model = depthwise_s8_per_channel()
    _, artifact = LITERT.compile(model, compiling.pools(model))
    blob = sealer(LITERT, SECRET, TOKEN, HalVersion.V1_3)(model, Priority.HIGH, artifact)
    skeleton, priority, opened = open_cache(LITERT, SECRET, TOKEN, blob, HalVersion.V1_3)
    assert isinstance(opened, memoryview) and opened == artifact
    assert priority == Priority.HIGH and skeleton.operand_values == b""
    inputs = compiling.inputs(model, RNG)
    expected = LITERT.compile(model, compiling.pools(model))[0].run(inputs)
    np.testing.assert_array_equal(LITERT.load(skeleton, [], opened).run(inputs)[0], expected[0])


def test_a_cache_read_at_its_cut_hands_litert_the_tail_itself(compiling: CompilingDeviceCheck) -> None:
    # The device as served (the fallback around LiteRT): the cut lies where the flatbuffer of
    # the last step starts, and the interpreter is built from the tail object (no copy).
    from nnhal.server import cache
    from nnhal.server.partitioned import PartitionedBackend
    from nnhal.server.pieces import Pieces

    device = PartitionedBackend(LITERT)
    model = depthwise_s8_per_channel()
    graph, artifact = device.compile(model, compiling.pools(model))
    blob = sealer(device, SECRET, TOKEN, HalVersion.V1_3)(model, Priority.HIGH, artifact)
    cut = cache.read_cut(blob[:1024])
    assert cut is not None and blob[cut:].startswith(LITERT.compile(model, compiling.pools(model))[1][:8])
    tail = blob[cut:]
    skeleton, _, opened = open_cache(device, SECRET, TOKEN, Pieces(blob[:cut], tail), HalVersion.V1_3)
    assert opened is not None
    loaded = device.load(skeleton, [], opened)
    inputs = compiling.inputs(model, RNG)
    np.testing.assert_array_equal(loaded.run(inputs)[0], graph.run(inputs)[0])
    assert any(getattr(s.graph, "_interpreter", None) is not None for s in loaded._steps)  # type: ignore[attr-defined]
    interpreters = [s.graph._interpreter for s in loaded._steps]  # type: ignore[attr-defined]
    assert any(i._model_content is tail for i in interpreters)


def test_inputs_from_read_only_pools_are_copied_in_and_a_misfit_is_refused(compiling: CompilingDeviceCheck) -> None:
    """A request's inputs are read-only views of its pools' bytes (at any offset): each is
    copied straight into the interpreter's tensor; an input of another dtype or shape goes
    to ``set_tensor``, whose refusal is GENERAL_FAILURE, and the graph runs on after it."""
    path = MODELS / "face_detection_short_range.tflite"
    imported = import_tflite(path)
    model = imported.model
    graph = LITERT.compile(model, compiling.pools(model))[0]
    lite = LiteRtRunner(path)
    for seed, offset in ((0, 0), (1, 4), (2, 3)):
        x = imported.random_inputs(seed)[0]
        pool = bytes(offset) + x.tobytes()
        view = np.ndarray(x.shape, x.dtype, pool, offset)  # as ``RequestPlan.bind_inputs`` makes it
        assert not view.flags.writeable
        ours = graph.run([view])
        for a, b, c in zip(ours, graph.run([x.copy()]), lite.run([x])):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-5)
    x = imported.random_inputs(3)[0]
    for misfit in (x.astype(np.float64), x.reshape(1, 128, 384, 1)):
        with pytest.raises(GeneralFailure, match="LiteRT failed"):
            graph.run([misfit])
    for a, b in zip(graph.run([x]), lite.run([x])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_outputs_are_written_once_straight_into_their_places(compiling: CompilingDeviceCheck) -> None:
    """An output whose place (``into``) has its exact shape and dtype is copied there and that
    array returned — through the device's partitioned graph too, whose library graph lists
    the face model's outputs in another order; a place of another shape is left alone."""
    from nnhal.server.partitioned import PartitionedBackend

    path = MODELS / "face_detection_short_range.tflite"
    imported = import_tflite(path)
    model = imported.model
    x = imported.random_inputs(0)[0]
    theirs = LiteRtRunner(path).run([x])
    graph = PartitionedBackend(LITERT).compile(model, compiling.pools(model))[0]
    pool = bytearray(sum(t.nbytes for t in theirs) + 64)
    into, at = [], 0
    for t in theirs:
        into.append(np.ndarray(t.shape, t.dtype, pool, at))
        at += t.nbytes + 64 - t.nbytes % 64
    ours = graph.run([x], None, None, into)
    for a, place, b in zip(ours, into, theirs):
        assert a is place
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    misfit = np.zeros((theirs[0].size,), theirs[0].dtype)
    ours = graph.run([x], None, None, [misfit, None])
    assert ours[0] is not misfit and not misfit.any()
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-5)


def test_a_lane_copies_bytes_in_and_out_in_the_models_order(compiling: CompilingDeviceCheck) -> None:
    """``PartitionedGraph.lane`` of a model placed wholly on LiteRT: each input's bytes in, each
    output's bytes into its place, in the model's order (the library lists the face model's
    outputs in another), as ``run`` computes them; a dtype or shape other than the tensors' is
    refused (None: the caller binds the pools as buffers)."""
    from nnhal.server.partitioned import PartitionedBackend

    path = MODELS / "face_detection_short_range.tflite"
    imported = import_tflite(path)
    model = imported.model
    graph = PartitionedBackend(LITERT).compile(model, compiling.pools(model))[0]
    x = imported.random_inputs(0)[0]
    theirs = LiteRtRunner(path).run([x])
    specs = [(t.dtype, t.shape) for t in theirs]
    assert isinstance(graph, LaneGraph)
    lane = graph.lane([(x.dtype, x.shape)], specs)
    assert lane is not None and lane.library == "LiteRT"
    pool = bytearray(sum(t.nbytes for t in theirs))
    into, at = [], 0
    for t in theirs:
        into.append(memoryview(pool)[at : at + t.nbytes])
        at += t.nbytes
    assert lane([memoryview(x.tobytes())], into) is into
    for place, b in zip(into, theirs):
        np.testing.assert_allclose(np.frombuffer(place, b.dtype).reshape(b.shape), b, rtol=1e-5, atol=1e-5)
    assert graph.lane([(np.dtype(np.float64), x.shape)], specs) is None
    assert graph.lane([(x.dtype, x.shape)], specs[::-1]) is None
    assert graph.lane([(x.dtype, (1, 128, 384, 1))], specs) is None

"""A compiling device with the reference fallback inside it (nnhal.server.partitioned):
placement, results equal to the reference, the profile, and the cache artifact."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from nnhal.client.builder import ModelBuilder
from nnhal.core.enums import HalVersion, OperandType as T, OperationType as O
from nnhal.core.types import InlinePool, Model, PoolData
from nnhal.server.backend import ReferenceBackend
from nnhal.server.devices import make_backend, parse_device
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.partitioned import BACKEND, FALLBACK, FALLBACK_PROFILE, FALLBACK_REASON, PartitionedBackend

pytest.importorskip("ai_edge_litert")
from nnhal.server.litert.runtime import LiteRtBackend

F32 = T.TENSOR_FLOAT32
RNG = np.random.default_rng(0)


def _pools(model: Model) -> list[PoolData]:
    return [p.data for p in model.pools if isinstance(p, InlinePool)]


def conv_lrn_conv() -> Model:
    """CONV_2D → LOCAL_RESPONSE_NORMALIZATION (no LiteRT conversion here) → ADD (RELU)."""
    b = ModelBuilder()
    x = b.input(F32, (1, 5, 5, 3))
    w = b.constant(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    bias = b.constant(RNG.standard_normal(4).astype(np.float32))
    c = b.op(O.CONV_2D, [x, w, bias, *b.ints(1, 1, 1, 0)], F32, (1, 5, 5, 4))
    lrn = b.op(
        O.LOCAL_RESPONSE_NORMALIZATION, [c, b.int32(1), *(b.float32(v) for v in (1.0, 1.0, 0.5))], F32, (1, 5, 5, 4)
    )
    return b.outputs(b.op(O.ADD, [lrn, c, b.int32(1)], F32, (1, 5, 5, 4))).finish()


def test_what_the_backend_lacks_runs_on_the_reference_inside_the_device() -> None:
    model = conv_lrn_conv()
    pools = _pools(model)
    inner = LiteRtBackend(1, measure_capabilities=False)
    backend = PartitionedBackend(inner)
    assert inner.supported_operations(model, pools, HalVersion.V1_3)[0] == [True, False, True]
    supported, reasons = backend.supported_operations(model, pools, HalVersion.V1_3)
    assert supported == [True, True, True] and reasons[0] == reasons[2] == ""
    assert reasons[1].startswith(FALLBACK_REASON) and "LOCAL_RESPONSE_NORMALIZATION" in reasons[1]
    assert [(s.place, s.operations) for s in backend.placement(model, pools)] == [
        (BACKEND, (0,)),
        (FALLBACK, (1,)),
        (BACKEND, (2,)),
    ]
    x = RNG.standard_normal((1, 5, 5, 3)).astype(np.float32)
    expected = ReferenceBackend().compile(model, pools)[0].run([x])[0]
    graph, artifact = backend.compile(model, pools)
    control = ExecutionControl(profile={}, timeline=[])
    np.testing.assert_allclose(graph.run([x], control)[0], expected, rtol=1e-5, atol=1e-5)
    assert control.profile is not None
    assert (
        control.profile["litert"][0] == 2 and control.profile[FALLBACK_PROFILE + "LOCAL_RESPONSE_NORMALIZATION"][0] == 1
    )
    assert control.timeline is not None
    assert [(t.index, t.operation) for t in control.timeline] == [
        (0, "litert (1 operations)"),
        (1, FALLBACK_PROFILE + "LOCAL_RESPONSE_NORMALIZATION"),
        (2, "litert (1 operations)"),
    ]
    # From the cache: the skeleton has no constants; the artifact carries what each step needs.
    skeleton = dataclasses.replace(model, operand_values=b"", pools=())
    np.testing.assert_allclose(backend.load(skeleton, [], artifact).run([x])[0], expected, rtol=1e-5, atol=1e-5)
    # Every model compiled or loaded is counted where its operations run (getStats, nnhal info).
    assert backend.placement_counts() == ({"CONV_2D": 2, "ADD": 2}, {"LOCAL_RESPONSE_NORMALIZATION": 2})


def test_strict_devices_have_no_fallback() -> None:
    assert parse_device("fast=ort:strict") == parse_device("fast=ort:strict")
    assert parse_device("fast=litert:strict").strict and not parse_device("litert").strict
    assert isinstance(make_backend("litert"), PartitionedBackend)
    assert isinstance(make_backend("litert", 1, strict=True), LiteRtBackend)


def test_placement_in_get_stats_and_nnhal_info() -> None:
    from nnhal.cli.info import placement_line
    from nnhal.client.device import Device
    from nnhal.testing.local_server import LocalServer

    model = conv_lrn_conv()
    with LocalServer("--device", "litert", "--cache-secret-file", "none") as srv, Device.connect(srv.address) as dev:
        assert "operations_on_backend" not in dev.stats()
        with dev.prepare_model_sync(model):
            stats = dev.stats()
    assert stats["operations_on_backend"] == 2 and stats["operations_on_fallback"] == 1
    assert (
        stats["operations_on_backend_CONV_2D"] == 1
        and stats["operations_on_fallback_LOCAL_RESPONSE_NORMALIZATION"] == 1
    )
    assert placement_line(stats) == "2 on the backend, 1 on the CPU fallback (33 %): LOCAL_RESPONSE_NORMALIZATION 1"
    assert placement_line({"sessions": 1}) == ""


def test_the_artifact_loads_from_pieces_cut_anywhere_and_names_its_last_steps_bytes() -> None:
    # A cache read in two pieces (nnhal.server.pieces): cut where tail_start says (the last
    # step's flatbuffer, kept as its own bytes object), or anywhere else (joined where needed).
    from nnhal.server.pieces import Pieces

    model = conv_lrn_conv()
    pools = _pools(model)
    backend = PartitionedBackend(LiteRtBackend(1, measure_capabilities=False))
    graph, artifact = backend.compile(model, pools)
    tail = backend.tail_start(artifact)
    assert tail is not None and artifact[tail + 4 : tail + 8] == b"TFL3"  # a flatbuffer's identifier
    x = RNG.standard_normal((1, 5, 5, 3)).astype(np.float32)
    expected = graph.run([x])[0]
    skeleton = dataclasses.replace(model, operand_values=b"", pools=())
    for cut in (tail, 0, 1, tail - 1, len(artifact) // 2, len(artifact)):
        loaded = backend.load(skeleton, [], Pieces(artifact[:cut], artifact[cut:]))
        np.testing.assert_array_equal(loaded.run([x])[0], expected)


def test_a_model_wholly_on_the_library_runs_as_its_one_step() -> None:
    """Unprofiled, a model placed wholly on the library is that step's run; profiled, the
    steps' loop runs it: the same outputs either way, and the profile still counts it."""
    b = ModelBuilder()
    x = b.input(F32, (1, 5, 5, 3))
    w = b.constant(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    bias = b.constant(RNG.standard_normal(4).astype(np.float32))
    c = b.op(O.CONV_2D, [x, w, bias, *b.ints(1, 1, 1, 0)], F32, (1, 5, 5, 4))
    model = b.outputs(c, b.op(O.ADD, [c, c, b.int32(1)], F32, (1, 5, 5, 4))).finish()
    pools = _pools(model)
    graph, _ = PartitionedBackend(LiteRtBackend(1, measure_capabilities=False)).compile(model, pools)
    assert graph._whole is not None  # type: ignore[attr-defined]
    x_in = RNG.standard_normal((1, 5, 5, 3)).astype(np.float32)
    expected = ReferenceBackend().compile(model, pools)[0].run([x_in])
    plain = graph.run([x_in], ExecutionControl())
    control = ExecutionControl(profile={})
    profiled = graph.run([x_in], control)
    assert len(plain) == len(profiled) == 2
    for a, p, e in zip(plain, profiled, expected):
        np.testing.assert_array_equal(a, p)
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)
    assert control.profile is not None and control.profile["litert"][0] == 2


def test_a_whole_step_listing_the_outputs_in_another_order_gives_them_in_the_models() -> None:
    """The library's step lists the model's outputs in another order (a reordering of all its
    outputs): its places are handed over in its order and its outputs taken back in the
    model's — with ``into`` (each output copied into its place, that array returned), without,
    and with a request's dims (the general pick)."""
    b = ModelBuilder()
    x = b.input(F32, (1, 5, 5, 3))
    w = b.constant(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    bias = b.constant(RNG.standard_normal(4).astype(np.float32))
    c = b.op(O.CONV_2D, [x, w, bias, *b.ints(1, 1, 1, 0)], F32, (1, 5, 5, 4))
    s = b.op(O.ADD, [c, c, b.int32(0)], F32, (1, 5, 5, 4))
    r = b.op(O.RESHAPE, [s, b.constant(np.array([1, 100], np.int32))], F32, (1, 100))
    model = b.outputs(r, c).finish()
    pools = _pools(model)
    graph, _ = PartitionedBackend(LiteRtBackend(1, measure_capabilities=False)).compile(model, pools)
    if graph._pick is None:  # type: ignore[attr-defined]
        pytest.skip("the library's step lists the outputs in the model's order")
    assert graph._order is not None  # type: ignore[attr-defined]
    x_in = RNG.standard_normal((1, 5, 5, 3)).astype(np.float32)
    expected = ReferenceBackend().compile(model, pools)[0].run([x_in])
    into = [np.empty((1, 100), np.float32), np.empty((1, 5, 5, 4), np.float32)]
    placed = graph.run([x_in], ExecutionControl(), None, into)
    assert placed[0] is into[0] and placed[1] is into[1]
    plain = graph.run([x_in], ExecutionControl())
    picked = graph.run([x_in], ExecutionControl(), [model.main.operands[i] for i in model.main.output_indexes])
    for outs in (placed, plain, picked):
        assert [o.shape for o in outs] == [(1, 100), (1, 5, 5, 4)]
        for a, e in zip(outs, expected):
            np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-4)

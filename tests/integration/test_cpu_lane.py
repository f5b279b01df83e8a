"""The reference executor's lane (``PreparedGraph.lane``, ``StraightLane``): a call of a layout that
is bytes in and bytes out, on a model the default CPU device runs as its straight program, goes
from the call's bytes into the arena's input buffers and from its result buffers into the
answer's pools — on the same-host queue's compact calls and on the gRPC inline launch (unary
and burst, the server's ``--no-fast-path``) — skipping the generic binding and run, and
answers exactly as the full path does, including where it does not take the lane (a deadline
passed or missed, request data over a limit, a profile asked for, a model that is no straight
program)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np
import pytest

from nnhal.bench import ipc
from nnhal.cli import config
from nnhal.cli.serve import server_options
from nnhal.client.device import Device
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import ErrorStatus, OperandType, OperationType
from nnhal.core.types import Model
from nnhal.server.executor import graph
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.rpc.serve import Server
from nnhal.testing.local_server import LocalServer
from tests.integration.lane_cases import answered_alike, check_refusals, outcome as _outcome, request_data_refused

pytestmark = pytest.mark.integration

LANE = "the reference executor"


def _server(*extra: str) -> Server:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    args = parser.parse_args(["--cache-secret-file", "none", "--listen", "127.0.0.1:0", *extra])
    server = Server(server_options(config.resolve(args, {})))
    server.start()
    return server


@pytest.fixture(params=["compact", "grpc"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Server, str]]:
    """The default (CPU) device served in this process: same-host compact calls, or every call
    over gRPC (``--no-fast-path``: the inline launch on the loop's thread)."""
    server = _server() if request.param == "compact" else _server("--no-fast-path")
    try:
        yield server, request.param
    finally:
        server.stop(grace=0)


@pytest.fixture
def lane_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a lane ran (one entry per call)."""
    calls: list[int] = []
    real = graph.StraightLane.run

    def counted(self: graph.StraightLane, *args: Any) -> Any:
        calls.append(1)
        return real(self, *args)

    monkeypatch.setattr(graph.StraightLane, "run", counted)
    return calls


def _no_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph.PreparedGraph, "lane", lambda *args: None)


def _same(ours: Sequence[np.ndarray], theirs: Sequence[np.ndarray]) -> None:
    """Bit for bit (NaN where NaN, the same infinities)."""
    for a, b in zip(ours, theirs, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


def _special() -> list[np.ndarray]:
    """ADD inputs whose sums are NaN, infinities, an overflow and a subnormal."""
    big = np.finfo(np.float32).max
    a = np.array([np.nan, np.inf, -np.inf, big, -big, 1e-45, 1.5, -0.0], np.float32).reshape(ipc.SMALL_SHAPE)
    b = np.array([1.0, -np.inf, -np.inf, big, -big, 1e-45, np.nan, 0.0], np.float32).reshape(ipc.SMALL_SHAPE)
    return [a, b]


def _calls(model: Model) -> list[list[np.ndarray]]:
    if model is _TINY:
        rng = np.random.default_rng(3)
        return [[rng.standard_normal((1, ipc.TINY_WIDTH)).astype(np.float32)] for _ in range(6)]
    rng = np.random.default_rng(5)
    return (
        [_special()]
        + [list(ipc._small_inputs())]
        + [[rng.standard_normal(ipc.SMALL_SHAPE).astype(np.float32) for _ in range(2)] for _ in range(4)]
    )


_TINY = ipc.tiny_model()
_ADD = ipc._add_model()


def _run(server: Server, path: str, model: Model, calls: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    """Each call's outputs, by ``pm.execute`` (and, over gRPC, by a burst too)."""
    out: list[list[np.ndarray]] = []
    with Device.connect(server.addresses[0], client_name="lane") as dev, dev.prepare_model_sync(model) as pm:
        for _ in range(3):  # the layout learned
            pm.execute(calls[0], timeout=60)
        for inputs in calls:
            out.append(pm.execute(inputs, timeout=60).outputs)
        assert (dev.remote.same_host is not None) == (path == "compact")
        if path == "grpc" and model is _ADD:
            with pm.burst(fast=False) as burst:
                for inputs in calls:
                    result = burst.execute(ipc._small_request(*inputs))
                    assert result.status == ErrorStatus.NONE
                    out.append([np.frombuffer(result.output_pools[1], np.float32).reshape(ipc.SMALL_SHAPE)])
    return out


@pytest.mark.parametrize("model", [_ADD, _TINY], ids=["add", "tiny"])
def test_calls_take_the_lane_and_answer_as_the_full_path(
    served: tuple[Server, str], lane_calls: list[int], monkeypatch: pytest.MonkeyPatch, model: Model
) -> None:
    server, path = served
    calls = _calls(model)
    ours = _run(server, path, model, calls)
    ran = len(lane_calls)
    assert ran >= len(calls) - 1  # the layout's first calls may take the full path
    _no_lane(monkeypatch)
    theirs = _run(server, path, model, calls)
    assert len(lane_calls) == ran
    for a, b in zip(ours, theirs, strict=True):
        _same(a, b)
    if model is _ADD:
        with np.errstate(all="ignore"):
            _same(ours[0], [np.add(*_special())])


def _half_add() -> Model:
    """ADD of float16 tensors: no straight program (its kernels are not fixed calls)."""
    b = ModelBuilder()
    x = b.input(OperandType.TENSOR_FLOAT16, [2, 4])
    y = b.input(OperandType.TENSOR_FLOAT16, [2, 4])
    return b.outputs(b.op(OperationType.ADD, [x, y, b.int32(0)], OperandType.TENSOR_FLOAT16, [2, 4])).finish()


def test_a_model_that_is_no_straight_program_takes_the_full_path(
    served: tuple[Server, str], lane_calls: list[int]
) -> None:
    server, _ = served
    a = np.linspace(-2, 2, 8, dtype=np.float16).reshape(2, 4)
    with Device.connect(server.addresses[0], client_name="lane") as dev, dev.prepare_model_sync(_half_add()) as pm:
        for _ in range(5):
            _same(pm.execute([a, a], timeout=60).outputs, [a + a])
    assert not lane_calls


def test_refusals_and_fallbacks_answer_as_the_full_path(
    served: tuple[Server, str], lane_calls: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each case's status, with the lane and without it (the full path's answer): the same."""
    answered_alike(partial(_cases, served[0], lane_calls, monkeypatch), partial(_no_lane, monkeypatch))


def _cases(
    server: Server, lane_calls: list[int], monkeypatch: pytest.MonkeyPatch, lane: bool
) -> dict[str, tuple[ErrorStatus, str]]:
    lane_calls.clear()
    inputs = list(ipc._small_inputs())
    total = inputs[0] + inputs[1]
    seen: dict[str, tuple[ErrorStatus, str]] = {}
    with Device.connect(server.addresses[0], client_name="lane") as dev, dev.prepare_model_sync(_ADD) as pm:
        for _ in range(4):  # the layout learned
            pm.execute(inputs, timeout=60)
        ran = len(lane_calls)
        assert (ran > 0) == lane

        # A deadline already passed: refused at launch, nothing run.
        seen["passed"] = _outcome(lambda: pm.execute(inputs, deadline_at=time.monotonic() - 1))
        # A profile asked for: the full path, which profiles the ADD.
        profiled = pm.execute(inputs, timeout=60, profile=True)
        _same(profiled.outputs, [total])
        assert [p[0] for p in profiled.profile] == ["ADD"]
        assert len(lane_calls) == ran

        # The request's data over what the budget has: refused with the full path's status.
        with request_data_refused(monkeypatch):
            seen["over"] = _outcome(lambda: pm.execute(inputs, timeout=60))
        assert len(lane_calls) == ran

        # A deadline missed while the program runs: its segment's checkpoint says so (a program of
        # one segment takes it with its start's clock reading: ``ExecutionControl.start``).
        real_start = ExecutionControl.start

        def slow(control: ExecutionControl, checkpoint: bool = False) -> None:
            time.sleep(0.3)
            real_start(control, checkpoint)

        with monkeypatch.context() as m:
            m.setattr(ExecutionControl, "start", slow)
            seen["missed"] = _outcome(lambda: pm.execute(inputs, deadline_at=time.monotonic() + 0.1))

        # ... and the device serves on, through the lane again.
        _same(pm.execute(inputs, timeout=60).outputs, [total])
        assert (len(lane_calls) > ran) == lane
    check_refusals(seen)
    return seen


@pytest.mark.parametrize(
    ("args", "logged"),
    [
        ((), "run through its graph's lane (" + LANE + ")"),
        (("--no-fast-path",), "run through its prepared model's lane (" + LANE + ")"),
    ],
    ids=["compact", "grpc"],
)
def test_the_lane_is_taken_across_processes(args: tuple[str, ...], logged: str) -> None:
    calls = _calls(_TINY)
    with (
        LocalServer("--cache-secret-file", "none", *args) as srv,
        Device.connect(srv.address, client_name="lane") as dev,
        dev.prepare_model_sync(_TINY) as pm,
    ):
        for inputs in calls:
            out = pm.execute(inputs, timeout=60).outputs
            np.testing.assert_allclose(out[0], ipc._tiny_reference(inputs[0]), rtol=1e-4, atol=1e-5)
        assert (dev.remote.same_host is not None) == (not args)
        deadline = time.monotonic() + 10
        while logged not in srv.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert logged in srv.log_path.read_text()


def test_a_lane_is_offered_for_the_programs_own_dtypes_and_shapes_and_accounts_as_it() -> None:
    """``PreparedGraph.lane``: only for a straight program, each input and output of its buffer's
    dtype and shape; a run holds its arena under memory accounting and gives the grant back
    (the reservation ``_run_straight`` makes, less the result copies it does not make)."""
    prepared = graph.PreparedGraph(_ADD, ())
    spec = (np.dtype(np.float32), ipc.SMALL_SHAPE)
    lane = prepared.lane([spec, spec], [spec])
    assert lane is not None and lane.library == LANE
    assert prepared.lane([(np.dtype(np.float64), ipc.SMALL_SHAPE), spec], [spec]) is None
    assert prepared.lane([spec, (spec[0], (8,))], [spec]) is None
    assert prepared.lane([spec], [spec]) is None
    half = (np.dtype(np.float16), (2, 4))
    assert graph.PreparedGraph(_half_add(), ()).lane([half, half], [half]) is None

    reserved: list[int] = []
    released: list[int] = []
    control = ExecutionControl(reserve=reserved.append, release=lambda n, freed=0: released.append(n))
    a, b = ipc._small_inputs()
    into = bytearray(a.nbytes)
    lane.run([memoryview(a.tobytes()), memoryview(b.tobytes())], [memoryview(into)], control)
    np.testing.assert_array_equal(np.frombuffer(into, np.float32).reshape(ipc.SMALL_SHAPE), a + b)
    assert reserved and released == reserved and control.held == 0 and control.operations_run == 1

"""The litert device's lane (``backend.Lane``): a same-host compact call of a model placed wholly
on LiteRT runs from the request ring into LiteRT's tensors and from them into the answer's
places, skipping the generic binding and run — and answers exactly as the full path does,
including where it does not take the lane (a deadline passed or missed, request data over a
limit, a profile asked for)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.core.enums import ErrorStatus
from nnhal.models import FACE_DETECTION, tflite_model

pytest.importorskip("ai_edge_litert")
from nnhal.importers.litert import LiteRtRunner
from nnhal.importers.tflite_model import import_tflite
from nnhal.server.executions import lean
from nnhal.server.litert import runtime
from nnhal.server.rpc.serve import Server
from nnhal.testing.local_server import LocalServer
from tests.integration.lane_cases import answered_alike, check_refusals, outcome as _outcome, request_data_refused

pytestmark = pytest.mark.integration

LANE_LOG = "run through its graph's lane (LiteRT)"


@pytest.fixture
def lane_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times a lane ran (one entry per call)."""
    calls: list[int] = []
    real = runtime.LiteRtLane.__call__

    def counted(self: runtime.LiteRtLane, inputs: Sequence[memoryview], into: Sequence[memoryview]) -> Any:
        calls.append(1)
        return real(self, inputs, into)

    monkeypatch.setattr(runtime.LiteRtLane, "__call__", counted)
    return calls


def _face() -> tuple[Any, LiteRtRunner]:
    face = tflite_model(FACE_DETECTION)
    return import_tflite(face), LiteRtRunner(face, threads=1)


def _agree(ours: Sequence[np.ndarray], theirs: Sequence[np.ndarray]) -> None:
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_compact_calls_take_the_lane_and_answer_as_litert(litert_server: Server, lane_calls: list[int]) -> None:
    imported, lite = _face()
    with (
        Device.connect(litert_server.addresses[0], client_name="lane") as dev,
        dev.prepare_model_sync(imported.model) as pm,
    ):
        for seed in range(8):
            inputs = imported.random_inputs(seed)
            outcome = pm.execute(inputs, timeout=60, measure=seed % 2 == 0)
            _agree(outcome.outputs, lite.run(inputs))
            if seed % 2 == 0:
                assert outcome.timing.time_on_device > 0
        assert dev.remote.same_host is not None
    # The first call learns the layout (the full path), the second binds it generically and
    # teaches the answer's places; the rest run through the lane.
    assert len(lane_calls) >= 5


def test_the_lane_is_taken_across_processes() -> None:
    imported, lite = _face()
    with (
        LocalServer("--device", "litert", "--cache-secret-file", "none") as srv,
        Device.connect(srv.address, client_name="lane") as dev,
        dev.prepare_model_sync(imported.model) as pm,
    ):
        for seed in range(6):
            inputs = imported.random_inputs(seed)
            _agree(pm.execute(inputs, timeout=60, measure=True).outputs, lite.run(inputs))
        assert dev.remote.same_host is not None
        deadline = time.monotonic() + 10
        while LANE_LOG not in srv.log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert LANE_LOG in srv.log_path.read_text()


def _no_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lean._Lane, "of", staticmethod(lambda *args: None))


def test_refusals_and_fallbacks_answer_as_the_full_path(
    litert_server: Server, lane_calls: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each case's status, with the lane and without it (the full path's answer): the same."""
    answered_alike(partial(_cases, litert_server, lane_calls, monkeypatch), partial(_no_lane, monkeypatch))


def _cases(
    litert_server: Server, lane_calls: list[int], monkeypatch: pytest.MonkeyPatch, lane: bool
) -> dict[str, tuple[ErrorStatus, str]]:
    lane_calls.clear()
    imported, lite = _face()
    inputs = imported.random_inputs(1)
    seen: dict[str, tuple[ErrorStatus, str]] = {}
    with (
        Device.connect(litert_server.addresses[0], client_name="lane") as dev,
        dev.prepare_model_sync(imported.model) as pm,
    ):
        for _ in range(4):  # the layout learned, its places known
            pm.execute(inputs, timeout=60)
        ran = len(lane_calls)
        assert (ran > 0) == lane

        # A deadline already passed: refused at launch, nothing run.
        seen["passed"] = _outcome(lambda: pm.execute(inputs, deadline_at=time.monotonic() - 1))
        # A profile asked for: the full path, which profiles the one LiteRT step.
        profiled = pm.execute(inputs, timeout=60, profile=True)
        _agree(profiled.outputs, lite.run(inputs))
        assert any("litert" in name for name in profiled.profile)
        assert len(lane_calls) == ran

        # The request's data over what the budget has: refused with the full path's status.
        with request_data_refused(monkeypatch):
            seen["over"] = _outcome(lambda: pm.execute(inputs, timeout=60))
        assert len(lane_calls) == ran

        # A deadline missed while the graph runs: the run's last checkpoint says so.
        real_invoke = runtime.LiteRtLane.__call__ if lane else runtime.LiteRtGraph._invoke

        def slow(*args: Any) -> Any:
            time.sleep(0.3)
            return real_invoke(*args)

        with monkeypatch.context() as m:
            m.setattr(runtime.LiteRtLane if lane else runtime.LiteRtGraph, "__call__" if lane else "_invoke", slow)
            seen["missed"] = _outcome(lambda: pm.execute(inputs, deadline_at=time.monotonic() + 0.1))

        # ... and the device serves on, through the lane again.
        _agree(pm.execute(inputs, timeout=60).outputs, lite.run(inputs))
        assert (len(lane_calls) > ran) == lane
    check_refusals(seen)
    return seen

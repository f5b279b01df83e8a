"""The early ring on the litert device (``doorbell.announce``): a compact call of a sync client
that looks for its answer asks to be rung as soon as LiteRT's invoke returns; the server rings
it early then, and again once the answer is written, and the answers are LiteRT's, whether
the client was woken early or not. Such a call (a large one) rings the server early too,
before its input is copied into the ring."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.remote.fastpath import FastBurstLink
from nnhal.core import lookout
from nnhal.core.doorbell import HERALD
from nnhal.models import FACE_DETECTION, tflite_model

pytest.importorskip("ai_edge_litert")
from nnhal.importers.litert import LiteRtRunner
from nnhal.importers.tflite_model import import_tflite
from nnhal.server.litert import runtime
from nnhal.server.rpc.serve import Server

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def spare(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with a core to spare, and a CPU idle (the litert device's server:
    ``litert_server``)."""
    monkeypatch.setattr(lookout.LOAD, "spare", lambda: True)
    monkeypatch.setattr(lookout.LOAD, "idle", lambda: True)


def test_compact_calls_that_ask_are_rung_early_and_answer_as_litert(
    litert_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(FastBurstLink, "HYBRID_WAIT", True)
    monkeypatch.setattr(FastBurstLink, "HYBRID_FORCED", True)  # the client looks, whatever the load
    armed: list[bool] = []
    real = runtime.announce  # type: ignore[attr-defined]  # what the module imported

    def spy() -> None:
        armed.append(HERALD.ring is not None)
        real()

    monkeypatch.setattr(runtime, "announce", spy)
    # What the client asked per compact call: its lookout's credit is spent by the time it
    # looked, which a loaded machine stretches (a look descheduled midway), so whether it asks
    # is the lookout's call; the server must ring early exactly when asked.
    asked: list[bool] = []
    real_ask = FastBurstLink.wake_early

    def ask(link: FastBurstLink) -> bool:
        answer = real_ask(link)
        asked.append(answer)
        return answer

    monkeypatch.setattr(FastBurstLink, "wake_early", ask)
    # A call that asks rings the server early too, before its input (192 KiB) is copied in.
    early_rings: list[bool] = []
    real_ring = FastBurstLink.ring_early

    def ring(link: FastBurstLink) -> None:
        early_rings.append(True)
        real_ring(link)

    monkeypatch.setattr(FastBurstLink, "ring_early", ring)
    face = tflite_model(FACE_DETECTION)
    imported = import_tflite(face)
    lite = LiteRtRunner(face, threads=1)
    with (
        Device.connect(litert_server.addresses[0], client_name="early") as dev,
        dev.prepare_model_sync(imported.model) as pm,
    ):
        for seed in range(6):
            inputs = imported.random_inputs(seed)
            ours: list[Any] = pm.execute(inputs, timeout=60).outputs
            for a, b in zip(ours, lite.run(inputs)):
                np.testing.assert_allclose(a.reshape(b.shape), b, rtol=1e-4, atol=1e-4)
        queue = dev.remote.same_host
        assert queue is not None and queue.open
    # The first call asked for the layout's id (a full request: not rung early); the others
    # were compact calls, rung early when they asked — the first of them with its lookout's
    # whole credit, so it did.
    assert len(asked) == 5 and asked[0]
    assert armed == [False, *asked]
    assert len(early_rings) == sum(asked)

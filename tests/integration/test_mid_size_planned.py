"""A mid-size model (face_detection_short_range: a 196 KiB float32 input, larger than the
inline limits of the event loop's executions) on the litert and ort devices, across processes,
through the public client (numpy in, numpy out) on the same-host queue's planned path.

Its repeated calls travel as compact calls (``SameHostQueue.execute_planned``) and launch
lean on the server (``lean.launch_compact``, also under the server's call log); their
answers match LiteRT on the original file; garbage on the queue is refused with
INVALID_ARGUMENT and the device serves on, with the right answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.remote.samehost import SameHostQueue
from nnhal.core import fastpacket, samehost
from nnhal.core.enums import ErrorStatus
from nnhal.models import FACE_DETECTION, tflite_model
from nnhal.testing.local_server import LocalServer

pytest.importorskip("ai_edge_litert")
from nnhal.importers.compare import diff
from nnhal.importers.litert import LiteRtRunner
from nnhal.importers.tflite_model import import_tflite

pytestmark = pytest.mark.integration

#: The devices, and the extra each needs beside LiteRT (which the comparison runs).
KINDS = {"litert": None, "ort": "onnxruntime"}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> str:
    needs = KINDS[request.param]
    if needs is not None:
        pytest.importorskip(needs)
    return str(request.param)


@pytest.fixture
def device_of(kind: str) -> Iterator[Device]:
    with (
        LocalServer("--device", kind, "--ort-threads", "1") as srv,
        Device.connect(srv.address, client_name="mid-size") as dev,
    ):
        yield dev


@pytest.fixture
def carried(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per planned call the session's queue carried."""
    seen: list[bool] = []
    real = SameHostQueue.execute_planned

    def spy(queue: SameHostQueue, *args: Any) -> Any:
        result = real(queue, *args)
        if result is not None:
            seen.append(True)
        return result

    monkeypatch.setattr(SameHostQueue, "execute_planned", spy)
    return seen


def _agree(ours: list[np.ndarray], theirs: list[np.ndarray]) -> None:
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        d = diff(a.reshape(b.shape), b)
        assert d.ok, d


def test_mid_size_calls_are_planned_and_answer_as_litert(device_of: Device, kind: str, carried: list[bool]) -> None:
    face = tflite_model(FACE_DETECTION)
    imported = import_tflite(face)
    lite = LiteRtRunner(face, threads=1)
    assert imported.inputs[0].shape == (1, 128, 128, 3)
    with device_of.prepare_model_sync(imported.model) as pm:
        for seed in range(5):
            inputs = imported.random_inputs(seed)
            _agree(pm.execute(inputs, timeout=60).outputs, lite.run(inputs))
        # The first call asked for the layout's id; the four others were compact calls.
        assert len(carried) == 4
        queue = device_of.remote.same_host
        assert queue is not None and queue.open


def test_garbage_on_the_queue_is_refused_and_the_device_serves_on(device_of: Device, carried: list[bool]) -> None:
    face = tflite_model(FACE_DETECTION)
    imported = import_tflite(face)
    lite = LiteRtRunner(face, threads=1)
    inputs = imported.random_inputs(1)
    with device_of.prepare_model_sync(imported.model) as pm:
        for _ in range(2):
            _agree(pm.execute(inputs, timeout=60).outputs, lite.run(inputs))
        queue = device_of.remote.same_host
        assert queue is not None and len(queue.open_links) == 1  # one thread: one link
        (link,) = queue.open_links
        (layout,) = link._layouts.values()
        body = inputs[0].tobytes()
        tag = samehost.encode_tag("garbage-1")
        names = samehost.TAG_HEADER.pack(4, 0) + b"\xff\xfe\xfd\xfc"
        bad_tag = names + bytes(-len(names) % fastpacket.ALIGN)
        for payload, why in [
            (tag + fastpacket.encode_call(layout, False, None, 0, [body[:-4], b""]), "layout has"),
            (tag + fastpacket.encode_call(layout + 9, False, None, 0, [body, b""]), "unknown layout id"),
            (tag + b"\x00" * 5, "shorter than its header"),
            # Read in place (a large call): its tag's names are read once and refused.
            (bad_tag + fastpacket.encode_call(layout, False, None, 0, [body, b""]), "not ASCII"),
        ]:
            refused = link.send_raw(lambda ring, p=payload: ring.write(fastpacket.CALL, p))  # type: ignore[misc]
            assert refused.status == ErrorStatus.INVALID_ARGUMENT, refused.message
            assert why in refused.message
            again = imported.random_inputs(2)
            _agree(pm.execute(again, timeout=60).outputs, lite.run(again))
        assert len(carried) == 5  # every call after the first went on planned

"""An execution's timeline (``nnhal run --trace FILE``, ``nnhal.client.timeline``) in the
Chrome / Perfetto trace-event format: complete events with microsecond timestamps, the
client's call and transport, the server's time, one event per operation run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.timeline import trace_events
from nnhal.models import FACE_DETECTION, tflite_model
from nnhal.testing import LocalServer
from tests.conftest import relu_chain

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]


def _check_format(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """Every event well formed for the trace-event format; the complete ("X") events."""
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    for e in events:
        assert e["ph"] in ("X", "M"), e
        assert isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "X":
            assert isinstance(e["ts"], int | float) and isinstance(e["dur"], int | float) and e["dur"] >= 0
            assert isinstance(e["tid"], int)
    return [e for e in events if e["ph"] == "X"]


def test_one_event_per_operation_run(server: LocalServer) -> None:
    with Device.connect(server.address) as dev, dev.prepare_model_sync(relu_chain(12)) as pm:
        out = pm.execute([np.ones((1, 64), np.float32)], measure=True, profile=True)
        assert len(out.timeline) == sum(count for _, count, _ in out.profile) == 12
        assert [t.index for t in out.timeline] == sorted(t.index for t in out.timeline)
        assert all(t.operation == "RELU" and t.subgraph == 0 for t in out.timeline)
        complete = _check_format(trace_events(out, 1000.0, 5000.0, dev.name))
    ops = [e for e in complete if e["pid"] == 2 and e["tid"] == 2]
    assert len(ops) == 12 and all(e["name"] == "RELU" for e in ops)
    names = {e["name"] for e in complete}
    assert {"call", "request", "answer", "in driver"} <= names
    call = next(e for e in complete if e["name"] == "call")
    assert call["ts"] == 1000.0 and call["dur"] == 4000.0
    # Without profile=True there is no timeline.
    with Device.connect(server.address) as dev, dev.prepare_model_sync(relu_chain(3)) as pm:
        assert pm.execute([np.ones((1, 64), np.float32)]).timeline == ()


def test_nnhal_run_writes_a_trace(tmp_path: Path) -> None:
    model = tflite_model(FACE_DETECTION)
    out = tmp_path / "t.json"
    done = subprocess.run(
        [sys.executable, "-m", "nnhal", "run", "--start", str(model), "--trace", str(out)],
        capture_output=True,
        text=True,
        timeout=150,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"timeline written to {out}" in done.stdout
    complete = _check_format(json.loads(out.read_text()))
    ops = [e for e in complete if e["pid"] == 2 and e["tid"] == 2]
    assert len(ops) > 50  # face detection's operations (folded activations excluded)
    assert {"CONV_2D", "DEPTHWISE_CONV_2D"} <= {e["name"] for e in ops}

"""One trace across a client process and a server process (``OTEL_TRACES_EXPORTER=console``):
the client's spans and the server's share the trace id the client's W3C context carried."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nnhal.testing import LocalServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _spans(text: str) -> list[dict[str, Any]]:
    """The spans the console exporter printed (one JSON object each) among other output."""
    decoder = json.JSONDecoder()
    spans = []
    for m in re.finditer(r"^\{", text, re.M):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and "context" in obj and "name" in obj:
            spans.append(obj)
    return spans


def test_one_trace_spans_a_client_and_a_server_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    log = tmp_path / "server.log"
    with LocalServer(log_file=log) as srv:
        done = subprocess.run(
            [sys.executable, "-m", "nnhal", "demo", srv.address],
            capture_output=True,
            text=True,
            timeout=90,
            env={**os.environ, "OTEL_SERVICE_NAME": "test-client"},
        )
        assert done.returncode == 0, done.stderr
    client = _spans(done.stdout)
    server = _spans(log.read_text())
    root = [s for s in client if s["name"] == "nnhal demo"]
    assert len(root) == 1, [s["name"] for s in client]
    trace_id = root[0]["context"]["trace_id"]
    assert root[0]["resource"]["attributes"]["service.name"] == "test-client"
    calls = [s for s in client if s["name"] == "/nnhal.v1.PreparedModel/executeSynchronously_1_3"]
    assert calls and all(s["context"]["trace_id"] == trace_id for s in calls)
    mine = [s for s in server if s["context"]["trace_id"] == trace_id]
    names = {s["name"] for s in mine}
    assert {"/nnhal.v1.PreparedModel/executeSynchronously_1_3", "nnhal.launch", "nnhal.run"} <= names, names
    rpc = next(s for s in mine if s["name"] == "/nnhal.v1.PreparedModel/executeSynchronously_1_3")
    assert rpc["parent_id"] in {s["context"]["span_id"] for s in calls}  # the client's span is its parent
    assert rpc["attributes"]["nnhal.request_id"]
    run = next(s for s in mine if s["name"] == "nnhal.run" and s["parent_id"] == rpc["context"]["span_id"])
    assert run["attributes"]["nnhal.method"] == "executeSynchronously_1_3"
    assert run["attributes"]["nnhal.status"] == "NONE"
    assert all(s["resource"]["attributes"]["service.name"] == "nnhal-server" for s in server)


def test_tracing_is_off_without_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    log = tmp_path / "server.log"
    with LocalServer(log_file=log) as srv:
        done = subprocess.run(
            [sys.executable, "-m", "nnhal", "demo", srv.address], capture_output=True, text=True, timeout=90
        )
        assert done.returncode == 0, done.stderr
    assert not _spans(done.stdout) and not _spans(log.read_text())
    code = "import sys, nnhal.client.device, nnhal.server.rpc.serve; print('opentelemetry.sdk' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert loaded.stdout.strip() == "False", loaded.stderr

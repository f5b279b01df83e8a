"""What ``nnhal`` writes: output to a closed pipe ends quietly (status 141, nothing on
stderr), and ``--log-format json`` is one JSON object per line."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from nnhal.cli.logs import JsonFormatter, StderrHandler
from nnhal.testing.local_server import LocalServer

ROOT = Path(__file__).resolve().parents[2]


def _into_closed_pipe(*argv: str) -> subprocess.CompletedProcess[str]:
    """``nnhal ARGV | head -0``, deterministically: the reader is gone before the first write."""
    read, write = os.pipe()
    os.close(read)
    try:
        command = [sys.executable, "-m", "nnhal", *argv]
        return subprocess.run(command, stdout=write, stderr=subprocess.PIPE, text=True, timeout=60, cwd=ROOT)
    finally:
        os.close(write)


@pytest.mark.timeout(120)
def test_print_config_into_a_closed_pipe_is_quiet() -> None:
    done = _into_closed_pipe("serve", "--print-config")
    assert (done.returncode, done.stderr) == (141, "")


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_info_into_a_closed_pipe_is_quiet(server: LocalServer) -> None:
    done = _into_closed_pipe("info", server.address)
    assert (done.returncode, done.stderr) == (141, "")


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_info_piped_to_head(server: LocalServer) -> None:
    done = subprocess.run(
        f"{sys.executable} -m nnhal info {server.address} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0 and done.stderr == "" and done.stdout.startswith("property")


def test_json_log_lines() -> None:
    formatter = JsonFormatter()
    record = logging.LogRecord("nnhal.x", logging.WARNING, __file__, 1, "two\nlines %d", (2,), None)
    record.request_id = "r-1"
    line = formatter.format(record)
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["level"] == "WARNING" and entry["logger"] == "nnhal.x" and entry["message"] == "two\nlines 2"
    assert entry["request_id"] == "r-1" and entry["ts"].endswith("Z")
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("nnhal.x", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    assert "ValueError: boom" in json.loads(formatter.format(record))["exception"]


def test_the_log_handler_writes_to_the_stderr_of_the_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A program running ``nnhal`` in-process may swap (and close) its stderr afterwards: a
    record goes to the stream of the moment, never to the one closed."""
    handler = StderrHandler()
    first, second = io.StringIO(), io.StringIO()
    record = logging.LogRecord("nnhal.x", logging.WARNING, __file__, 1, "%s", ("hello",), None)
    monkeypatch.setattr(sys, "stderr", first)
    handler.emit(record)
    first.close()
    monkeypatch.setattr(sys, "stderr", second)
    handler.emit(record)
    assert second.getvalue() == "hello\n"


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_serve_logs_json(tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    with LocalServer("--cache-secret-file", "none", "--log-format", "json", log_file=log_file):
        pass
    lines = [line for line in log_file.read_text().splitlines() if line.startswith("{")]
    entries = [json.loads(line) for line in lines]
    assert any(e["logger"] == "nnhal.server.rpc.serve" and "serving" in e["message"] for e in entries), lines


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_serve_settings_from_the_environment_reach_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """NNHAL_* variables are read by a real server: the metrics listener they ask for answers."""
    monkeypatch.setenv("NNHAL_METRICS_LISTEN", "127.0.0.1:0")
    monkeypatch.setenv("NNHAL_DRAIN_SECONDS", "0.5")
    monkeypatch.setenv("NNHAL_NAME", "nnhal-from-env")
    with LocalServer("--cache-secret-file", "none") as srv:
        address = srv.port_file.with_name(srv.port_file.name + ".metrics").read_text().strip()
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
            assert response.status == 200 and b"nnhal_" in response.read()
        command = [sys.executable, "-m", "nnhal", "info", srv.address]
        info = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert info.returncode == 0 and "nnhal-from-env" in info.stdout, info.stderr

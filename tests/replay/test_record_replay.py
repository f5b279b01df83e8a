"""Record & replay across processes: ``nnhal serve --record DIR`` writes a session's calls,
``nnhal replay FILE`` replays them on another server and lists the differences."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.core.enums import ErrorStatus, Priority
from nnhal.core.errors import InvalidArgument
from nnhal.core.recording import read_recording
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


def _replay(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nnhal", "replay", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def _record_a_session(folder: Path) -> Path:
    """A session of prepares and executions in several forms, one of them refused."""
    with (
        LocalServer("--record", str(folder)) as srv,
        Device.connect(srv.address, client_name="recorded") as dev,
        dev.prepare_model_sync(add_model(), priority=Priority.HIGH) as pm,
    ):
        a, b = np.arange(8, dtype=np.float32).reshape(2, 4), np.full((2, 4), 0.5, np.float32)
        assert np.allclose(pm.execute([a, b]).outputs[0], a + b)
        assert np.allclose(pm.execute_async([b, a]).get(30).outputs[0], a + b)
        with pm.burst() as burst:
            request, _layout = pm._numpy_request([a, a], None)
            assert burst.execute(request).status == ErrorStatus.NONE
        bad = Request(
            (RequestArgument(location=DataLocation(0, 0, 32)),),
            (RequestArgument(location=DataLocation(1, 0, 32)),),
            (InlinePool(b"\0" * 32, 32), InlinePool(b"", 32)),
        )
        assert pm.execute_request(bad).status == ErrorStatus.INVALID_ARGUMENT  # one input of two
    files = sorted(folder.glob("*.nnrec"))
    assert len(files) == 1, files
    return files[0]


def test_a_recorded_session_replays_with_no_difference_and_differs_on_an_older_level(tmp_path: Path) -> None:
    path = _record_a_session(tmp_path / "calls")
    rec = read_recording(path)
    assert rec.complete, "the session's end wrote the end frame"
    assert [c["kind"] for c in rec.calls] == ["prepare", "execute", "execute", "execute", "execute"]
    assert rec.calls[0]["args"]["priority"] == "HIGH"
    assert rec.calls[-1]["status"] == "INVALID_ARGUMENT"

    same = _replay(str(path), "--start", "--timing")
    assert same.returncode == 0, same.stdout + same.stderr
    assert same.stdout.strip().splitlines()[-1] == "5 calls replayed, 0 differences"
    assert "replayed/recorded" in same.stdout  # --timing's table

    older = _replay(str(path), "--start", "--feature-level", "1.0")
    assert older.returncode == 1, older.stdout + older.stderr
    last = older.stdout.strip().splitlines()[-1]
    assert last.startswith("5 calls replayed, ") and not last.endswith(" 0 differences"), last
    assert "status" in older.stdout and "NONE" in older.stdout  # the table names the status that differs


def test_a_tampered_or_truncated_recording_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = _record_a_session(tmp_path / "calls")
    data = path.read_bytes()
    cut = tmp_path / "cut.nnrec"
    cut.write_bytes(data[: len(data) // 2 + 3])
    tampered = tmp_path / "tampered.nnrec"
    tampered.write_bytes(data[:-40] + bytes([data[-40] ^ 1]) + data[-39:])
    for bad in (cut, tampered, tmp_path / "missing.nnrec"):
        done = _replay(str(bad), "--start")
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("nnhal: error:") and str(bad) in lines[0], done.stderr
        assert "Traceback" not in done.stderr


def test_the_recorded_conformance_sample_replays_with_no_difference(tmp_path: Path) -> None:
    """A slice of the conformance sample, in every mode, through a recording server."""
    from tests.integration.test_conformance_cli import _sample

    docs, _ops = _sample()
    bundle = tmp_path / "sample.json.gz"
    with gzip.open(bundle, "wt", encoding="utf-8") as f:
        json.dump(docs[::8], f)
    folder = tmp_path / "calls"
    with LocalServer("--record", str(folder)) as srv:
        done = subprocess.run(
            [sys.executable, "-m", "nnhal", "conformance", str(bundle), "--target", srv.address],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=ROOT,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    files = sorted(folder.glob("*.nnrec"))
    assert files
    calls = 0
    for path in files:
        rec = read_recording(path)
        if not rec.calls:
            continue
        replay = _replay(str(path), "--start")
        assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-2000:]
        last = replay.stdout.strip().splitlines()[-1]
        assert " 0 differences" in last, last
        calls += int(last.split()[0])
    assert calls > 100
    print(f"\n{len(files)} recordings, {calls} calls replayed with 0 differences")


def test_record_is_refused_where_it_cannot_write(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    done = subprocess.run(
        [sys.executable, "-m", "nnhal", "serve", "--record", str(blocker)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "--record" in done.stderr and "not a folder" in done.stderr


def test_a_client_recording_replays_with_no_difference(tmp_path: Path) -> None:
    path = tmp_path / "client.nnrec"
    a, b = np.arange(8, dtype=np.float32).reshape(2, 4), np.full((2, 4), 2.0, np.float32)
    with (
        LocalServer() as srv,
        Device.connect(srv.address, record=path) as dev,
        dev.prepare_model_sync(add_model(), priority=Priority.LOW) as pm,
    ):
        assert np.allclose(pm.execute([a, b]).outputs[0], a + b)
        assert np.allclose(pm.execute_async([b, b]).get(30).outputs[0], b + b)
        with pytest.raises(InvalidArgument, match="cannot write a recording"):
            Device.connect(srv.address, record=path)  # never over an existing file
    rec = read_recording(path)
    assert rec.complete and rec.header["recorder"] == "client"
    assert [(c["kind"], c["method"]) for c in rec.calls] == [
        ("prepare", "prepareModel_1_3"),
        ("execute", "executeSynchronously_1_3"),
        ("execute", "execute_1_3"),
    ]
    assert rec.calls[0]["args"]["priority"] == "LOW"
    done = _replay(str(path), "--start")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == "3 calls replayed, 0 differences"

"""The Dockerfile, checked without a Docker engine: its shape, its install step
(building the package as `pip install .` does) and its start + health steps
run on loopback."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from nnhal.testing.local_server import LocalServer

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration


def _instructions() -> list[tuple[str, str]]:
    lines = (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    out = []
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _exec_form(text: str) -> list[str]:
    return list(json.loads(text)) if text.startswith("[") else shlex.split(text)


def test_dockerfile_shape() -> None:
    ins = _instructions()
    kinds = [k for k, _ in ins]
    assert ins[0][0] == "FROM" and ins[0][1].endswith("-slim")
    user = [v for k, v in ins if k == "USER"]
    assert user and user[-1] not in ("root", "0")
    assert "50051" in [v for k, v in ins if k == "EXPOSE"]
    assert "HEALTHCHECK" in kinds and kinds.index("USER") < kinds.index("CMD")
    cmd = _exec_form(next(v for k, v in ins if k == "CMD"))
    assert cmd[:2] == ["nnhal", "serve"]


def test_install_step_builds_a_complete_package(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        timeout=300,
    )
    wheel = next(tmp_path.glob("nnhal-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("nnhal/proto/service_pb2.py", "nnhal/proto/types_pb2.pyi", "nnhal/cli/main.py", "nnhal/py.typed"):
        assert needed in names, needed
    assert any(n.endswith("entry_points.txt") for n in names)


def test_start_and_health_steps_on_loopback() -> None:
    ins = _instructions()
    cmd = _exec_form(next(v for k, v in ins if k == "CMD"))
    health = _exec_form(next(v for k, v in ins if k == "HEALTHCHECK").split(" CMD ", 1)[1])
    # Same command, but bound to loopback and an ephemeral port (tests never listen elsewhere).
    args = [a for a in cmd[2:] if a not in ("--listen", "0.0.0.0:50051")]
    with LocalServer(*args) as srv:
        probe = [sys.executable if health[0] == "python" else health[0], *health[1:-1], srv.address]
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "serving"

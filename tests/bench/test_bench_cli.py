"""``nnhal bench --quick ipc.sync_small --json FILE`` as a user runs it: the JSON keeps the
contract (DESIGN §11). No timing is asserted, only that both sides were measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def test_quick_sync_small_writes_the_json_contract(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "nnhal", "bench", "--quick", "ipc.sync_small", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(out.read_text())
    assert set(results) == {"ipc.sync_small", "ipc.sync_small.unix"}
    for name, entry in results.items():
        assert {"value", "anchor", "ratio", "unit", "goal"} <= set(entry), name
        assert entry["value"] > 0 and entry["anchor"] > 0 and entry["ratio"] > 0, entry
        assert name in done.stdout


def test_unknown_benchmark_is_exit_status_2() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nnhal", "bench", "no.such.bench"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 2
    assert "unknown benchmark" in done.stderr and "ipc.sync_small" in done.stderr

"""`nnhal conformance ... --start` over every public vector, as a user runs it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "conformance" / "vectors"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(900)
def test_all_public_vectors_pass_in_every_mode(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "nnhal", "conformance", str(VECTORS), "--start", "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=880,
        cwd=ROOT,
    )
    last = done.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"(\d+) passed, (\d+) failed, (\d+) skipped", last)
    assert match, f"last line is not the summary: {last!r}\n{done.stderr[-2000:]}"
    passed, failed, skipped = map(int, match.groups())
    results = json.loads(report.read_text())
    failures = {k: v["detail"] for k, v in results.items() if v["status"] == "failed"}
    assert failed == len(failures) == 0, list(failures.items())[:10]
    assert done.returncode == 0
    assert passed == sum(v["status"] == "passed" for v in results.values())
    assert skipped == sum(v["status"] == "skipped" for v in results.values())
    modes = {k.rsplit("/", 1)[1] for k in results}
    assert {"sync", "async", "dynamic", "quant_signed", "shared", "domain"} <= modes
    assert all(v["detail"] for v in results.values() if v["status"] == "skipped"), "every skip has a reason"

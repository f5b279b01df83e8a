"""`nnhal conformance ... --start` end to end, as a user runs it.

``make test`` runs the command on a sample of the public vectors, written to a vector
bundle of its own: for every operation the public vectors use, one case per type of its
first input (and one more where the quant8-signed twin applies), plus every
expect-failure case (the loop timeout among them) — about 350 cases, in every mode.
The whole public set (6,833 cases) in every mode is ``make conformance``; this test
runs it too under ``NNHAL_SOAK=1`` (``make soak``).
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nnhal.conformance.runner import MODES
from nnhal.conformance.variants import coupling_applies
from nnhal.conformance.vectors import TestCase, discover, parse_case
from nnhal.core.enums import OperandType, OperationType
from tests.conftest import SOAK

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "conformance" / "vectors"

pytestmark = [pytest.mark.integration]

SampleKey = tuple[OperationType, OperandType | None, bool]


def _keys(case: TestCase) -> set[SampleKey]:
    """What a case stands for: each operation in it, with its first input's type."""
    graphs = (case.model.main, *case.model.referenced)
    twin = coupling_applies(case)
    return {
        (op.type, sg.operands[op.inputs[0]].type if op.inputs else None, twin) for sg in graphs for op in sg.operations
    }


def _sample() -> tuple[list[Any], set[OperationType]]:
    """The raw documents of the sample (first case in file order for each key, every
    expect-failure case), and every operation type the public vectors use."""
    chosen: list[Any] = []
    seen: set[SampleKey] = set()
    for path in discover([VECTORS]):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            docs = json.load(f)
        for doc in docs:
            case = parse_case(doc)
            keys = _keys(case)
            if case.expect_failure or not keys <= seen:
                chosen.append(doc)
                seen |= keys
    return chosen, {key[0] for key in seen}


def _run(paths: list[Path], report: Path, timeout: float) -> dict[str, dict[str, str]]:
    done = subprocess.run(
        [sys.executable, "-m", "nnhal", "conformance", *map(str, paths), "--start", "--report", str(report)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    match = re.fullmatch(r"(\d+) passed, (\d+) failed, (\d+) skipped", last)
    assert match, f"last line is not the summary: {last!r}\n{done.stderr[-2000:]}"
    passed, failed, skipped = map(int, match.groups())
    results: dict[str, dict[str, str]] = json.loads(report.read_text())
    failures = {k: v["detail"] for k, v in results.items() if v["status"] == "failed"}
    assert failed == len(failures) == 0, list(failures.items())[:10]
    assert done.returncode == 0
    assert passed == sum(v["status"] == "passed" for v in results.values())
    assert skipped == sum(v["status"] == "skipped" for v in results.values())
    modes = {k.rsplit("/", 1)[1] for k in results}
    assert set(MODES) <= modes, modes
    assert all(v["detail"] for v in results.values() if v["status"] == "skipped"), "every skip has a reason"
    return results


@pytest.mark.timeout(300)
def test_a_sample_of_every_operation_passes_in_every_mode(tmp_path: Path) -> None:
    docs, operations = _sample()
    assert len(operations) >= 90, sorted(op.name for op in operations)  # the public set uses 95
    bundle = tmp_path / "sample.json.gz"
    with gzip.open(bundle, "wt", encoding="utf-8") as f:
        json.dump(docs, f)
    results = _run([bundle], tmp_path / "report.json", timeout=280)
    names = {parse_case(doc).name for doc in docs}
    assert {k.rsplit("/", 1)[0] for k in results} == names  # every sampled case was run
    print(f"\n{len(docs)} sampled cases cover {len(operations)} operations; {len(results)} mode runs")


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not SOAK, reason="the whole public set is `make conformance` (or NNHAL_SOAK=1)")
def test_all_public_vectors_pass_in_every_mode(tmp_path: Path) -> None:
    _run([VECTORS], tmp_path / "report.json", timeout=880)

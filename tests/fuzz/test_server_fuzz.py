"""``make fuzz`` in small: the campaign through a real server process runs, counts its findings
apart and finds none in a bounded, seeded run (the long run is ``make fuzz``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def test_a_seeded_campaign_through_a_server_finds_nothing() -> None:
    env = {**os.environ, "NNHAL_FUZZ_SEED": "23", "NNHAL_FUZZ_EXAMPLES": "80"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.server"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280
    )
    last = done.stdout.strip().splitlines()[-1]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert last.startswith("fuzz: seed 23: ") and last.endswith(
        "0 crashes, 0 hangs, 0 transport errors, 0 internal errors"
    ), last

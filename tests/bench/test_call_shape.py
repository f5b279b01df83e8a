"""The call-shape measurement: every variant's bare server answers, the figures are per call
and per side, and a variant it does not know is refused on the command line (exit 2)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from nnhal.bench import call_shape

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_each_variant_is_served_and_measured() -> None:
    variants = ["unary+id+trail+cb", "stream1+id+trail+cb@opts+thread+switch"]
    if importlib.util.find_spec("uvloop") is not None:
        variants.append("stream1+id+trail+cb@thread+uvloop")
    results = call_shape.measure(variants, calls=20, rounds=1)
    assert list(results) == variants
    for server, client in results.values():
        assert server >= 0.0 and client > 0.0


def test_an_unknown_variant_is_one_line_and_exit_2() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "nnhal.bench.call_shape", "stream1+echo"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2 and "unknown variant 'stream1+echo'" in out.stderr
    with pytest.raises(ValueError):
        call_shape.parse("bidi")

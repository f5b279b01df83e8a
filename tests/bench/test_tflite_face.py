"""``exec.tflite_face`` (quick) keeps the JSON contract and checks its outputs against LiteRT
before timing; no timing is asserted."""

from __future__ import annotations

import os

import pytest

from nnhal.bench.registry import benchmarks
from nnhal.importers import litert

#: The BLAS thread-count variables: the benchmark leaves the environment as it found it.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not litert.available(), reason="LiteRT (ai-edge-litert, the 'tflite' extra) is not installed"),
]


def test_quick_run_reports_both_sides() -> None:
    before = {name: os.environ.get(name) for name in BLAS_THREAD_VARIABLES}
    results = benchmarks()["exec.tflite_face"](True)
    assert set(results) == {"exec.tflite_face"}
    r = results["exec.tflite_face"]
    assert r.value > 0 and r.anchor > 0 and r.ratio == pytest.approx(r.value / r.anchor)
    assert r.unit == "ms per inference" and "max |diff| vs LiteRT" in r.detail and "CONV_2D" in r.detail
    assert {name: os.environ.get(name) for name in BLAS_THREAD_VARIABLES} == before

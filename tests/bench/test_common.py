"""The shared benchmark timing: interleaved rounds and percentiles (counts, never times)."""

from __future__ import annotations

import pytest

from nnhal.bench.common import BenchError, check, interleaved, percentiles


def test_interleaved_alternates_rounds_after_a_warm_up() -> None:
    calls: list[str] = []
    t_ours, t_anchor = interleaved(lambda: calls.append("o"), lambda: calls.append("a"), rounds=4, per_round=3)
    assert calls[:6] == ["o", "a"] * 3  # warm-up: both paths, alternately
    assert calls[6:] == (["o"] * 3 + ["a"] * 3) * 4
    assert t_ours >= 0 and t_anchor >= 0


def test_percentiles() -> None:
    p50, p99 = percentiles([float(v) for v in range(101)])
    assert (p50, p99) == (50.0, 99.0)


def test_check_raises_bench_error() -> None:
    check(True, "fine")
    with pytest.raises(BenchError, match="wrong result"):
        check(False, "wrong result")

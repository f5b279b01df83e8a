"""The shared benchmark timing: interleaved rounds, CPU per call and percentiles (counts, never times)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from nnhal.bench.common import (
    BenchError,
    CpuPerCall,
    check,
    cpu_note,
    cpu_per_call,
    interleaved,
    percentiles,
    process_cpu_seconds,
)


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


def _gone_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    return proc.pid


def test_cpu_per_call_takes_the_sides_in_turn_and_reads_each_server() -> None:
    calls: list[str] = []
    me = os.getpid()
    cpu = cpu_per_call([(lambda: calls.append("o"), me), (lambda: calls.append("a"), _gone_pid())], 2, 3)
    assert calls == (["o"] * 3 + ["a"] * 3) * 2
    assert cpu[0].client >= 0 and cpu[1].client >= 0
    if process_cpu_seconds(me) is not None:  # Linux: /proc
        assert cpu[0].server is not None and cpu[0].server >= 0
    assert cpu[1].server is None  # its process is gone: not readable


def test_cpu_note_names_each_side_in_microseconds() -> None:
    note = cpu_note(("ours", "anchor"), [CpuPerCall(250e-6, 500e-6), CpuPerCall(170e-6, None)])
    assert note == "; CPU per call, client / server (us): ours 250 / 500, anchor 170 / n/a"

"""What every benchmark shares: the result record, interleaved timing, and a local server.

A benchmark is a function ``(quick) -> {name: BenchResult}`` (one entry, or a
TCP and a unix-socket entry). ``BenchResult`` is the JSON contract of DESIGN
§11 (``value``, ``anchor``, ``ratio``, ``unit``, ``goal``) plus a ``detail``
that says what exactly was measured. Latencies are medians of interleaved
rounds (ours, anchor, ours, ...), so that machine noise hits both sides alike.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnhal.client.device import Device
from nnhal.testing.local_server import LocalServer


@dataclass
class BenchResult:
    value: float
    anchor: float
    ratio: float
    unit: str
    goal: str
    detail: str = ""


Bench = Callable[[bool], dict[str, BenchResult]]


class BenchError(RuntimeError):
    """A benchmark produced a wrong result: its timing would mean nothing."""


def check(ok: bool, what: str) -> None:
    if not ok:
        raise BenchError(what)


def transport(unix: bool) -> str:
    return "unix socket" if unix else "TCP loopback"


@contextmanager
def local_server(unix: bool = False, *server_args: str) -> Iterator[tuple[LocalServer, Device]]:
    """A server in its own process on loopback (or a unix socket) and a device connected to it;
    both are closed on exit."""
    with LocalServer(*server_args, unix=unix) as srv, Device.connect(srv.address, client_name="nnhal-bench") as dev:
        yield srv, dev


@contextmanager
def local_device(unix: bool = False, *server_args: str) -> Iterator[Device]:
    """:func:`local_server`'s device."""
    with local_server(unix, *server_args) as (_srv, dev):
        yield dev


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds process ``pid`` used so far (None where /proc is missing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def interleaved(
    ours: Callable[[], object], anchor: Callable[[], object], rounds: int, per_round: int
) -> tuple[float, float]:
    """Median seconds per call of each side, measured in alternating rounds."""
    t_ours, t_anchor = interleaved_all([ours, anchor], rounds, per_round)
    return t_ours, t_anchor


def interleaved_all(calls: Sequence[Callable[[], object]], rounds: int, per_round: int) -> list[float]:
    """Median seconds per call of each of ``calls``, measured in rounds that take them in turn
    (after a warm-up of three calls each, in turn)."""
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(3):  # warm-up every path
        for call in calls:
            call()
    for _ in range(rounds):
        for call, samples in zip(calls, times):
            t0 = time.perf_counter()
            for _ in range(per_round):
                call()
            samples.append((time.perf_counter() - t0) / per_round)
    return [statistics.median(samples) for samples in times]


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds process ``pid`` has used so far, all its threads (Linux
    ``/proc``); None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class CpuPerCall:
    """CPU seconds per call of one side of a benchmark: this (client) process's, all its
    threads (``time.process_time``), and its server process's (None: not readable here)."""

    client: float
    server: float | None


def cpu_per_call(sides: Sequence[tuple[Callable[[], object], int]], rounds: int, per_round: int) -> list[CpuPerCall]:
    """CPU per call of each side ``(call, server pid)``, over ``rounds`` rounds of ``per_round``
    calls that take the sides in turn (totals over all rounds: the server's figure counts in
    clock ticks, too coarse for one round)."""
    client = [0.0] * len(sides)
    server: list[float | None] = [0.0] * len(sides)
    for _ in range(rounds):
        for k, (call, pid) in enumerate(sides):
            s0, c0 = process_cpu_seconds(pid), time.process_time()
            for _ in range(per_round):
                call()
            c1, s1 = time.process_time(), process_cpu_seconds(pid)
            client[k] += c1 - c0
            before = server[k]
            server[k] = None if before is None or s0 is None or s1 is None else before + s1 - s0
    n = rounds * per_round
    return [CpuPerCall(c / n, None if s is None else s / n) for c, s in zip(client, server)]


def cpu_note(names: Sequence[str], cpu: Sequence[CpuPerCall]) -> str:
    """``cpu`` of the sides ``names`` for a benchmark's detail: client / server µs per call."""

    def us(seconds: float | None) -> str:
        return "n/a" if seconds is None else f"{seconds * 1e6:.0f}"

    sides = ", ".join(f"{name} {us(c.client)} / {us(c.server)}" for name, c in zip(names, cpu))
    return f"; CPU per call, client / server (us): {sides}"


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) of ``samples``."""
    arr = np.sort(np.asarray(samples))
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99))

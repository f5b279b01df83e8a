"""What every benchmark shares: the result record, interleaved timing, and a local server.

A benchmark is a function ``(quick) -> {name: BenchResult}`` (one entry, or a
TCP and a unix-socket entry). ``BenchResult`` is the JSON contract of DESIGN
§11 (``value``, ``anchor``, ``ratio``, ``unit``, ``goal``) plus a ``detail``
that says what exactly was measured. Latencies are medians of interleaved
rounds (ours, anchor, ours, ...), so that machine noise hits both sides alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from nnhal.bench import zoo
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
def local_device(unix: bool = False, *server_args: str) -> Iterator[Device]:
    """A server in its own process on loopback (or a unix socket) and a device connected to it;
    both are closed on exit."""
    with LocalServer(*server_args, unix=unix) as srv, Device.connect(srv.address, client_name="nnhal-bench") as dev:
        yield dev


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


def percentiles(samples: list[float]) -> tuple[float, float]:
    """(p50, p99) of ``samples``."""
    arr = np.sort(np.asarray(samples))
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


def mobilenet_from_cache(server_args: Sequence[str], device: str, bound: str, quick: bool) -> BenchResult:
    """Prepare MobileNet-v1 float32 on the device the server ``server_args`` start vs prepare
    it from the cache that preparation returned (both interleaved; the cached model must give
    the same output). ``bound``: the ratio the result is held to."""
    model = zoo.mobilenet_v1(zoo.mobilenet_weights(), False)
    image = zoo.mobilenet_input(False)
    token = bytes(range(32))
    rounds = 3 if quick else 7
    with local_device(False, *server_args) as dev:
        with dev.prepare_model_sync(model, cache_token=token) as first:
            blob = first.model_cache
            expected = first.execute([image], timeout=120).outputs[0]

        def prepare() -> None:
            dev.prepare_model_sync(model, cache_token=token).release()

        def prepare_from_cache() -> None:
            dev.prepare_model_from_cache(blob, token, model).get(120).release()

        with dev.prepare_model_from_cache(blob, token, model).get(120) as cached:
            check(np.array_equal(cached.execute([image], timeout=120).outputs[0], expected), "cached model differs")
        t0 = time.perf_counter()
        t_prepare, t_cache = interleaved(prepare, prepare_from_cache, rounds, 1)
        elapsed = time.perf_counter() - t0
    return BenchResult(
        t_prepare * 1e3,
        t_cache * 1e3,
        t_prepare / t_cache,
        "ms per preparation (value: prepare, anchor: from cache)",
        bound,
        f"MobileNet-v1 float32 on the {device} device, cache {len(blob) / 2**20:.1f} MiB, "
        f"{rounds} interleaved rounds in {elapsed:.1f} s",
    )

"""What the benchmarks of the compiling devices (``litert_device``, ``ort_device``) share.

``server_args(kind)``: a server hosting one device of ``kind`` on one thread.

``versus_in_process``: a model through a server on such a device against its library
in-process on the same inputs. The two sides alternate call by call (the order flips every
pair), so that the load of a shared machine falls on both alike; each ratio is the median
of the pairs' ratios. Two entries: ``NAME``, the server's compute (the execution's time on
device: setting the inputs, the library's invoke, taking the outputs) against the anchor;
``NAME.end_to_end``, the whole call through the public client (numpy in, numpy out, the
session's default path: the same-host queue when the request fits its ring, gRPC over TCP
loopback otherwise) against the same anchor calls. The detail breaks a call down: compute,
the rest of the server's time in driver, and transport plus client (end to end minus time
in driver), each a median over the calls.

``prepare_vs_from_cache``: MobileNet-v1 (float32) prepared afresh with a cache token
(convert, optimize, seal) against prepared from the client's cache file on a server
started after the cache was written (the same secret file, nothing of the first server's
left: the artifact is loaded, not compiled or looked up). The cache is a file the client
saved and holds open (``CacheFile``): the server on this host reads it by descriptor. Each
round prepares afresh once and from the cache ``FROM_CACHE_PER_ROUND`` times, after a
warm-up of both; only the preparation is timed (the release of each prepared model is
not). The ratio is the median of the rounds' ratios (one preparation afresh over the
round's median from the cache).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple, TypeVar

import numpy as np

from nnhal.bench import zoo
from nnhal.bench.common import BenchResult, check, cpu_seconds, local_device
from nnhal.client.cache_files import CacheFile
from nnhal.client.device import Device
from nnhal.core.types import Model
from nnhal.testing.local_server import LocalServer

T = TypeVar("T")

#: Preparations from the cache per round, for each preparation afresh (it is ~10x shorter).
FROM_CACHE_PER_ROUND = 3


def server_args(kind: str, secret: Path | None = None) -> tuple[str, ...]:
    """Arguments of ``nnhal serve`` for one ``kind`` device on one thread; caches sealed with
    the secret in ``secret`` (a fresh one per server when None)."""
    return ("--device", kind, "--ort-threads", "1", "--cache-secret-file", str(secret) if secret else "none")


def prepare_vs_from_cache(kind: str, quick: bool, goal: str) -> BenchResult:
    """Milliseconds to prepare MobileNet-v1 afresh (value) and from the cache file (anchor)."""
    model = zoo.mobilenet_v1(zoo.mobilenet_weights(), False)
    image = zoo.mobilenet_input(False)
    token = bytes(range(32))
    rounds = 3 if quick else 9
    with tempfile.TemporaryDirectory(prefix="nnhal-bench-cache-") as tmp:
        args = server_args(kind, Path(tmp) / "secret")
        with local_device(False, *args) as dev, dev.prepare_model_sync(model, cache_token=token) as first:
            expected = first.execute([image], timeout=120).outputs[0]
            saved = CacheFile.save(Path(tmp) / "mobilenet.cache", first.model_cache)
        with saved, local_device(False, *args) as dev:
            by_descriptor = getattr(dev, "shm_memfd", "") != ""

            def prepare() -> float:
                t0 = time.perf_counter()
                pm = dev.prepare_model_sync(model, cache_token=token)
                elapsed = time.perf_counter() - t0
                pm.release()
                return elapsed

            def prepare_from_cache() -> float:
                t0 = time.perf_counter()
                pm = dev.prepare_model_from_cache(saved, token, model).get(120)
                elapsed = time.perf_counter() - t0
                pm.release()
                return elapsed

            with dev.prepare_model_from_cache(saved, token, model).get(120) as cached:
                check(np.array_equal(cached.execute([image], timeout=120).outputs[0], expected), "cached model differs")
            prepare()  # warm-up of both paths
            prepare_from_cache()
            t0 = time.perf_counter()
            afresh: list[float] = []
            from_cache: list[float] = []
            ratios: list[float] = []
            for r in range(rounds):
                # The order flips every round: neither side always follows the other.
                cached_times = [prepare_from_cache() for _ in range(FROM_CACHE_PER_ROUND // 2 if r % 2 else 0)]
                afresh.append(prepare())
                cached_times += [prepare_from_cache() for _ in range(FROM_CACHE_PER_ROUND - len(cached_times))]
                from_cache += cached_times
                ratios.append(afresh[-1] / statistics.median(cached_times))
            elapsed = time.perf_counter() - t0
    how = "read by the server through the client's descriptor" if by_descriptor else "sent as bytes"
    t_prepare, t_cache = statistics.median(afresh), statistics.median(from_cache)
    return BenchResult(
        t_prepare * 1e3,
        t_cache * 1e3,
        statistics.median(ratios),
        "ms per preparation (value: prepare, anchor: from cache)",
        goal,
        f"MobileNet-v1 float32 on the {kind} device, a freshly started server; the client's cache file "
        f"({saved.size / 2**20:.1f} MiB) {how}; {rounds} rounds of 1 preparation afresh and "
        f"{FROM_CACHE_PER_ROUND} from the cache in {elapsed:.1f} s; rounds' ratios {min(ratios):.1f}-"
        f"{max(ratios):.1f}; from the cache {min(from_cache) * 1e3:.1f}-{max(from_cache) * 1e3:.1f} ms",
    )


class _Pair(NamedTuple):
    """One call of each side (seconds): ours end to end, its time on device and in driver,
    and the client thread's CPU; the anchor's wall and CPU time."""

    e2e: float
    compute: float
    driver: float
    client_cpu: float
    anchor: float
    anchor_cpu: float


def _timed(call: Callable[[], T]) -> tuple[float, float, T]:
    """(wall seconds, this thread's CPU seconds, result) of ``call()``."""
    c0, t0 = time.thread_time(), time.perf_counter()
    result = call()
    return time.perf_counter() - t0, time.thread_time() - c0, result


def _paired(ours: Callable[[], tuple[int, int]], anchor: Callable[[], object], pairs: int) -> list[_Pair]:
    """``pairs`` samples: one call of each side back to back, the order flipping every pair,
    after a warm-up of three calls each. ``ours()`` returns the call's (time on device, time
    in driver) in microseconds."""
    for _ in range(3):
        ours()
        anchor()
    samples = []
    for k in range(pairs):
        if k % 2:
            t_anchor, c_anchor, _ = _timed(anchor)
            t_ours, c_ours, (device_us, driver_us) = _timed(ours)
        else:
            t_ours, c_ours, (device_us, driver_us) = _timed(ours)
            t_anchor, c_anchor, _ = _timed(anchor)
        samples.append(_Pair(t_ours, device_us / 1e6, driver_us / 1e6, c_ours, t_anchor, c_anchor))
    return samples


def versus_in_process(
    name: str,
    kind: str,
    model: Model,
    inputs: Sequence[np.ndarray],
    anchor: Callable[[], object],
    agree: Callable[[list[np.ndarray]], str],
    quick: bool,
    what: str,
    goals: tuple[str, str],
) -> dict[str, BenchResult]:
    """``name``: server compute on a ``kind`` device against ``anchor()`` (the library
    in-process, same inputs); ``name.end_to_end``: the whole call against the same anchor
    (``goals``: the two entries' goals). ``agree(outputs)`` is a short agreement note, after
    it checked the server's outputs against the anchor's (BenchError when they differ)."""
    pairs = 15 if quick else 61
    with (
        LocalServer(*server_args(kind)) as srv,
        Device.connect(srv.address, client_name="nnhal-bench") as dev,
        dev.prepare_model_sync(model) as pm,
    ):
        note = agree(pm.execute(inputs, timeout=120).outputs)
        queue = dev.remote.same_host is not None
        path = f"same-host queue {'on' if queue else 'off'}: what does not fit its ring takes gRPC over TCP"

        def serve() -> tuple[int, int]:
            timing = pm.execute(inputs, timeout=120, measure=True).timing
            return timing.time_on_device, timing.time_in_driver

        cpu0 = cpu_seconds(srv.pid)
        samples = _paired(serve, anchor, pairs)
        cpu1 = cpu_seconds(srv.pid)
        prof = pm.execute(inputs, timeout=120, profile=True).profile

    def median(f: Callable[[_Pair], float]) -> float:
        return statistics.median(f(s) for s in samples)

    e2e, compute, anchor_s = median(lambda s: s.e2e), median(lambda s: s.compute), median(lambda s: s.anchor)
    server_cpu = "?" if cpu0 is None or cpu1 is None else f"{(cpu1 - cpu0) / pairs * 1e3:.2f}"
    on_backend = sum(count for op, count, _ in prof if not op.startswith("cpu fallback"))
    total_ops = sum(count for _, count, _ in prof) or 1
    breakdown = (
        f"per call: compute {compute * 1e3:.2f} ms, rest of the server "
        f"{median(lambda s: s.driver - s.compute) * 1e3:.3f} ms, transport and client "
        f"{median(lambda s: s.e2e - s.driver) * 1e3:.3f} ms ({path}); CPU per call: client "
        f"{median(lambda s: s.client_cpu) * 1e3:.2f} ms, server {server_cpu} ms (whole process, clock ticks), "
        f"anchor {median(lambda s: s.anchor_cpu) * 1e3:.2f} ms; {pairs} interleaved pairs; "
        f"{100 * on_backend / total_ops:.0f}% of operations on {kind}; {note}"
    )
    unit = "ms per inference"
    compute_ratio = median(lambda s: s.compute / s.anchor)
    e2e_ratio = median(lambda s: s.e2e / s.anchor)
    return {
        name: BenchResult(
            compute * 1e3, anchor_s * 1e3, compute_ratio, f"{unit} (server compute)", goals[0], f"{what}; {breakdown}"
        ),
        f"{name}.end_to_end": BenchResult(
            e2e * 1e3, anchor_s * 1e3, e2e_ratio, f"{unit} (end to end)", goals[1], f"{what}; {breakdown}"
        ),
    }

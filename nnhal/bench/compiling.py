"""What the benchmarks of the compiling devices (``litert_device``, ``ort_device``) share.

``server_args(kind)``: a server hosting one device of ``kind`` on one thread.

``versus_in_process``: a model through a server on such a device against its library
in-process on the same inputs, interleaved. The value is the server's compute (the
execution's time on device, median); the detail gives the end-to-end time through the
server (TCP loopback, inline tensors) and the share of operations the library ran.

``prepare_vs_from_cache``: MobileNet-v1 (float32) prepared afresh with a cache token
(convert, optimize, seal) against prepared from the client's cache file on a server
started after the cache was written (the same secret file, nothing of the first server's
left: the artifact is loaded, not compiled or looked up). The cache is a file the client
saved and holds open (``CacheFile``): the server on this host reads it by descriptor; the
two are interleaved, after a warm-up of both.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from nnhal.bench import zoo
from nnhal.bench.common import BenchResult, check, interleaved, local_device
from nnhal.client.cache_files import CacheFile
from nnhal.core.types import Model


def server_args(kind: str, secret: Path | None = None) -> tuple[str, ...]:
    """Arguments of ``nnhal serve`` for one ``kind`` device on one thread; caches sealed with
    the secret in ``secret`` (a fresh one per server when None)."""
    return ("--device", kind, "--ort-threads", "1", "--cache-secret-file", str(secret) if secret else "none")


def prepare_vs_from_cache(kind: str, quick: bool, goal: str) -> BenchResult:
    """Milliseconds to prepare MobileNet-v1 afresh (value) and from the cache file (anchor)."""
    model = zoo.mobilenet_v1(zoo.mobilenet_weights(), False)
    image = zoo.mobilenet_input(False)
    token = bytes(range(32))
    rounds = 3 if quick else 7
    with tempfile.TemporaryDirectory(prefix="nnhal-bench-cache-") as tmp:
        args = server_args(kind, Path(tmp) / "secret")
        with local_device(False, *args) as dev, dev.prepare_model_sync(model, cache_token=token) as first:
            expected = first.execute([image], timeout=120).outputs[0]
            saved = CacheFile.save(Path(tmp) / "mobilenet.cache", first.model_cache)
        with saved, local_device(False, *args) as dev:
            by_descriptor = getattr(dev, "shm_memfd", "") != ""

            def prepare() -> None:
                dev.prepare_model_sync(model, cache_token=token).release()

            def prepare_from_cache() -> None:
                dev.prepare_model_from_cache(saved, token, model).get(120).release()

            with dev.prepare_model_from_cache(saved, token, model).get(120) as cached:
                check(np.array_equal(cached.execute([image], timeout=120).outputs[0], expected), "cached model differs")
            t0 = time.perf_counter()
            t_prepare, t_cache = interleaved(prepare, prepare_from_cache, rounds, 1)
            elapsed = time.perf_counter() - t0
    how = "read by the server through the client's descriptor" if by_descriptor else "sent as bytes"
    return BenchResult(
        t_prepare * 1e3,
        t_cache * 1e3,
        t_prepare / t_cache,
        "ms per preparation (value: prepare, anchor: from cache)",
        goal,
        f"MobileNet-v1 float32 on the {kind} device, a freshly started server; the client's cache file "
        f"({saved.size / 2**20:.1f} MiB) {how}; {rounds} interleaved rounds in {elapsed:.1f} s",
    )


def versus_in_process(
    kind: str,
    model: Model,
    inputs: Sequence[np.ndarray],
    anchor: Callable[[], object],
    agree: Callable[[list[np.ndarray]], str],
    quick: bool,
    what: str,
    goal: str,
) -> BenchResult:
    """Server compute on a ``kind`` device (value) against ``anchor()`` (the library
    in-process, same inputs); ``agree(outputs)`` is a short agreement note, after it checked
    the server's outputs against the anchor's (BenchError when they differ)."""
    rounds, per_round = (3, 3) if quick else (7, 5)
    device_us: list[int] = []
    with local_device(False, *server_args(kind)) as dev, dev.prepare_model_sync(model) as pm:
        note = agree(pm.execute(inputs, timeout=120).outputs)

        def serve() -> None:
            device_us.append(pm.execute(inputs, timeout=120, measure=True).timing.time_on_device)

        t_e2e, t_anchor = interleaved(serve, anchor, rounds, per_round)
        prof = pm.execute(inputs, timeout=120, profile=True).profile
    compute_ms = statistics.median(device_us) / 1e3
    anchor_ms = t_anchor * 1e3
    on_backend = sum(count for name, count, _ in prof if not name.startswith("cpu fallback"))
    total_ops = sum(count for _, count, _ in prof) or 1
    detail = (
        f"{what}; end to end {t_e2e * 1e3:.2f} ms ({t_e2e / t_anchor:.2f}x; TCP loopback, inline tensors); "
        f"{100 * on_backend / total_ops:.0f}% of operations on {kind}; {note}"
    )
    return BenchResult(compute_ms, anchor_ms, compute_ms / anchor_ms, "ms per inference (server compute)", goal, detail)

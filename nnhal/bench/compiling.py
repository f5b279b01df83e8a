"""What the benchmarks of the compiling devices (``litert_device``, ``ort_device``) share.

``server_args(kind)``: a server hosting one device of ``kind`` on one thread.

``prepare_vs_from_cache``: MobileNet-v1 (float32) prepared afresh with a cache token
(convert, optimize, seal) against prepared from the client's cache file on a server
started after the cache was written (the same secret file, nothing of the first server's
left: the artifact is loaded, not compiled or looked up). The cache is a file the client
saved and holds open (``CacheFile``): the server on this host reads it by descriptor; the
two are interleaved, after a warm-up of both.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from nnhal.bench import zoo
from nnhal.bench.common import BenchResult, check, interleaved, local_device
from nnhal.client.cache_files import CacheFile


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

"""Benchmarks of the litert device (``nnhal serve --device litert``).

``exec.tflite_face_litert``, ``exec.mobilenet_{f32,q8}_litert``: a model through a server on
its litert device against LiteRT in-process (XNNPACK, one thread each) on the same inputs,
interleaved. The value is the server's compute (the execution's time on device, median); the
detail also gives the end-to-end time through the server (TCP loopback, inline tensors),
which the same-host path is to bring down. The face model's anchor runs the original
``.tflite``; MobileNet (built in ``zoo``, no file) is anchored on the flatbuffer the device
itself compiles, so the ratio is what serving adds to the same LiteRT graph.

``cache.from_cache_litert``: preparing MobileNet-v1 (float32) on the litert device with a
cache token (convert, build the interpreter, seal) against preparing it from the cache that
returned (the flatbuffer: build the interpreter only).

Needs the ``tflite`` extra (ai-edge-litert).
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from nnhal.bench import zoo
from nnhal.bench.common import Bench, BenchError, BenchResult, check, interleaved, local_device, mobilenet_from_cache
from nnhal.bench.tflite_face import MODEL as FACE_MODEL
from nnhal.core.types import InlinePool, Model
from nnhal.importers.compare import diff

LITERT_SERVER = ("--device", "litert", "--ort-threads", "1", "--cache-secret-file", "none")


def _runner(path: Path) -> object:
    from nnhal.importers.litert import LiteRtMissing, LiteRtRunner

    try:
        return LiteRtRunner(path, threads=1)
    except LiteRtMissing as err:
        raise BenchError(str(err)) from None


def _versus_litert(
    model: Model, inputs: Sequence[np.ndarray], tflite: Path, quick: bool, what: str, quant8: bool
) -> BenchResult:
    lite = _runner(tflite)
    rounds, per_round = (3, 3) if quick else (7, 5)
    device_us: list[int] = []
    with local_device(False, *LITERT_SERVER) as dev, dev.prepare_model_sync(model) as pm:
        ours = pm.execute(inputs, timeout=120).outputs
        reference = lite.run(inputs)  # type: ignore[attr-defined]
        worst = 0.0
        for a, b in zip(ours, reference):
            d = diff(a.reshape(b.shape), b)
            worst = max(worst, d.max_abs)
            if quant8:
                check(np.abs(a.astype(int).reshape(b.shape) - b.astype(int)).max() <= 1, f"differs from LiteRT: {d}")
            else:
                check(d.ok, f"differs from LiteRT beyond 1e-4: {d}")

        def serve() -> None:
            device_us.append(pm.execute(inputs, timeout=120, measure=True).timing.time_on_device)

        t_e2e, t_anchor = interleaved(serve, lambda: lite.run(inputs), rounds, per_round)  # type: ignore[attr-defined]
        prof = pm.execute(inputs, timeout=120, profile=True).profile
    compute_ms = statistics.median(device_us) / 1e3
    anchor_ms = t_anchor * 1e3
    on_backend = sum(count for name, count, _ in prof if not name.startswith("cpu fallback"))
    total_ops = sum(count for _, count, _ in prof) or 1
    detail = (
        f"{what}; end to end {t_e2e * 1e3:.2f} ms ({t_e2e / t_anchor:.2f}x LiteRT; goal 1.2 after the same-host "
        f"path); {100 * on_backend / total_ops:.0f}% of operations on LiteRT; max |diff| vs LiteRT {worst:.2g}"
    )
    return BenchResult(
        compute_ms, anchor_ms, compute_ms / anchor_ms, "ms per inference (server compute)", "ratio <= 1.1", detail
    )


def tflite_face_litert(quick: bool) -> dict[str, BenchResult]:
    """face_detection_short_range on the litert device vs LiteRT in-process on the original file."""
    from nnhal.importers.tflite_model import import_tflite

    if not FACE_MODEL.is_file():
        raise BenchError(f"{FACE_MODEL} is missing: exec.tflite_face_litert runs from a source checkout")
    imported = import_tflite(FACE_MODEL)
    what = "face_detection_short_range 1x128x128x3 float32, anchor: the original .tflite"
    result = _versus_litert(imported.model, imported.random_inputs(0), FACE_MODEL, quick, what, False)
    return {"exec.tflite_face_litert": result}


def _mobilenet(quant8: bool, quick: bool) -> BenchResult:
    from nnhal.server.litert.compiler import compile_model

    model = zoo.mobilenet_v1(zoo.mobilenet_weights(), quant8)
    pools = [p.data for p in model.pools if isinstance(p, InlinePool)]
    with tempfile.TemporaryDirectory(prefix="nnhal-bench-") as tmp:
        path = Path(tmp) / "mobilenet.tflite"
        path.write_bytes(compile_model(model, pools))
        kind = "quant8" if quant8 else "float32"
        what = f"MobileNet-v1 {kind}, anchor: the device's own flatbuffer in-process"
        return _versus_litert(model, [zoo.mobilenet_input(quant8)], path, quick, what, quant8)


def mobilenet_f32_litert(quick: bool) -> dict[str, BenchResult]:
    """MobileNet-v1 float32 on the litert device vs LiteRT in-process."""
    return {"exec.mobilenet_f32_litert": _mobilenet(False, quick)}


def mobilenet_q8_litert(quick: bool) -> dict[str, BenchResult]:
    """MobileNet-v1 quant8 on the litert device vs LiteRT in-process."""
    return {"exec.mobilenet_q8_litert": _mobilenet(True, quick)}


def from_cache_litert(quick: bool) -> dict[str, BenchResult]:
    """Prepare MobileNet-v1 on the litert device vs prepare it from the cache that returned."""
    return {"cache.from_cache_litert": mobilenet_from_cache(LITERT_SERVER, "litert", "ratio >= 10", quick)}


BENCHMARKS: dict[str, Bench] = {
    "exec.tflite_face_litert": tflite_face_litert,
    "exec.mobilenet_f32_litert": mobilenet_f32_litert,
    "exec.mobilenet_q8_litert": mobilenet_q8_litert,
    "cache.from_cache_litert": from_cache_litert,
}

"""Benchmarks of the litert device (``nnhal serve --device litert``).

``exec.tflite_face_litert``, ``exec.mobilenet_{f32,q8}_litert``: a model through a server on
its litert device against LiteRT in-process (XNNPACK, one thread each: set the inputs, invoke,
get the outputs) on the same inputs (``compiling.versus_in_process``: the server's compute, and
a ``.end_to_end`` twin for the whole call). The face model's anchor runs the original
``.tflite``; MobileNet (built in ``zoo``, no file) is anchored on the flatbuffer the device
itself compiles, so the ratio is what serving adds to the same LiteRT graph.

``cache.from_cache_litert``: preparing MobileNet-v1 (float32) on the litert device with a
cache token (convert, build the interpreter, seal) against preparing it from the client's
cache file on a freshly started server (the flatbuffer: build the interpreter only;
``compiling.prepare_vs_from_cache``).

Needs the ``tflite`` extra (ai-edge-litert).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from nnhal.bench import zoo
from nnhal.bench.common import Bench, BenchError, BenchResult, check
from nnhal.bench.compiling import prepare_vs_from_cache, versus_in_process
from nnhal.core.types import InlinePool, Model
from nnhal.importers.compare import diff
from nnhal.models import FACE_DETECTION, tflite_model


def _runner(path: Path) -> object:
    from nnhal.importers.litert import LiteRtMissing, LiteRtRunner

    try:
        return LiteRtRunner(path, threads=1)
    except LiteRtMissing as err:
        raise BenchError(str(err)) from None


def _versus_litert(
    name: str, model: Model, inputs: Sequence[np.ndarray], tflite: Path, quick: bool, what: str, quant8: bool
) -> dict[str, BenchResult]:
    lite = _runner(tflite)

    def agree(ours: list[np.ndarray]) -> str:
        worst = 0.0
        for a, b in zip(ours, lite.run(inputs)):  # type: ignore[attr-defined]
            d = diff(a.reshape(b.shape), b)
            worst = max(worst, d.max_abs)
            if quant8:
                check(np.abs(a.astype(int).reshape(b.shape) - b.astype(int)).max() <= 1, f"differs from LiteRT: {d}")
            else:
                check(d.ok, f"differs from LiteRT beyond 1e-4: {d}")
        return f"max |diff| vs LiteRT {worst:.2g}"

    run = lite.run  # type: ignore[attr-defined]
    goals = ("ratio <= 1.1", "ratio <= 1.2")
    return versus_in_process(name, "litert", model, inputs, lambda: run(inputs), agree, quick, what, goals)


def tflite_face_litert(quick: bool) -> dict[str, BenchResult]:
    """face_detection_short_range on the litert device vs LiteRT in-process on the original file."""
    from nnhal.importers.tflite_model import import_tflite

    try:
        face = tflite_model(FACE_DETECTION)
    except FileNotFoundError as err:
        raise BenchError(str(err)) from None
    imported = import_tflite(face)
    what = "face_detection_short_range 1x128x128x3 float32, anchor: the original .tflite"
    return _versus_litert(
        "exec.tflite_face_litert", imported.model, imported.random_inputs(0), face, quick, what, False
    )


def _mobilenet(quant8: bool, quick: bool) -> dict[str, BenchResult]:
    from nnhal.server.litert.compiler import compile_model

    model = zoo.mobilenet_v1(zoo.mobilenet_weights(), quant8)
    pools = [p.data for p in model.pools if isinstance(p, InlinePool)]
    with tempfile.TemporaryDirectory(prefix="nnhal-bench-") as tmp:
        path = Path(tmp) / "mobilenet.tflite"
        path.write_bytes(compile_model(model, pools))
        kind = "quant8" if quant8 else "float32"
        what = f"MobileNet-v1 {kind}, anchor: the device's own flatbuffer in-process"
        name = f"exec.mobilenet_{'q8' if quant8 else 'f32'}_litert"
        return _versus_litert(name, model, [zoo.mobilenet_input(quant8)], path, quick, what, quant8)


def mobilenet_f32_litert(quick: bool) -> dict[str, BenchResult]:
    """MobileNet-v1 float32 on the litert device vs LiteRT in-process."""
    return _mobilenet(False, quick)


def mobilenet_q8_litert(quick: bool) -> dict[str, BenchResult]:
    """MobileNet-v1 quant8 on the litert device vs LiteRT in-process."""
    return _mobilenet(True, quick)


def from_cache_litert(quick: bool) -> dict[str, BenchResult]:
    """Prepare MobileNet-v1 on the litert device vs prepare it from the client's cache file."""
    return {"cache.from_cache_litert": prepare_vs_from_cache("litert", quick, "ratio >= 10")}


BENCHMARKS: dict[str, Bench] = {
    "exec.tflite_face_litert": tflite_face_litert,
    "exec.mobilenet_f32_litert": mobilenet_f32_litert,
    "exec.mobilenet_q8_litert": mobilenet_q8_litert,
    "cache.from_cache_litert": from_cache_litert,
}

"""``exec.tflite_face``: a real TFLite model (MediaPipe face detection, short range) imported
as the NNAPI delegate would, through a server — the user's full path, numpy in to numpy out with
the public client — against LiteRT in-process (XNNPACK, one thread) on the same inputs, in the
same run, interleaved.

The server runs its BLAS on one thread, as LiteRT does (``nnhal serve --compute-threads``, default 1). The
detail reports the agreement with LiteRT (largest absolute difference) and the server's
per-operation profile. Needs LiteRT (the ``tflite`` extra, included in ``dev``); the model ships
with the package (``nnhal.models``).
"""

from __future__ import annotations

from nnhal.bench.common import Bench, BenchError, BenchResult, check, interleaved, local_device
from nnhal.importers.compare import diff
from nnhal.importers.tflite_model import import_tflite
from nnhal.models import FACE_DETECTION, tflite_model


def tflite_face(quick: bool) -> dict[str, BenchResult]:
    """face_detection_short_range through a server vs LiteRT (XNNPACK, 1 thread), same inputs."""
    from nnhal.importers.litert import LiteRtMissing, LiteRtRunner

    try:
        model = tflite_model(FACE_DETECTION)
    except FileNotFoundError as err:
        raise BenchError(str(err)) from None
    try:
        lite = LiteRtRunner(model, threads=1)
    except LiteRtMissing as err:
        raise BenchError(str(err)) from None
    imported = import_tflite(model)
    inputs = imported.random_inputs(0)
    rounds, per_round = (3, 3) if quick else (7, 5)
    with local_device() as dev, dev.prepare_model_sync(imported.model) as pm:
        ours = pm.execute(inputs, timeout=120).outputs
        reference = lite.run(inputs)
        diffs = [diff(a, b) for a, b in zip(ours, reference)]
        check(all(d.ok for d in diffs), f"outputs differ from LiteRT beyond 1e-4: {diffs}")
        t_ours, t_anchor = interleaved(
            lambda: pm.execute(inputs, timeout=120), lambda: lite.run(inputs), rounds, per_round
        )
        prof = pm.execute(inputs, timeout=120, profile=True).profile
    total_us = sum(us for _, _, us in prof) or 1
    profile = ", ".join(f"{name} {100 * us / total_us:.0f}% ({count}x)" for name, count, us in prof[:5])
    worst = max(d.max_abs for d in diffs)
    detail = (
        f"{imported.operators} TFLite ops -> {len(imported.model.main.operations)} NNAPI ops, 1x128x128x3 float32; "
        f"max |diff| vs LiteRT {worst:.2g}; server compute {total_us / 1e3:.1f} ms; profile: {profile}"
    )
    return {
        "exec.tflite_face": BenchResult(
            t_ours * 1e3, t_anchor * 1e3, t_ours / t_anchor, "ms per inference", "ratio <= 3.0", detail
        )
    }


BENCHMARKS: dict[str, Bench] = {"exec.tflite_face": tflite_face}

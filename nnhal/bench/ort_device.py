"""Benchmarks of the ort device (``nnhal serve --device ort``).

``exec.mobilenet_{f32,q8}_ort``: MobileNet-v1 through a server on its ort device — the
user's full path: ``pm.execute`` of a numpy image over gRPC, numpy out — against
onnxruntime in-process running the anchor's own NCHW graph (``onnx_anchor``, QLinear
for quant8) with the same thread count (1). What is left between them is the transport,
the driver around the session, and whatever our NHWC conversion costs after onnxruntime
optimized it.

``cache.from_cache``: preparing MobileNet-v1 (float32) on the ort device with a cache
token (convert, optimize, seal) against preparing it from the cache that returned (load
the optimized model); the ratio is prepare time / from-cache time.

Needs the ``bench`` (or ``ort``) extra.
"""

from __future__ import annotations

import numpy as np

from nnhal.bench.common import Bench, BenchResult, check, mobilenet_from_cache
from nnhal.bench.execution import mobilenet_against_onnx

ORT_SERVER = ("--device", "ort", "--ort-threads", "1", "--cache-secret-file", "none")


def _exec(quant8: bool, quick: bool) -> BenchResult:
    run = mobilenet_against_onnx(quant8, ORT_SERVER, 5 if quick else 15, 3)
    ours_probs, anchor_out, t_ours, t_anchor = run.ours, run.anchor, run.t_ours, run.t_anchor
    diff = float(np.max(np.abs(ours_probs - anchor_out)))
    check(diff < (0.02 if quant8 else 1e-4), f"the ort device and the anchor disagree by {diff}")
    return BenchResult(
        t_ours * 1e3,
        t_anchor * 1e3,
        t_ours / t_anchor,
        "ms per inference",
        "ratio <= 1.3" if quant8 else "ratio <= 1.15",
        f"ort device through a server (TCP loopback, inline tensors) vs onnxruntime in-process, 1 thread each; "
        f"top-1 {int(np.argmax(ours_probs))} / {int(np.argmax(anchor_out))}, max |dp| {diff:.5f}",
    )


def mobilenet_f32_ort(quick: bool) -> dict[str, BenchResult]:
    """MobileNet-v1 float32 on the ort device through a server vs onnxruntime in-process."""
    return {"exec.mobilenet_f32_ort": _exec(False, quick)}


def mobilenet_q8_ort(quick: bool) -> dict[str, BenchResult]:
    """MobileNet-v1 quant8 on the ort device through a server vs onnxruntime's QLinear graph."""
    return {"exec.mobilenet_q8_ort": _exec(True, quick)}


def from_cache(quick: bool) -> dict[str, BenchResult]:
    """Prepare MobileNet-v1 on the ort device vs prepare it from the cache that returned."""
    return {"cache.from_cache": mobilenet_from_cache(ORT_SERVER, "ort", "ratio >= 5", quick)}


BENCHMARKS: dict[str, Bench] = {
    "exec.mobilenet_f32_ort": mobilenet_f32_ort,
    "exec.mobilenet_q8_ort": mobilenet_q8_ort,
    "cache.from_cache": from_cache,
}

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

from nnhal.bench import zoo
from nnhal.bench.common import Bench, BenchResult, check, interleaved, local_device, mobilenet_from_cache

ORT_SERVER = ("--device", "ort", "--ort-threads", "1", "--cache-secret-file", "none")


def _exec(quant8: bool, quick: bool) -> BenchResult:
    from nnhal.bench import onnx_anchor  # onnx and onnxruntime only when this runs

    weights = zoo.mobilenet_weights()
    model = zoo.mobilenet_v1(weights, quant8)
    image = zoo.mobilenet_input(quant8)
    sess = onnx_anchor.session(onnx_anchor.mobilenet_onnx(weights, quant8))
    feed = {"input": np.ascontiguousarray(image.transpose(0, 3, 1, 2))}
    rounds = 5 if quick else 15
    with local_device(False, *ORT_SERVER) as dev, dev.prepare_model_sync(model) as pm:
        ours_out = pm.execute([image], timeout=120).outputs[0].reshape(-1)
        anchor_out = np.asarray(sess.run(None, feed)[0]).reshape(-1)
        t_ours, t_anchor = interleaved(
            lambda: pm.execute([image], timeout=120), lambda: sess.run(None, feed), rounds, 3
        )
    ours_probs = ours_out.astype(np.float32) / 256.0 if quant8 else ours_out
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

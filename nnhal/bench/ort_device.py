"""Benchmarks of the ort device (``nnhal serve --device ort``).

``exec.mobilenet_{f32,q8}_ort``: MobileNet-v1 through a server on its ort device against
onnxruntime in-process running the anchor's own NCHW graph (``onnx_anchor``, QLinear for
quant8) with the same thread count (1), as ``compiling.versus_in_process`` measures it: the
server's compute (what the driver around the session and our NHWC conversion cost after
onnxruntime optimized it), and a ``.end_to_end`` twin for the whole call (the same goal).

``cache.from_cache``: preparing MobileNet-v1 (float32) on the ort device with a cache
token (convert, optimize, seal) against preparing it from the client's cache file on a
freshly started server (load the optimized model: ``compiling.prepare_vs_from_cache``);
the ratio is prepare time / from-cache time.

Needs the ``bench`` (or ``ort``) extra.
"""

from __future__ import annotations

import numpy as np

from nnhal.bench.common import Bench, BenchResult, check
from nnhal.bench.compiling import prepare_vs_from_cache, versus_in_process


def _exec(quant8: bool, quick: bool) -> dict[str, BenchResult]:
    from nnhal.bench import onnx_anchor  # onnx and onnxruntime only when this runs

    case = onnx_anchor.mobilenet_case(quant8)

    def agree(ours: list[np.ndarray]) -> str:
        out = ours[0].reshape(-1)
        anchor_out = case.anchor_output()
        probs = out.astype(np.float32) / 256.0 if quant8 else out
        worst = float(np.max(np.abs(probs - anchor_out)))
        check(worst < (0.02 if quant8 else 1e-4), f"the ort device and the anchor disagree by {worst}")
        return f"top-1 {int(np.argmax(probs))} / {int(np.argmax(anchor_out))}, max |dp| {worst:.5f}"

    what = f"MobileNet-v1 {'quant8' if quant8 else 'float32'}, anchor: onnxruntime in-process on its NCHW graph"
    goal = "ratio <= 1.3" if quant8 else "ratio <= 1.15"
    name = f"exec.mobilenet_{'q8' if quant8 else 'f32'}_ort"
    return versus_in_process(name, "ort", case.model, [case.image], case.run_anchor, agree, quick, what, (goal, goal))


def mobilenet_f32_ort(quick: bool) -> dict[str, BenchResult]:
    """MobileNet-v1 float32 on the ort device through a server vs onnxruntime in-process."""
    return _exec(False, quick)


def mobilenet_q8_ort(quick: bool) -> dict[str, BenchResult]:
    """MobileNet-v1 quant8 on the ort device through a server vs onnxruntime's QLinear graph."""
    return _exec(True, quick)


def from_cache(quick: bool) -> dict[str, BenchResult]:
    """Prepare MobileNet-v1 on the ort device vs prepare it from the client's cache file."""
    return {"cache.from_cache": prepare_vs_from_cache("ort", quick, "ratio >= 10")}


BENCHMARKS: dict[str, Bench] = {
    "exec.mobilenet_f32_ort": mobilenet_f32_ort,
    "exec.mobilenet_q8_ort": mobilenet_q8_ort,
    "cache.from_cache": from_cache,
}

"""Execution benchmarks: MobileNet-v1 through a server (``pm.execute`` on a numpy image)
against onnxruntime in-process (CPU, one thread) running the same graph.

Needs the ``bench`` extra (onnx, onnxruntime), imported only when these run.
The detail reports top-1 agreement, the largest probability difference and the
server's per-operation profile (where the time goes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nnhal.bench.common import Bench, BenchResult, interleaved, local_device


@dataclass(frozen=True)
class AnchorRun:
    """MobileNet-v1 through a server and in onnxruntime: both outputs (as probabilities),
    the time per inference of each (interleaved), and the server's profile."""

    ours: np.ndarray
    anchor: np.ndarray
    t_ours: float
    t_anchor: float
    profile: list[tuple[str, int, int]]


def mobilenet_against_onnx(
    quant8: bool, server_args: Sequence[str], rounds: int, per_round: int, profile: bool = False
) -> AnchorRun:
    """Run MobileNet-v1 (``quant8`` or float32) on the device ``server_args`` start and in
    onnxruntime on the same graph, ``rounds`` interleaved rounds of ``per_round`` each;
    ``profile``: then once more for the server's per-operation profile."""
    from nnhal.bench import onnx_anchor  # onnx and onnxruntime only when this runs

    case = onnx_anchor.mobilenet_case(quant8)
    image = case.image
    with local_device(False, *server_args) as dev, dev.prepare_model_sync(case.model) as pm:
        ours_out = pm.execute([image], timeout=120).outputs[0].reshape(-1)
        anchor_out = case.anchor_output()
        t_ours, t_anchor = interleaved(lambda: pm.execute([image], timeout=120), case.run_anchor, rounds, per_round)
        prof = pm.execute([image], timeout=120, profile=True).profile if profile else []
    ours = ours_out.astype(np.float32) / 256.0 if quant8 else ours_out
    return AnchorRun(ours, anchor_out, t_ours, t_anchor, prof)


def _mobilenet(quant8: bool, quick: bool) -> BenchResult:
    run = mobilenet_against_onnx(quant8, (), 3 if quick else 7, 1, profile=True)
    ours_probs, anchor_out, t_ours, t_anchor, prof = run.ours, run.anchor, run.t_ours, run.t_anchor, run.profile
    top_ours, top_anchor = int(np.argmax(ours_probs)), int(np.argmax(anchor_out))
    total_us = sum(us for _, _, us in prof) or 1
    profile = ", ".join(f"{name} {100 * us / total_us:.0f}% ({count}x)" for name, count, us in prof[:5])
    return BenchResult(
        t_ours * 1e3,
        t_anchor * 1e3,
        t_ours / t_anchor,
        "ms per inference",
        "ratio <= 2.0" if quant8 else "ratio <= 1.5",
        f"top-1 ours {top_ours} / ort {top_anchor}, max |dp| {np.max(np.abs(ours_probs - anchor_out)):.4f}; "
        f"profile: {profile}",
    )


def mobilenet_f32(quick: bool) -> dict[str, BenchResult]:
    """MobileNet-v1 float32 through a server vs onnxruntime (CPU, 1 thread), same graph."""
    return {"exec.mobilenet_f32": _mobilenet(False, quick)}


def mobilenet_q8(quick: bool) -> dict[str, BenchResult]:
    """MobileNet-v1 quant8 asymm through a server vs onnxruntime's QLinear graph (1 thread)."""
    return {"exec.mobilenet_q8": _mobilenet(True, quick)}


BENCHMARKS: dict[str, Bench] = {"exec.mobilenet_f32": mobilenet_f32, "exec.mobilenet_q8": mobilenet_q8}

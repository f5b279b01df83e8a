"""Comparing an imported model's outputs with LiteRT's: the figures ``nnhal run --compare`` and
the ``exec.tflite_face`` benchmark report.

An element agrees when its absolute difference is at most ``ABS_TOL`` or its relative
difference (to LiteRT's value) at most ``REL_TOL`` (1e-4 each, float outputs); quantized
outputs agree within one quantization step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ABS_TOL = 1e-4
REL_TOL = 1e-4


@dataclass(frozen=True)
class OutputDiff:
    max_abs: float
    max_rel: float
    outside: int
    elements: int

    @property
    def ok(self) -> bool:
        return self.outside == 0


def diff(ours: np.ndarray, reference: np.ndarray) -> OutputDiff:
    """``ours`` (reshaped to the reference's shape) against ``reference``."""
    ref = np.asarray(reference)
    a = np.asarray(ours).reshape(ref.shape).astype(np.float64)
    b = ref.astype(np.float64)
    d = np.abs(a - b)
    mag = np.abs(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mag > 0, d / np.where(mag > 0, mag, 1.0), np.where(d > 0, np.inf, 0.0))
    if ref.dtype.kind in "iub":
        outside = int(np.count_nonzero(d > 1))
    else:
        outside = int(np.count_nonzero((d > ABS_TOL) & (rel > REL_TOL)))
    return OutputDiff(float(d.max(initial=0.0)), float(rel.max(initial=0.0)), outside, int(d.size))

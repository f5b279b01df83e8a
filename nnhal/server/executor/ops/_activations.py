"""Activation functions shared by several families.

Fused activations (FusedActivationFunc NONE / RELU / RELU1 / RELU6) clamp a
float result, or bound a quantized one (the reference's
CalculateActivationRange). Recurrent cells (RNN, SVDF, LSTM) take a wider set
of codes, TfLiteFusedActivation's, which adds tanh and sigmoid.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np

from nnhal.core.enums import FusedActivationFunc, OperandType
from nnhal.server.executor.errors import fail
from nnhal.server.executor.ops.common import qrange, round_away

#: Float clamp bounds of each fused activation.
FUSED_BOUNDS: dict[int, tuple[float, float]] = {
    FusedActivationFunc.NONE: (-math.inf, math.inf),
    FusedActivationFunc.RELU: (0.0, math.inf),
    FusedActivationFunc.RELU1: (-1.0, 1.0),
    FusedActivationFunc.RELU6: (0.0, 6.0),
}


def check_activation(act: int | None) -> bool:
    """Whether ``act`` is a fused activation code (None: not known yet, accepted)."""
    return act is None or act in FUSED_BOUNDS


def apply_activation(x: np.ndarray, act: int) -> np.ndarray:
    """Fused activation on a float array the kernel owns (in place when possible)."""
    lo, hi = FUSED_BOUNDS[act]
    if lo == -math.inf and hi == math.inf:
        return x
    return np.clip(x, lo, hi, out=x if x.flags.writeable else None)


#: The ufunc behind ``np.clip`` (numpy's private ``umath.clip``), called without np.clip's
#: Python wrapper: the same values, signed zeros and NaN included, for a few microseconds less.
CLIP: np.ufunc = (getattr(np, "_core", None) or np.core).umath.clip


def scalar32(value: float) -> np.ndarray:
    """``value`` as a 0-d float32 array: a bound kernel's constant operand of a ufunc. The same
    values as the scalar, without the conversion a ufunc makes of a Python or numpy scalar on
    every call (a few times the ufunc's own cost on small tensors)."""
    return np.array(value, np.float32)


def clamp_bounds(act: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The float32 bounds of the fused activation ``act`` for :data:`CLIP` (None for NONE)."""
    lo, hi = FUSED_BOUNDS[act]
    if lo == -math.inf and hi == math.inf:
        return None
    return scalar32(lo), scalar32(hi)


def clamp_in_place(act: int) -> Callable[[np.ndarray], None] | None:
    """The fused activation ``act`` as an in-place clamp of a float array (None for NONE): the
    values of ``apply_activation``."""
    bounds = clamp_bounds(act)
    if bounds is None:
        return None
    low, high = bounds

    def clamp(x: np.ndarray) -> None:
        CLIP(x, low, high, out=x)

    return clamp


def clamp_calls(act: int, out: np.ndarray) -> tuple[Callable[[], object], ...]:
    """``clamp_in_place(act)`` of ``out`` as fixed calls (none for NONE)."""
    bounds = clamp_bounds(act)
    if bounds is None:
        return ()
    return (partial(CLIP, out, bounds[0], bounds[1], out),)


def activation_range_quant(act: int, scale: float, zero_point: int, t: OperandType) -> tuple[int, int]:
    """Quantized clamp bounds for a fused activation (CalculateActivationRange)."""
    qmin, qmax = qrange(t)
    lo, hi = FUSED_BOUNDS[act]

    def q(v: float) -> int:
        return zero_point + int(round_away(v / scale))

    a = qmin if lo == -math.inf else max(qmin, q(lo))
    b = qmax if hi == math.inf else min(qmax, q(hi))
    return a, b


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)) in the input's float type (overflow gives 0, as in C)."""
    with np.errstate(over="ignore"):
        return np.asarray(1 / (1 + np.exp(-x)), dtype=x.dtype)


#: Cell activations of the recurrent operations (0 none, 1 relu, 2 relu1, 3 relu6, 4 tanh, 6 sigmoid).
RECURRENT_ACTIVATIONS = (0, 1, 2, 3, 4, 6)


def cell_activation(x: np.ndarray, code: int) -> np.ndarray:
    """The recurrent cell activation g named by ``code`` (one of RECURRENT_ACTIVATIONS)."""
    if code == 0:
        return x
    if code == 1:
        return np.asarray(np.maximum(x, 0))
    if code == 2:
        return np.asarray(np.clip(x, -1, 1))
    if code == 3:
        return np.asarray(np.clip(x, 0, 6))
    if code == 4:
        return np.asarray(np.tanh(x))
    if code == 6:
        return sigmoid(x)
    fail(f"unsupported activation function {code}")

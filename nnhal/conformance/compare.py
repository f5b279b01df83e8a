"""Output comparison exactly as AOSP TestHarness ``checkResults`` (see conformance/README.md)."""

from __future__ import annotations

import numpy as np

from nnhal.conformance.vectors import TestCase, VectorOperand
from nnhal.core.enums import OperandType as T
from nnhal.core.operand_types import DTYPE

_F32_ATOL = float(np.float32(1e-5))
_F32_RTOL = 5.0 * 2.0**-23
_F16_TOL = 5.0 * 2.0**-10

#: (atol, rtol) per output type; quant8 atol is 3 for mobilenet cases.
_TOLERANCES: dict[T, tuple[float, float]] = {
    T.TENSOR_FLOAT32: (_F32_ATOL, _F32_RTOL),
    T.TENSOR_FLOAT16: (_F16_TOL, _F16_TOL),
    T.TENSOR_INT32: (1.0, 0.0),
    T.INT32: (1.0, 0.0),
    T.TENSOR_QUANT8_ASYMM: (1.0, 0.0),
    T.TENSOR_QUANT8_ASYMM_SIGNED: (1.0, 0.0),
    T.TENSOR_QUANT8_SYMM: (1.0, 0.0),
    T.TENSOR_QUANT16_ASYMM: (1.0, 0.0),
    T.TENSOR_QUANT16_SYMM: (1.0, 0.0),
}
_QUANT8 = frozenset({T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED, T.TENSOR_QUANT8_SYMM})


def _count(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def compare_output(case: TestCase, k: int, expected: VectorOperand, actual: bytes) -> str | None:
    """None when output ``k`` matches; otherwise a sentence saying where it differs."""
    if expected.is_ignored:
        return None
    relaxed = case.is_relaxed or case.uses_float16
    quant_atol = 3.0 if "mobilenet" in case.name else None
    return compare_values(k, expected.type, _count(expected.dimensions), expected.data, actual, relaxed, quant_atol)


def compare_values(
    k: int,
    kind: T,
    n: int,
    expected: bytes,
    actual: bytes,
    relaxed: bool = False,
    quant_atol: float | None = None,
) -> str | None:
    """None when the first ``n`` values of type ``kind`` in ``actual`` match ``expected``
    within the harness's tolerance (float32 at float16's with ``relaxed``; ``quant_atol``
    for 8-bit quantized outputs when given); otherwise a sentence naming output ``k``."""
    if n == 0:
        return None
    dtype = DTYPE.get(kind)
    if kind == T.TENSOR_BOOL8:
        exp_b = np.frombuffer(expected, np.uint8)[:n] != 0
        act_raw = np.frombuffer(actual, np.uint8)
        if act_raw.size < n:
            return f"output {k}: {act_raw.size} elements, expected {n}"
        bad = np.flatnonzero(exp_b != (act_raw[:n] != 0))
        if bad.size:
            i = int(bad[0])
            return f"output {k}[{i}]: got {bool(act_raw[i])}, expected {bool(exp_b[i])} ({bad.size} mismatches)"
        return None
    if kind not in _TOLERANCES or dtype is None:
        return f"output {k}: data type {kind.name} not supported by the comparison"
    atol, rtol = _TOLERANCES[kind]
    if kind == T.TENSOR_FLOAT32 and relaxed:
        atol, rtol = _F16_TOL, _F16_TOL
    if kind in _QUANT8 and quant_atol is not None:
        atol = quant_atol
    exp_all = np.frombuffer(expected[: (len(expected) // dtype.itemsize) * dtype.itemsize], dtype)
    if exp_all.size < n:
        return f"output {k}: the expected data holds {exp_all.size} elements, not {n}"
    exp = exp_all[:n].astype(np.float64)
    act_all = np.frombuffer(actual[: (len(actual) // dtype.itemsize) * dtype.itemsize], dtype)
    if act_all.size < n:
        return f"output {k}: {act_all.size} elements, expected {n}"
    act = act_all[:n].astype(np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.abs(act - exp) <= atol + rtol * np.abs(exp)
    bad = np.flatnonzero(~ok)
    if bad.size:
        i = int(bad[0])
        return (
            f"output {k}[{i}]: got {act[i]!r}, expected {exp[i]!r} (atol {atol}, rtol {rtol}; {bad.size} of {n} differ)"
        )
    return None


def compare_multinomial(case: TestCase, inputs: list[bytes | None], actual: bytes) -> str | None:
    """RANDOM_MULTINOMIAL distribution check (the harness's B*b row offset kept)."""
    tol = case.multinomial_tolerance
    main = case.model.main
    in_op = main.operands[main.input_indexes[0]]
    b, c = in_op.dimensions
    out = case.outputs[0]
    s = out.dimensions[1]
    logits_raw = inputs[0] or b""
    logits = np.frombuffer(logits_raw, DTYPE[in_op.type]).astype(np.float32)
    samples = np.frombuffer(actual, np.int32)[: b * s]
    counts = np.bincount(samples[(samples >= 0) & (samples < c)], minlength=c).astype(np.float32)
    for batch in range(b):
        row = logits[b * batch : b * batch + c]
        e = np.exp(row - 0).astype(np.float32)
        expected = e / e.sum(dtype=np.float32)
        observed = counts / np.float32(s)
        diff = np.abs(observed - expected)
        if not np.all(diff <= tol):
            i = int(np.argmax(np.where(np.isnan(diff), np.inf, diff)))
            return f"class {i}: observed frequency {observed[i]}, expected {expected[i]} (tol {tol})"
    return None


def compare_case(case: TestCase, inputs: list[bytes | None], actual: list[bytes]) -> str | None:
    """None if every output passes; else the first mismatch."""
    if len(actual) != len(case.outputs):
        return f"{len(actual)} outputs, expected {len(case.outputs)}"
    if case.multinomial_tolerance > 0:
        return compare_multinomial(case, inputs, actual[0])
    for k, (exp, act) in enumerate(zip(case.outputs, actual)):
        msg = compare_output(case, k, exp, act)
        if msg is not None:
            return msg
    return None

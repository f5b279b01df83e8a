"""A compiling device's capabilities, measured against the reference CPU device at start.

NNAPI capabilities are execution time (and power) relative to the CPU reference:
below 1.0 is faster. One small convolution block (3x3 CONV_2D + RELU6, 1x28x28x32)
runs a few times on both backends, float32 and quant8; the ratio of the best times
is reported for the float (and relaxed) and the quant8 operand types. Types this
device does not compute keep 1.0 (not measured). Runs once per device, when it starts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from nnhal.core.enums import OperandLifeTime, OperandType, OperationType
from nnhal.core.types import (
    Capabilities,
    DataLocation,
    Model,
    Operand,
    OperandPerformance,
    Operation,
    PerformanceInfo,
    Subgraph,
)
from nnhal.server.backend import Backend, ExecutableGraph, ReferenceBackend

T = OperandType
L = OperandLifeTime
_SHAPE = (1, 28, 28, 32)
_RUNS = 5


def probe_model(quant8: bool) -> Model:
    """CONV_2D 3x3 SAME stride 1 with fused RELU6 on ``_SHAPE``, constants inline."""
    rng = np.random.default_rng(0)
    c = _SHAPE[3]
    values = bytearray()

    def const(t: OperandType, data: np.ndarray | np.generic, dims: tuple[int, ...] = (), scale: float = 0.0) -> Operand:
        raw = np.ascontiguousarray(data).tobytes()
        loc = DataLocation(0, len(values), len(raw))
        values.extend(raw)
        values.extend(b"\0" * (-len(values) % 8))
        return Operand(t, dims, 1, scale, 0, L.CONSTANT_COPY, loc)

    if quant8:
        act, s = T.TENSOR_QUANT8_ASYMM, 0.05
        w = const(act, rng.integers(0, 255, (c, 3, 3, c), dtype=np.uint8), (c, 3, 3, c), 0.01)
        bias = const(T.TENSOR_INT32, np.zeros(c, np.int32), (c,), s * 0.01)
    else:
        act, s = T.TENSOR_FLOAT32, 0.0
        w = const(act, rng.standard_normal((c, 3, 3, c)).astype(np.float32), (c, 3, 3, c))
        bias = const(act, np.zeros(c, np.float32), (c,))
    ints = [const(T.INT32, np.int32(v)) for v in (1, 1, 1, 3)]  # SAME, stride 1x1, RELU6
    x = Operand(act, _SHAPE, 1, s, 0, L.SUBGRAPH_INPUT)
    y = Operand(act, _SHAPE, 0, s, 0, L.SUBGRAPH_OUTPUT)
    operands = (x, w, bias, *ints, y)
    op = Operation(OperationType.CONV_2D, tuple(range(7)), (7,))
    return Model(Subgraph(operands, (op,), (0,), (7,)), operand_values=bytes(values))


def _best_time(graph: ExecutableGraph, x: np.ndarray) -> float:
    best = float("inf")
    for _ in range(_RUNS):
        t0 = time.perf_counter()
        graph.run([x])
        best = min(best, time.perf_counter() - t0)
    return best


def relative_time(backend: Backend, quant8: bool) -> float:
    """Best time of ``backend`` over the reference's on the probe model."""
    model = probe_model(quant8)
    pools: Sequence[bytes] = ()
    if quant8:
        x = np.random.default_rng(1).integers(0, 255, _SHAPE, dtype=np.uint8)
    else:
        x = np.random.default_rng(1).standard_normal(_SHAPE).astype(np.float32)
    ours, _ = backend.compile(model, pools)
    reference, _ = ReferenceBackend().compile(model, pools)
    return round(_best_time(ours, x) / _best_time(reference, x), 4)


def measured_capabilities(backend: Backend) -> Capabilities:
    f = relative_time(backend, False)
    f32 = PerformanceInfo(f, f)
    q8 = relative_time(backend, True)
    q8_info = PerformanceInfo(q8, q8)
    one = PerformanceInfo(1.0, 1.0)
    table = {
        T.TENSOR_FLOAT32: f32,
        T.FLOAT32: f32,
        T.TENSOR_QUANT8_ASYMM: q8_info,
        T.TENSOR_QUANT8_ASYMM_SIGNED: q8_info,
    }
    return Capabilities(
        relaxed_float32_to_float16_performance_scalar=f32,
        relaxed_float32_to_float16_performance_tensor=f32,
        operand_performance=tuple(
            OperandPerformance(t, table.get(t, one)) for t in T if t not in (T.OEM, T.TENSOR_OEM_BYTE)
        ),
        if_performance=one,
        while_performance=one,
    )

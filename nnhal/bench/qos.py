"""Quality-of-service benchmark: a HIGH-priority model's latency while the same client
saturates the device with LOW-priority work, against the same model on the idle server.

Both sides run through the public client API (``pm.execute`` on numpy arrays)
on one server in its own process; the ratio shows what pre-emption at operation
boundaries leaves of the idle latency (DESIGN §5).
"""

from __future__ import annotations

import threading
import time

import numpy as np

from nnhal.bench.common import Bench, BenchResult, local_device, percentiles
from nnhal.client.prepared_model import PreparedModel
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import OperandType as T, OperationType as O, Priority
from nnhal.core.types import Model

LOW_SHAPE = [16, 4096]
LOW_OPS = 2000
LOW_WORKERS = 3


def _low_model() -> Model:
    """A long chain of RELUs: many operation boundaries at which it can be pre-empted."""
    b = ModelBuilder()
    cur = b.input(T.TENSOR_FLOAT32, LOW_SHAPE)
    for _ in range(LOW_OPS):
        cur = b.op(O.RELU, [cur], T.TENSOR_FLOAT32, LOW_SHAPE)
    return b.outputs(cur).finish()


def _high_model() -> Model:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [2, 4])
    y = b.input(T.TENSOR_FLOAT32, [2, 4])
    return b.outputs(b.op(O.ADD, [x, y, b.int32(0)], T.TENSOR_FLOAT32, [2, 4])).finish()


def _latencies(pm: PreparedModel, inputs: list[np.ndarray], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        pm.execute(inputs)
        out.append(time.perf_counter() - t0)
    return out


def high_under_low(quick: bool) -> dict[str, BenchResult]:
    """p50/p99 of a HIGH-priority small model while the same client saturates the device
    with LOW-priority long executions, against the same model on the idle server."""
    n = 150 if quick else 500
    small = [np.ones((2, 4), np.float32), np.ones((2, 4), np.float32)]
    big = [np.ones(LOW_SHAPE, np.float32)]
    with (
        local_device() as dev,
        dev.prepare_model_sync(_high_model(), priority=Priority.HIGH) as high,
        dev.prepare_model_sync(_low_model(), priority=Priority.LOW) as low,
    ):
        for _ in range(20):
            high.execute(small)
        idle = _latencies(high, small, n)
        stop = threading.Event()
        low_runs = [0]

        def saturate() -> None:
            while not stop.is_set():
                low.execute(big, timeout=60)
                low_runs[0] += 1

        workers = [threading.Thread(target=saturate, daemon=True) for _ in range(LOW_WORKERS)]
        for w in workers:
            w.start()
        time.sleep(0.3)
        loaded = _latencies(high, small, n)
        stop.set()
        for w in workers:
            w.join(60)
    p50_i, p99_i = percentiles(idle)
    p50_l, p99_l = percentiles(loaded)
    return {
        "qos.high_under_low": BenchResult(
            p99_l * 1e6,
            p99_i * 1e6,
            p99_l / p99_i,
            "us p99",
            "ratio <= 1.5",
            f"p50 {p50_l * 1e6:.0f} vs idle {p50_i * 1e6:.0f} us; {low_runs[0]} LOW runs of {LOW_OPS} ops meanwhile",
        )
    }


BENCHMARKS: dict[str, Bench] = {"qos.high_under_low": high_under_low}

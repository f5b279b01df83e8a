"""``exec.op_overhead``: the executor's fixed cost per operation.

A chain of 100 ADDs of two 1x4 float32 tensors (no activation): the arithmetic is
negligible, so what an execution costs per operation is the executor's own work
(dispatch, checks, allocation). Measured two ways, each against the floor of the same
100 ``numpy.add`` calls on preallocated arrays:

- ``exec.op_overhead``: ``PreparedGraph.run`` in process (the executor alone);
- ``exec.op_overhead.api``: ``pm.execute`` through a local server with the public client
  (the executor plus one request's fixed cost, spread over the 100 operations).

Values are microseconds per operation; the goal is the in-process figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from nnhal.bench.common import Bench, BenchResult, check, interleaved, local_device
from nnhal.client.builder import ModelBuilder
from nnhal.core.enums import OperandType as T, OperationType as Op
from nnhal.core.types import InlinePool, Model
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.executor.validate import validate_full

OPERATIONS = 100
SHAPE = (1, 4)


def chain(length: int = OPERATIONS) -> Model:
    """``length`` ADDs in a chain: each adds a constant to the previous result."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, SHAPE)
    one = b.constant(np.ones(SHAPE, np.float32))
    act = b.int32(0)
    y = x
    for _ in range(length):
        y = b.op(Op.ADD, [y, one, act], T.TENSOR_FLOAT32, SHAPE)
    return b.outputs(y).finish()


def _numpy_floor(length: int) -> Callable[[], object]:
    a = np.zeros(SHAPE, np.float32)
    one = np.ones(SHAPE, np.float32)
    out = np.empty(SHAPE, np.float32)

    def run() -> object:
        np.add(a, one, out=out)
        for _ in range(length - 1):
            np.add(out, one, out=out)
        return out

    return run


def _per_op(seconds: float) -> float:
    return seconds * 1e6 / OPERATIONS


def op_overhead(quick: bool) -> dict[str, BenchResult]:
    """Per-operation fixed cost of a 100-ADD chain: in process and through the public API."""
    model = chain()
    pools = [p.data for p in model.pools if isinstance(p, InlinePool)]
    validate_full(model, pools)
    graph = PreparedGraph(model, pools)
    x = np.zeros(SHAPE, np.float32)
    expected = np.full(SHAPE, OPERATIONS, np.float32)
    check(np.array_equal(graph.run([x])[0], expected), "the ADD chain computed a wrong result")
    floor = _numpy_floor(OPERATIONS)
    rounds, per_round = (5, 20) if quick else (9, 100)
    t_graph, t_floor = interleaved(lambda: graph.run([x]), floor, rounds, per_round)
    results = {
        "exec.op_overhead": BenchResult(
            _per_op(t_graph),
            _per_op(t_floor),
            t_graph / t_floor,
            "us per operation",
            "value <= 5",
            f"PreparedGraph.run in process, {OPERATIONS} ADDs of 1x4 float32; anchor: numpy.add on preallocated arrays",
        )
    }
    with local_device() as dev, dev.prepare_model_sync(model) as pm:
        out = pm.execute([x], timeout=60).outputs[0]
        check(np.array_equal(out, expected), "the ADD chain computed a wrong result through the server")
        t0 = time.perf_counter()
        t_api, t_floor = interleaved(lambda: pm.execute([x], timeout=60), floor, rounds, max(1, per_round // 5))
        prof = pm.execute([x], timeout=60, profile=True).profile
    compute_us = sum(us for _, _, us in prof)
    results["exec.op_overhead.api"] = BenchResult(
        _per_op(t_api),
        _per_op(t_floor),
        t_api / t_floor,
        "us per operation",
        "informative",
        f"pm.execute through a local server (one request per {OPERATIONS} ADDs); "
        f"server-side operation time {compute_us / OPERATIONS:.1f} us per operation (profiled run); "
        f"measured in {time.perf_counter() - t0:.1f} s",
    )
    return results


BENCHMARKS: dict[str, Bench] = {"exec.op_overhead": op_overhead}

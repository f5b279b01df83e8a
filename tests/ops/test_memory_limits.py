"""The executor reserves what it allocates before allocating it, and bounds time.

In process: a PreparedGraph run with an ExecutionControl whose ``reserve`` hook
enforces a small limit, as the server's memory budget does. The amplification
model of issue #11 (a 4-byte input resized to 8192x8192, then MEAN) must be
refused before numpy allocates the 256 MiB result (tracemalloc sees numpy's
allocations), whether the model declares the large shape or leaves it unknown.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from nnhal.core.enums import OperandType as T, OperationType as Op
from nnhal.core.errors import MissedDeadlinePersistent, MissedDeadlineTransient, ResourceExhaustedPersistent
from nnhal.core.types import Model
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.executor.registry import FastKernel
from nnhal.server.executor.validate import validate_full
from tests.fuzz.builder import ModelBuilder

LIMIT = 64 << 20


class Budget:
    """The budget's contract in miniature: a charge past the limit is RESOURCE_EXHAUSTED."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0

    def reserve(self, nbytes: int) -> None:
        if self.used + nbytes > self.limit:
            raise ResourceExhaustedPersistent(f"{nbytes} bytes more than the limit of {self.limit}")
        self.used += nbytes
        self.peak = max(self.peak, self.used)

    def release(self, nbytes: int, freed: int = 0) -> None:
        self.used -= nbytes

    def control(self) -> ExecutionControl:
        return ExecutionControl(reserve=self.reserve, release=self.release)


def amplification(size: int, declared: Sequence[int]) -> Model:
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [1, 1, 1, 1])
    big = b.temp(T.TENSOR_FLOAT32, declared)
    out = b.output(T.TENSOR_FLOAT32, [1, 1])
    b.op(Op.RESIZE_BILINEAR, [x, b.const(T.INT32, size), b.const(T.INT32, size)], [big])
    b.op(Op.MEAN, [big, b.const(T.TENSOR_INT32, [1, 2]), b.const(T.INT32, 0)], [out])
    return b.build()


def _peak_during(run: object) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        try:
            run()  # type: ignore[operator]
        except Exception as err:  # the error under test, checked by the caller
            return err, tracemalloc.get_traced_memory()[1]
        return None, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("declared", [(1, 8192, 8192, 1), (1, 0, 0, 1), ()], ids=["declared", "unknown", "no-rank"])
def test_amplification_is_refused_before_allocating(declared: tuple[int, ...]) -> None:
    model = amplification(8192, declared)
    validate_full(model, [])
    graph = PreparedGraph(model, [])
    budget = Budget(LIMIT)
    x = np.ones((1, 1, 1, 1), np.float32)
    err, peak = _peak_during(lambda: graph.run([x], budget.control()))
    assert isinstance(err, ResourceExhaustedPersistent), err
    # The result alone would be 256 MiB; nothing near it was allocated.
    assert peak < 16 << 20, peak
    assert budget.used == 0  # every reservation given back


def test_a_model_within_the_limit_runs_and_gives_every_byte_back() -> None:
    model = amplification(64, (1, 0, 0, 1))
    graph = PreparedGraph(model, [])
    budget = Budget(LIMIT)
    (out,) = graph.run([np.full((1, 1, 1, 1), 3.0, np.float32)], budget.control())
    np.testing.assert_allclose(out, [[3.0]])
    assert 0 < budget.peak <= LIMIT
    assert budget.used == 0


def test_without_a_reserve_hook_nothing_is_counted() -> None:
    graph = PreparedGraph(amplification(8, (1, 8, 8, 1)), [])
    control = ExecutionControl()
    graph.run([np.ones((1, 1, 1, 1), np.float32)], control)
    assert control.reserved == 0 and control.held == 0


def _chain(ops: int) -> Model:
    b = ModelBuilder()
    prev = b.input(T.TENSOR_FLOAT32, [4])
    for k in range(ops):
        nxt = b.output(T.TENSOR_FLOAT32, [4]) if k == ops - 1 else b.temp(T.TENSOR_FLOAT32, [4])
        b.op(Op.RELU, [prev], [nxt])
        prev = nxt
    return b.build()


def test_server_maximum_execution_time_without_a_client_deadline() -> None:
    graph = PreparedGraph(_chain(3), [])
    control = ExecutionControl(max_execution_ns=0)
    with pytest.raises(MissedDeadlinePersistent, match="server's maximum"):
        graph.run([np.ones(4, np.float32)], control)


def test_a_client_deadline_takes_precedence_over_the_server_maximum() -> None:
    graph = PreparedGraph(_chain(3), [])
    control = ExecutionControl(deadline_ns=2**62, max_execution_ns=0)
    (out,) = graph.run([np.ones(4, np.float32)], control)
    np.testing.assert_array_equal(out, np.ones(4))


def test_long_chains_hold_only_live_tensors() -> None:
    """Temporaries are given back as their last reader finishes: 1,000 steps stay in one chunk."""
    graph = PreparedGraph(_chain(1000), [])
    budget = Budget(LIMIT)
    graph.run([np.ones(4, np.float32)], budget.control())
    assert budget.peak <= 1 << 20


def test_space_to_batch_paddings_are_reserved_before_padding() -> None:
    """Found by the fuzz campaign: paddings of 2^20 on a 4-element input asked for 23 GiB."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [1, 2, 2, 1])
    out = b.output(T.TENSOR_FLOAT32, [0, 0, 0, 0])
    pads = b.const(T.TENSOR_INT32, [[0, 1 << 20], [0, 1 << 20]])
    b.op(Op.SPACE_TO_BATCH_ND, [x, b.const(T.TENSOR_INT32, [2, 2]), pads], [out])
    graph = PreparedGraph(b.build(), [])
    budget = Budget(LIMIT)
    err, peak = _peak_during(lambda: graph.run([np.ones((1, 2, 2, 1), np.float32)], budget.control()))
    assert isinstance(err, ResourceExhaustedPersistent), err
    assert peak < 16 << 20, peak


def test_bound_kernels_run_under_a_limit_counting_their_arena() -> None:
    """A limit does not turn the bound kernels off: the arena is counted whole, and a limit below
    it refuses the execution before the arena exists."""
    model = _chain(4)
    sized = replace(
        model,
        main=replace(model.main, operands=tuple(replace(o, dimensions=(1024,)) for o in model.main.operands)),
    )
    graph = PreparedGraph(sized, [])
    calls: list[int] = []
    for step in graph.main.steps:
        fast = step.fast
        assert fast is not None

        def counting(
            args: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None], _f: FastKernel = fast
        ) -> list[np.ndarray] | None:
            calls.append(1)
            return _f(args, buffers)

        step.fast = counting
        step.emit = None  # every step through its bound kernel, none as fixed calls
    x = np.linspace(-2, 2, 1024, dtype=np.float32)
    budget = Budget(LIMIT)
    (out,) = graph.run([x], budget.control())
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    assert len(calls) == 4
    pool = graph.main.pool
    assert pool is not None
    assert budget.peak >= pool.nbytes and budget.used == 0
    with pytest.raises(ResourceExhaustedPersistent):
        graph.run([x], Budget(pool.nbytes - 1).control())


def test_a_straight_program_runs_under_a_limit_counting_its_arena_and_results() -> None:
    """Under a limit a model of fixed calls still runs as one straight program: its arena and the
    copies of its results held before the arena is taken, every byte given back; a limit below
    that refuses the execution before it runs; an input that leaves the straight program holds
    only what the general path holds."""
    graph = PreparedGraph(_chain(4), [])
    x = np.linspace(-2, 2, 4, dtype=np.float32)
    graph.run([x])  # the first run makes the arena and its program
    assert graph.main.straight
    need = graph.main.straight_bytes
    pool = graph.main.pool
    assert pool is not None and need == pool.nbytes + x.nbytes
    budget = Budget(LIMIT)
    control = budget.control()
    (out,) = graph.run([x], control)
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    assert control.operations_run == 4 and control.peak == need and budget.used == 0
    with pytest.raises(ResourceExhaustedPersistent):
        graph.run([x], Budget(need - 1).control())
    other = budget.control()
    (out,) = graph.run([x.astype(np.float64)], other)  # not the buffer's dtype: the general path
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    assert budget.used == 0 and other.peak < 2 * need


def test_a_bound_kernel_declining_mid_run_hands_the_rest_to_the_general_loop() -> None:
    """The leading bound steps run in their own loop; one that declines (returns None) has its
    general kernel run instead, and so do the steps after it — the same values, every byte given
    back."""
    model = _chain(6)
    sized = replace(
        model,
        main=replace(model.main, operands=tuple(replace(o, dimensions=(256,)) for o in model.main.operands)),
    )
    graph = PreparedGraph(sized, [])
    assert graph.main.bound == 6
    declined: list[int] = []
    for each in graph.main.steps:
        each.emit = None  # every step through its bound kernel, none as fixed calls
    step = graph.main.steps[3]
    fast = step.fast
    assert fast is not None

    def declining(args: Sequence[np.ndarray | None], buffers: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        declined.append(1)
        return None

    step.fast = declining
    x = np.linspace(-2, 2, 256, dtype=np.float32)
    budget = Budget(LIMIT)
    (out,) = graph.run([x], budget.control())
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    assert len(declined) == 2  # the lean loop, then the general loop, which runs the general kernel
    assert budget.used == 0 and budget.peak > 0


def test_a_control_made_per_run_starts_from_the_defaults_and_keeps_its_own_counts() -> None:
    first = ExecutionControl(reserve=lambda n: None)
    first.hold(10)
    first.operations_run += 1
    second = ExecutionControl()
    assert (second.reserved, second.held, second.peak, second.operations_run) == (0, 0, 0, 0)
    assert second.profile is None and second.timeline is None and second.graph is None
    assert (first.held, first.peak, first.operations_run) == (10, 10, 1)
    with pytest.raises(MissedDeadlineTransient):
        raise second.on_deadline()

"""A prepared model: the executable graph plus request binding and result shaping.

``execute`` takes the plan of a request (``request_plan``: how its inputs are
viewed and its outputs written, worked out once per request layout and kept in
``plans``) and its bound pools, runs the graph, writes outputs in place and
returns the canonical ExecutionResult (the one place where inline output pools
and the profile are put into a result). Thread-safe: concurrent executions share
only the read-only graph and immutable plans; the fastest-run estimate is
updated under the model's own (leaf) lock.
"""

from __future__ import annotations

import threading
import time

from nnhal.core.enums import ErrorStatus, Priority
from nnhal.core.errors import HalError, OutputInsufficientSize
from nnhal.core.types import ExecutionResult, Model, Operand, OperationProfile, OutputShape, Timing
from nnhal.server.backend import ExecutableGraph
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.memory import BoundPools, LanePools
from nnhal.server.request_plan import PlanCache, RequestPlan

_NO_TIMING = Timing()
_SUCCESS = ErrorStatus.NONE


def execution_result(
    status: ErrorStatus,
    message: str,
    shapes: tuple[OutputShape, ...] = (),
    timing: Timing = _NO_TIMING,
    control: ExecutionControl | None = None,
    pools: BoundPools | None = None,
) -> ExecutionResult:
    """The canonical result: inline output pools only with success (by pool index, from
    ``pools``), the profile (when ``control`` collected one) slowest operation type first, and the
    timeline of every operation run."""
    outputs = {} if pools is None or status != ErrorStatus.NONE else pools.inline_results()
    profile: tuple[OperationProfile, ...] = ()
    if control is not None and control.profile:
        ranked = sorted(control.profile.items(), key=lambda kv: -kv[1][1])
        profile = tuple(OperationProfile(name, count, total_ns // 1000) for name, (count, total_ns) in ranked)
    timeline = tuple(control.timeline) if control is not None and control.timeline else ()
    return ExecutionResult(status, message, shapes, timing, outputs, profile, timeline)


class PreparedModel:
    def __init__(
        self,
        model: Model,
        graph: ExecutableGraph,
        priority: Priority,
        bound: BoundPools,
        byte_cost: int,
    ) -> None:
        self.model = model
        self.graph = graph
        self.priority = priority
        self._bound = bound  # model pools stay mapped while the model lives
        self.byte_cost = byte_cost
        #: Shortest complete run seen (ns): work that cannot fit a deadline is refused at launch.
        self.fastest_ns: int | None = None
        self._fastest_lock = threading.Lock()
        main = model.main
        self._inputs = [main.operands[i] for i in main.input_indexes]
        self._outputs = [main.operands[i] for i in main.output_indexes]
        #: The plans of the request layouts this model executed last (``request_plan``).
        self.plans = PlanCache(self._inputs, self._outputs)
        #: Set once released (``release``): whoever kept this object looks it up again.
        self.released = False

    def release(self) -> None:
        self.released = True
        self._bound.close()

    @property
    def input_operands(self) -> list[Operand]:
        return self._inputs

    @property
    def output_operands(self) -> list[Operand]:
        return self._outputs

    def execute(
        self,
        plan: RequestPlan,
        pools: BoundPools,
        control: ExecutionControl,
        measure: bool,
    ) -> ExecutionResult:
        """Run the request ``plan`` was made for, bound to ``pools``; HalErrors become the
        result's status. The profile ``control`` collects goes into the result whatever the status."""
        t0 = time.perf_counter_ns() if measure else 0  # the driver's time: read only when measured
        try:
            pools.check_shared()
            inputs = plan.bind_inputs(pools.buffers)
            into = plan.output_targets(pools) if self.graph.writes_into else None
            t1 = time.perf_counter_ns()
            outputs = self.graph.run(inputs, control, plan.overrides, into)
            t2 = time.perf_counter_ns()
            if control.graph is not None or control.operations_run:
                self._ran(t2 - t1)
            shapes = plan.write_outputs(pools, outputs, into)
        except OutputInsufficientSize as err:
            self._invalidate(pools)
            return execution_result(err.error_status, err.message, getattr(err, "shapes", ()), control=control)
        except HalError as err:
            self._invalidate(pools)
            return execution_result(err.error_status, err.message, control=control)
        timing = _NO_TIMING
        if measure:
            t3 = time.perf_counter_ns()
            timing = Timing((t2 - t1) // 1000, (t3 - t0) // 1000)
        if control.profile is None and not control.timeline:
            # ``execution_result`` of a success without a profile, inlined: the hot path.
            return ExecutionResult(_SUCCESS, "", shapes, timing, pools.inline_results())
        return execution_result(_SUCCESS, "", shapes, timing, control, pools)

    def execute_lane(self, pools: LanePools, control: ExecutionControl, measure: bool) -> ExecutionResult:
        """``execute`` of a request bound for its graph's lane (``memory.LanePools``): the lane
        run under ``control`` (``backend.Lane.run``: a library's as one scheduler step,
        ``compiling.run_compiled``; the reference executor's as its straight program, with its
        checkpoints); every output fills its place, so the result is those places and
        the layout's shapes (nothing to check or write after the run)."""
        lane = pools.lane
        try:
            t1 = time.perf_counter_ns()  # nothing before the run: the driver's time starts here too
            lane.run(pools.inputs, pools.into, control)
            t2 = time.perf_counter_ns()
        except HalError as err:
            return execution_result(err.error_status, err.message, control=control)
        self._ran(t2 - t1)
        timing = _NO_TIMING
        if measure:
            timing = Timing((t2 - t1) // 1000, (time.perf_counter_ns() - t1) // 1000)
        return ExecutionResult(_SUCCESS, "", pools.shapes, timing, pools.results)

    def _ran(self, elapsed_ns: int) -> None:
        """Keep the launch-time estimate for deadlines: the shortest complete run."""
        fastest = self.fastest_ns
        if fastest is not None and elapsed_ns >= fastest:
            return  # the common case, decided without the lock
        with self._fastest_lock:
            if self.fastest_ns is None or elapsed_ns < self.fastest_ns:
                self.fastest_ns = elapsed_ns

    @staticmethod
    def _invalidate(pools: BoundPools) -> None:
        """A failed execution leaves the driver-managed buffers it writes uninitialized."""
        for buf in pools.token_outputs.values():
            buf.invalidate()

"""The limits of one execution, consulted at every operation boundary (``ExecutionControl``):
the deadline, the server's maximum, the scheduler's pre-emption hook, the memory the
execution reserves from the budget, the profile and timeline it records.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from nnhal.core.enums import LOOP_TIMEOUT_DEFAULT_NS
from nnhal.core.errors import HalError, MissedDeadlinePersistent, MissedDeadlineTransient
from nnhal.core.types import OperationTiming

if TYPE_CHECKING:
    from nnhal.server.executor.graph import PreparedGraph

#: A time.monotonic_ns reading no execution reaches.
_FOREVER = 1 << 126

#: The budget is asked for at least this much at a time: small models take one
#: reservation per execution, not one per operation.
RESERVE_CHUNK = 1 << 20
#: The checkpoint hook (the scheduler's pre-emption, the job's cancellation) runs at most once
#: per this much execution time, at the first operation boundary past it.
HOOK_INTERVAL_NS = 50_000


def _deadline_passed() -> Exception:
    """What a missed deadline raises when the run names nothing else."""
    return MissedDeadlineTransient("deadline passed during execution")


class ExecutionControl:
    """Per-execution limits, consulted at every operation boundary.

    ``deadline_ns`` is on ``time.monotonic_ns``; ``checkpoint`` (optional) is the
    scheduler's pre-emption hook. Raises the HalError that ends the execution.

    ``checkpoint`` runs at every operation boundary (in a straight program of fixed calls, at
    the boundaries :data:`nnhal.server.executor.subgraph.STRAIGHT_SEGMENT` elements of work apart): the deadline and the
    server's limit are checked at each; ``checkpoint_hook`` at the first boundary at least
    :data:`HOOK_INTERVAL_NS` after ``start`` (whose caller has just made the hook's checks:
    admitted the run, looked its session up) and then once at least that long after the hook
    last ran (pre-emption and cancellation wait for the next boundary past that: a model of
    many short operations asks the scheduler once per interval, not once per operation, and
    a run shorter than the interval not at all).

    ``max_execution_ns`` bounds an execution the client gave no deadline: past it
    the next checkpoint raises MISSED_DEADLINE_PERSISTENT. ``reserve(n)`` is asked
    for ``n`` more bytes before the executor allocates them (outputs, intermediates,
    scratch; see executor.allocation) and raises RESOURCE_EXHAUSTED_* when they
    cannot fit; ``release(n, freed=p)`` gives back everything granted (``n``) when ``run``
    ends, ``p`` of which were really held at the peak (what was freed: a grant is made in
    chunks).
    None means no limit (and no accounting cost).

    Made per run: the constructor sets what a run names (the keywords: the full path's job
    names seven), and a field a run leaves as it was is its class-level default (the profile,
    the timeline, the graph, the counts), not set per instance. A lean run is its own control
    (``executions.lean.LeanRun``, a subclass): it sets the same limits itself, and its hook and
    ``on_deadline`` are its methods.
    """

    deadline_ns: int | None
    loop_timeout_ns: int
    checkpoint_hook: Callable[[], None] | None
    #: Missed deadlines raise this class (the scheduler picks TRANSIENT/PERSISTENT).
    on_deadline: Callable[[], Exception]
    max_execution_ns: int | None
    reserve: Callable[[int], None] | None
    release: Callable[..., None] | None
    # What most runs leave as it was: class-level defaults, set on the instance once changed.
    operations_run: int = 0
    graph: PreparedGraph | None = None
    #: When set, operation type name -> [count, total ns] is accumulated here.
    profile: dict[str, list[int]] | None = None
    #: With ``profile``: every operation run, in order (its start from the run's start).
    timeline: list[OperationTiming] | None = None
    timeline_t0_ns: int = 0
    #: Bytes granted by ``reserve`` (the execution's high-water mark, in chunks) and held now.
    reserved: int = 0
    held: int = 0
    #: The most bytes held at once (kept by ``release_all``): what the execution really
    #: allocated at its peak, where ``reserved`` counts whole chunks.
    peak: int = 0
    #: Of ``held``, the bytes of buffers the execution gives back to be reused (its arena,
    #: checked back into its pool): held while it runs, charged like the rest, but not freed
    #: when it ends, so not counted towards a heap trim (``release_all``).
    kept: int = 0
    #: The server's limit on time.monotonic_ns, set by ``start`` when there is no deadline.
    limit_ns: int | None = None
    #: On time.monotonic_ns: before this a checkpoint has nothing to do (``due`` sets it).
    next_ns: int = 0
    #: When the hook runs next (0: at the next checkpoint).
    _hook_ns: int = 0

    def __init__(
        self,
        *,
        deadline_ns: int | None = None,
        loop_timeout_ns: int = LOOP_TIMEOUT_DEFAULT_NS,
        checkpoint_hook: Callable[[], None] | None = None,
        on_deadline: Callable[[], Exception] = _deadline_passed,
        max_execution_ns: int | None = None,
        reserve: Callable[[int], None] | None = None,
        release: Callable[..., None] | None = None,
        profile: dict[str, list[int]] | None = None,
        timeline: list[OperationTiming] | None = None,
        graph: PreparedGraph | None = None,
    ) -> None:
        # The limits a run names: its deadline, the server's maximum, what is reserved with.
        self.deadline_ns = deadline_ns
        self.loop_timeout_ns = loop_timeout_ns
        self.max_execution_ns = max_execution_ns
        if profile is not None:
            self.profile = profile
        self.reserve = reserve
        self.release = release
        if timeline is not None:
            self.timeline = timeline
        # The scheduler's hook, and what a missed deadline raises.
        self.checkpoint_hook = checkpoint_hook
        self.on_deadline = on_deadline
        if graph is not None:
            self.graph = graph

    def note(self, name: str, subgraph: int, index: int, t0_ns: int, t1_ns: int) -> None:
        """Profile one operation run (``profile`` must be set): its type's totals, and the
        timeline when kept."""
        assert self.profile is not None
        entry = self.profile.setdefault(name, [0, 0])
        entry[0] += 1
        entry[1] += t1_ns - t0_ns
        if self.timeline is not None:
            start = (t0_ns - self.timeline_t0_ns) // 1000
            self.timeline.append(OperationTiming(index, name, subgraph, start, (t1_ns - t0_ns) // 1000))

    def start(self, checkpoint: bool = False) -> None:
        """The run starts: the server's limit counts from now, and the first checkpoint that
        has work to do is set (``next_ns``: the deadline, the limit, the hook's first time);
        with ``checkpoint``, the first ``checkpoint`` too, at the same time (one clock reading:
        a run of one step, ``compiling.run_compiled``)."""
        if self.timeline is not None and not self.timeline_t0_ns:
            self.timeline_t0_ns = time.perf_counter_ns()
        now = time.monotonic_ns()
        if self.deadline_ns is None and self.max_execution_ns is not None and self.limit_ns is None:
            self.limit_ns = now + self.max_execution_ns
        self._hook_ns = now + HOOK_INTERVAL_NS
        self._plan_next()
        if checkpoint and now >= self.next_ns:
            self.due(now)

    def start_once(self) -> None:
        """``start(True)`` of a run whose start is its only checkpoint and its last boundary (a
        straight program of one segment, ``PreparedGraph._program``): the same checks at the
        start, nothing planned after them (as ``checkpoint(last=True)``). With no deadline, no
        server's limit (``max_execution_ns``: none counts, and none is to start counting — a
        partitioned model's later steps run under the same control and their limit counts from
        the first step's start) and no timeline, nothing can be due there — the hook's first
        time is :data:`HOOK_INTERVAL_NS` after it (when that is not 0) — so nothing is read or
        set, not even the clock."""
        if self.deadline_ns is None and self.max_execution_ns is None and self.timeline is None and HOOK_INTERVAL_NS:
            return
        self.start(True)

    def checkpoint(self, last: bool = False) -> None:
        """At an operation boundary: raise what ends the execution (see the class docstring).
        ``last``: the run's last boundary (a compiled graph's end, ``compiling.run_compiled``):
        the same checks, nothing planned after them (a run plans afresh at its ``start``)."""
        now = time.monotonic_ns()
        if now >= self.next_ns:
            self.due(now, last)

    def due(self, now: int, last: bool = False) -> None:
        """The checkpoint's work at ``now`` (a time.monotonic_ns reading no earlier than
        ``next_ns``): the deadline, the server's limit, the hook when its time came; then
        ``next_ns`` is set to the earliest of the three (not after the ``last`` checkpoint)."""
        deadline, limit = self.deadline_ns, self.limit_ns
        if deadline is not None and now >= deadline:
            raise self.on_deadline()
        if limit is not None and now >= limit:
            assert self.max_execution_ns is not None
            raise MissedDeadlinePersistent(
                f"the execution ran longer than the server's maximum of {self.max_execution_ns / 1e9:g} s"
            )
        hook = self.checkpoint_hook
        if hook is not None and now >= self._hook_ns:
            hook()  # may wait (pre-empted): the interval counts from its return
            if last:
                return
            self._hook_ns = time.monotonic_ns() + HOOK_INTERVAL_NS
        elif last:
            return
        self._plan_next()

    def _plan_next(self) -> None:
        """Set ``next_ns``: the earliest of the deadline, the server's limit and the hook's
        next time (only those that are set)."""
        next_ns = _FOREVER if self.checkpoint_hook is None else self._hook_ns
        deadline, limit = self.deadline_ns, self.limit_ns
        # Compared, not ``min``: a builtin's call costs more than the comparison.
        if deadline is not None and deadline < next_ns:
            next_ns = deadline
        if limit is not None and limit < next_ns:
            next_ns = limit
        self.next_ns = next_ns

    def hold(self, nbytes: int) -> None:
        """Count ``nbytes`` more held; reserve from the budget what passes the grant."""
        held = self.held + nbytes
        if held > self.reserved and self.reserve is not None:
            need = held - self.reserved
            grow = max(need, RESERVE_CHUNK)
            try:
                self.reserve(grow)
            except HalError:
                if grow == need:
                    raise
                # The chunk only saves trips to the budget: a client whose limit or free
                # share is below it gets exactly what it needs (or the budget's verdict on that).
                grow = need
                self.reserve(grow)
            self.reserved += grow
        self.held = held
        if held > self.peak:
            self.peak = held

    def hold_kept(self, nbytes: int) -> None:
        """:meth:`hold` ``nbytes`` of a buffer kept for the next execution (``kept``)."""
        self.kept += nbytes
        self.hold(nbytes)

    def drop(self, nbytes: int, kept: int = 0) -> None:
        """``nbytes`` held are free again (the grant stays: it is the high-water mark),
        ``kept`` of them a kept buffer's (:meth:`hold_kept`)."""
        self.held -= nbytes
        if kept:
            self.kept -= kept

    def release_all(self) -> None:
        """Give back every byte ``reserve`` granted (the execution is over), telling
        ``release`` how many were held at the peak and freed now (a kept buffer's are not:
        a trim of the heap after it would find nothing to give back)."""
        granted, self.reserved, self.held = self.reserved, 0, 0
        if granted and self.release is not None:
            freed = self.peak - self.kept
            self.release(granted, freed=freed if freed > 0 else 0)

    def run_subgraph(self, index: int, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run referenced subgraph ``index`` (control flow) with the same control."""
        assert self.graph is not None
        return self.graph.run_subgraph(index, inputs, self)

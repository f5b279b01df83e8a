"""Launched work: a preparation or an execution that passed its launch checks.

The device's ``begin_prepare`` / ``begin_execute`` do every check whose failure
is the HAL method's own return value and hand back a job; ``run`` then does the
work whose outcome is the callback's (the notify message, the synchronous
result, the fence's status). A job is built with exactly the collaborators it
uses (memory budget, scheduler, handle table, counters), never the device.

Ownership: an ExecutionJob holds bound request pools from launch and a scheduler
ticket from launch, or — launched with admission deferred (an asynchronous call,
whose launch status must reach its client first) — from ``admit``, which ``run``
calls; ``run`` gives the ticket back, ``close`` (always called by the job's owner,
also when ``run`` never ran, e.g. a cancelled stream) gives back whatever is still
held, the request data charged by ``hold_data`` included. A PrepareJob holds the model's bound pools until
``run`` files the prepared model, which then owns them.

Both jobs take ``stop``: a check that raises once the server's drain time ran out
(``Lifecycle.check``), consulted in injected delays and at every operation
boundary, so an execution left at the end of a drain ends with its status. The
same places end the work of a session that closed (its client is gone).

Lock order (the locks these jobs take, outermost first): session lock, then a
handle table's lock; the budget's, the scheduler's and a counter's locks are
leaves taken alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from nnhal.core.enums import Priority
from nnhal.core.errors import (
    GeneralFailure,
    HalError,
    InvalidArgument,
    MissedDeadlinePersistent,
    MissedDeadlineTransient,
)
from nnhal.core.types import ExecutionResult, Model
from nnhal.server.backend import ExecutableGraph
from nnhal.server.budget import MemoryBudget
from nnhal.server.counts import Counter
from nnhal.server.executor.constants import Buffer
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.handles import HandleTable
from nnhal.server.memory import BoundPools
from nnhal.server.prepared_model import PreparedModel, execution_result
from nnhal.server.request_plan import RequestPlan
from nnhal.server.scheduler import Scheduler, Ticket
from nnhal.server.session import Session, delay


def check_deadline(deadline_ns: int | None, what: str, started: bool = False) -> None:
    """MISSED_DEADLINE_PERSISTENT once ``deadline_ns`` (monotonic ns) has passed."""
    if deadline_ns is not None and time.monotonic_ns() >= deadline_ns:
        if started:
            raise MissedDeadlinePersistent(f"the deadline passed during {what}")
        raise MissedDeadlinePersistent(f"the deadline had already passed when the {what} was requested")


def missed(delayed: bool) -> HalError:
    """The error of a deadline that passed during execution: TRANSIENT when the execution
    waited behind other work or was pre-empted, PERSISTENT when it ran alone."""
    if delayed:
        return MissedDeadlineTransient("the deadline passed during execution (the device was busy)")
    return MissedDeadlinePersistent("the deadline passed during execution on an idle device")


class PrepareJob:
    """A launched preparation: the model is valid; ``run`` builds the executable graph."""

    def __init__(
        self,
        session: Session,
        model: Model,
        priority: Priority,
        deadline_ns: int | None,
        bound: BoundPools,
        *,
        budget: MemoryBudget,
        prepared: HandleTable[str, PreparedModel],
        seal: Callable[[Model, Priority, bytes], bytes] | None,
        stop: Callable[[], None] | None = None,
        build: Callable[[Model, Sequence[Buffer]], tuple[ExecutableGraph, bytes]] | None = None,
    ) -> None:
        """``seal``: writes the model cache with the compiled artifact (None when no cache
        token was given). ``build``: the device backend's compile or load (default: the
        reference executor's graph, no artifact)."""
        self._stop = stop
        self._build = build
        self.session = session
        self.model = model
        self.priority = priority
        self.deadline_ns = deadline_ns
        self._bound: BoundPools | None = bound
        self._budget = budget
        self._prepared = prepared
        self._seal = seal

    def run(self) -> tuple[str, bytes]:
        """Prepare; returns the prepared model's handle and the model cache (b"" without a
        token). Raises HalError: MISSED_DEADLINE_*, RESOURCE_EXHAUSTED_*, INVALID_ARGUMENT
        (the session closed meanwhile)."""
        bound, self._bound = self._bound, None
        assert bound is not None, "a PrepareJob runs once"
        session, model = self.session, self.model
        try:
            delay(session.faults.prepare_delay_ms, self.deadline_ns, self._interrupt)
            cost = len(model.operand_values) + sum(len(b) for b in bound.buffers)
            self._budget.charge(session.id, cost)
            try:
                graph, artifact = self._compile(model, bound.buffers)
                check_deadline(self.deadline_ns, "preparation", started=True)
            except BaseException:
                self._budget.uncharge(session.id, cost)
                raise
        except BaseException:
            bound.close()
            raise
        pm = PreparedModel(model, graph, self.priority, bound, cost)
        try:
            with session.adding("the session closed during preparation"):
                handle = self._prepared.add(session.id, pm)
        except HalError:
            pm.release()  # the session's close gave its memory back already
            raise
        sealed = b"" if self._seal is None else self._seal(model, self.priority, artifact)
        return handle, sealed

    def _compile(self, model: Model, buffers: Sequence[Buffer]) -> tuple[ExecutableGraph, bytes]:
        if self._build is None:
            return PreparedGraph(model, buffers), b""
        return self._build(model, buffers)

    def _interrupt(self) -> None:
        # A gone client's (or a drained server's) preparation is not worth finishing.
        if self.session.closed:
            raise InvalidArgument("the session closed during preparation")
        if self._stop is not None:
            self._stop()

    def close(self) -> None:
        """Give back the model's pools if ``run`` never took them. Idempotent."""
        bound, self._bound = self._bound, None
        if bound is not None:
            bound.close()


#: How an execution whose client went away (its session closed) ends.
SESSION_ENDED = "the client's session ended during the execution"


class ExecutionJob:
    """A launched execution: pools bound, admitted (``ticket``) or to be admitted by
    ``admit`` (``ticket`` None); ``run`` waits for a slot and executes."""

    def __init__(
        self,
        session: Session,
        pm: PreparedModel,
        plan: RequestPlan,
        bound: BoundPools,
        ticket: Ticket | None,
        *,
        measure: bool,
        deadline_ns: int | None,
        loop_timeout_ns: int,
        profile: bool,
        scheduler: Scheduler,
        budget: MemoryBudget,
        executions: Counter,
        stop: Callable[[], None] | None = None,
        max_execution_ns: int | None = None,
    ) -> None:
        """``profile``: collect time per operation type (nnhal extension). ``max_execution_ns``
        bounds a run the client gave no deadline (MISSED_DEADLINE_PERSISTENT past it)."""
        self._stop = stop
        self._max_execution_ns = max_execution_ns
        self.session = session
        self.pm = pm
        #: The launched request's plan (``request_plan``): validated, how it binds and writes.
        self.plan = plan
        self.bound = bound
        self.ticket = ticket
        self.measure = measure
        self.deadline_ns = deadline_ns
        self.loop_timeout_ns = loop_timeout_ns
        self.profile = profile
        self._scheduler = scheduler
        self._budget = budget
        self._executions = executions
        self._holds_ticket = ticket is not None
        #: Request data bytes charged to the session (``hold_data``, or ``run`` while it runs).
        self._charged = 0

    def admit(self) -> Ticket:
        """The job's scheduler ticket, taken now if it was launched without one
        (RESOURCE_EXHAUSTED_TRANSIENT when the device is saturated)."""
        ticket = self.ticket
        if ticket is None:
            ticket = self.ticket = self._scheduler.admit(self.session.client_key, self.pm.priority)
            self._holds_ticket = True
        return ticket

    def hold_data(self) -> None:
        """Charge the request's data to its session now (a job that waits to be admitted
        holds it meanwhile); ``close`` gives it back. RESOURCE_EXHAUSTED_* past a limit."""
        if not self._charged:
            cost = self.bound.data_bytes
            self._budget.charge(self.session.id, cost, what="request data")
            self._charged = cost

    def _drop_data(self) -> None:
        cost, self._charged = self._charged, 0
        if cost:
            self._budget.uncharge(self.session.id, cost, "request data", self.bound.heap_bytes)

    def run(self, give_back: bool = True) -> ExecutionResult:
        """Execute; every HAL failure is the result's status (a job launched unadmitted is
        admitted first: RESOURCE_EXHAUSTED_TRANSIENT when the device is saturated). The
        ticket and the request data's charge are given back before this returns — or, once
        admitted and charged, without ``give_back``, by ``close`` (a caller that closes the
        job after its answer left: ``executions.afterwards``); the bound pools stay open
        until ``close``."""
        deadline_ns = self.deadline_ns
        try:
            try:
                ticket = self.admit()
                # Bytes read from driver-managed buffers are charged to the buffers already.
                self.hold_data()
            except HalError:
                self._release_ticket()
                raise
            try:
                self._scheduler.acquire(ticket, deadline_ns)
                delay(self.session.faults.execute_delay_ms, deadline_ns, self._interrupt)
                control = ExecutionControl(
                    deadline_ns=deadline_ns,
                    loop_timeout_ns=self.loop_timeout_ns,
                    checkpoint_hook=self._checkpoint,
                    on_deadline=lambda: missed(ticket.delayed or ticket.preempted > 0),
                    profile={} if self.profile else None,
                    timeline=[] if self.profile else None,
                    max_execution_ns=self._max_execution_ns,
                    # Every tensor the executor allocates is charged to the server's total before
                    # it exists; without a total limit nothing is counted (no hot-path cost).
                    reserve=self._budget.reserve_tensors,
                    # The grant given back whole, but only the bytes the execution really held at
                    # its peak counted as freed (``freed``): a grant is made in chunks (1 MiB at
                    # least), and counting the chunk had a small model's executions trim the heap
                    # (a full garbage collection, then ``malloc_trim``) every second under load.
                    release=self._budget.release_tensors,
                )
                result = self.pm.execute(self.plan, self.bound, control, self.measure)
            finally:
                if give_back:
                    self._release_ticket()
                    self._drop_data()
        except HalError as err:
            return execution_result(err.error_status, err.message)
        self._executions.increment()
        return result

    def _interrupt(self) -> None:
        if self.session.closed:
            # The client is gone (crash, disconnect): stop spending the device on it.
            raise GeneralFailure(SESSION_ENDED)
        if self._stop is not None:
            self._stop()

    def _checkpoint(self) -> None:
        # ``_interrupt`` inlined: this runs at every operation boundary.
        if self.session.closed:
            raise GeneralFailure(SESSION_ENDED)
        if self._stop is not None:
            self._stop()
        ticket = self.ticket
        if ticket is not None:
            self._scheduler.checkpoint(ticket, self.deadline_ns)

    def _release_ticket(self) -> None:
        # A job is driven by one thread at a time (its stream, call or fence worker).
        if self._holds_ticket and self.ticket is not None:
            self._holds_ticket = False
            self._scheduler.release(self.ticket)

    def close(self) -> None:
        """Give back the ticket and the request data's charge (if ``run`` never did) and the
        bound pools. Idempotent."""
        self._release_ticket()
        self._drop_data()
        self.bound.drop()

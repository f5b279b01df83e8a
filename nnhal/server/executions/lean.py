"""The lean launch of a synchronous execution: a request of a layout its model has run before.

Most executions repeat one request layout (a loop, a burst, the same-host queue's compact
calls): the model's ``PlanCache`` already holds the plan that layout was validated with,
and a free slot is usually there. :func:`launch` then launches the execution with the
fewest steps — the plan looked up (no validation), the pools bound, the scheduler's slot
admitted and taken in one step (``Scheduler.try_start``), the request's data charged —
and hands back a :class:`LeanRun`, which ``Executions.execute`` runs and closes as it
does an ``ExecutionJob``.

Contract: the lean launch answers exactly as ``Driver.begin_execute`` and the job's
``run`` would. It refuses only where the full path refuses at the same step (an unknown
session or model, a deadline already passed or too near for the model: raised before
anything is held, as there); in every other case where it cannot go on — no plan for the
layout (a new layout: validated in full), pools of other sizes, a driver-managed buffer,
an injected execute delay, a profile asked for, no free slot at once (admission decides,
queues or refuses), the request data over the memory limits (refused by the full path
with its status) — it gives back everything it took and returns None, and the caller
takes the full path. Admission and charges happen in the full path's order (slot, then
request data), each byte charged before the execution holds it, and everything is given
back when the run ends (``LeanRun.close``, idempotent, on every path) — or, for a burst stream's
small runs and a session's runs on the event loop's thread, kept by the stream or the session
and covering its next (:class:`Standing`). :func:`launch_inline`
is the same launch for a call whose pools are all inline, from their bytes and sizes (a gRPC
message's: no canonical request, pool or execution object made), :func:`launch_compact` for a
same-host compact call, from its body. The three take their decisions in one sequence, written
once (:func:`launch_inline`): each hands it its call's arguments, its pools and how they are
bound (a ``Binder``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from operator import getitem, itemgetter, le
from typing import Any, cast

from nnhal.core import fastanswer, fastpacket, fastring, wire
from nnhal.core.enums import LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS
from nnhal.core.errors import GeneralFailure, HalError
from nnhal.core.types import ExecutionResult, InlinePool, OutputShape, PoolData, Request, RequestArgument
from nnhal.server.backend import Lane, LaneGraph
from nnhal.server.budget import MemoryBudget
from nnhal.server.driver import Driver
from nnhal.server.executions.calls import Execution
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.jobs import SESSION_ENDED, check_deadline, missed
from nnhal.server.memory import BoundPools, LanePools, bind_inline, bind_pools, token_placeholder
from nnhal.server.prepared_model import PreparedModel, execution_result
from nnhal.server.request_plan import RequestPlan
from nnhal.server.scheduler import Ticket
from nnhal.server.session import Session

log = logging.getLogger(__name__)

#: The budget's kind of a request's data (as ``ExecutionJob.hold_data`` charges it).
REQUEST_DATA = "request data"

#: An execution's session and prepared model as a caller already found them (``Executions.runs_inline``
#: looks them up to decide where the execution runs): handed to :func:`launch`, which then looks
#: them up no more. A plain tuple: made per execution, where a named tuple costs a call.
Found = tuple[Session, PreparedModel]
#: What ``Executions.runs_inline`` hands on for an execution it lets run on the event loop's
#: thread: its session and prepared model (``Found``) and the scheduler's ticket it took for it
#: (running: the slot is the execution's already, the scheduler asked once per call). The ticket
#: is its holder's until a launch's :class:`LeanRun` takes it (handed to :func:`launch` or
#: :func:`launch_inline` as ``ticket``); a launch that returns None or raises leaves it with
#: its holder, who releases it (``Executions.execute`` does, on every path).
Inline = tuple[Found, Ticket]


class LeanRun(ExecutionControl):
    """A launched lean execution (module docstring): admitted, started, its data charged and
    its pools bound; ``run`` executes once, ``close`` gives back whatever is still held.

    It is its run's ``ExecutionControl`` too (the one object a lean execution makes for both):
    the limits the full path's job names for its control — the deadline, the loop timeout, the
    server's maximum, the budget's tensor reservations — set here, and its checkpoint hook
    (:meth:`checkpoint_hook`: a gone client, the drain's end, pre-emption) and what a missed
    deadline raises (:meth:`on_deadline`) its own methods."""

    __slots__ = (
        "_charged",
        "_driver",
        "_held",
        "bound",
        "measure",
        "plan",
        "pm",
        "session",
        "standing",
        "ticket",
    )

    def __init__(
        self,
        driver: Driver,
        session: Session,
        pm: PreparedModel,
        plan: RequestPlan,
        bound: BoundPools,
        ticket: Ticket,
        measure: bool,
        deadline_ns: int | None,
        loop_timeout_ns: int,
        charged: int = 0,
        standing: Standing | None = None,
    ) -> None:
        # Not ``ExecutionControl.__init__``: what it would set, set here (its hook and
        # ``on_deadline`` are this class's methods), the rest its class-level defaults.
        self._driver = driver
        self.session = session
        self.pm = pm
        self.plan = plan
        self.bound = bound
        self.ticket = ticket
        self.measure = measure
        self.deadline_ns = deadline_ns
        self.loop_timeout_ns = loop_timeout_ns
        # As the job's: the server's maximum; every tensor charged to the server's total before
        # it exists, the grant given back whole, the peak counted as freed.
        self.max_execution_ns = driver.max_execution_ns
        budget = driver.budget
        self.reserve = budget.reserve_tensors
        self.release = budget.release_tensors
        self._held = True  # the ticket
        #: The request data charged to the session (given back once).
        self._charged = charged
        #: The stream's standing charge this run's data is covered by (``charged`` 0), or may
        #: become (its first run's charge kept); None: none.
        self.standing = standing

    def run(self, give_back: bool = True) -> ExecutionResult:
        """Execute; every HAL failure is the result's status. The slot and the request data's
        charge are given back before this returns — or, without ``give_back``, by ``close``
        (a caller that closes the run after its answer left: ``afterwards``); the bound
        pools stay until ``close``."""
        try:
            try:
                bound = self.bound
                if type(bound) is LanePools:  # bound for its graph's lane (``Compact.bind``)
                    result = self.pm.execute_lane(bound, self, self.measure)
                else:
                    result = self.pm.execute(self.plan, bound, self, self.measure)
            finally:
                if give_back:
                    self.close(False)
        except HalError as err:
            return execution_result(err.error_status, err.message)
        self._driver.executions.increment()
        return result

    def on_deadline(self) -> HalError:
        """What a missed deadline raises (``ExecutionControl.on_deadline``): as the job's."""
        ticket = self.ticket
        return missed(ticket.delayed or ticket.preempted > 0)

    def checkpoint_hook(self) -> None:
        """``ExecutionControl.checkpoint_hook``, as ``ExecutionJob._checkpoint``: a gone client,
        the drain's end, pre-emption."""
        if self.session.closed:
            raise GeneralFailure(SESSION_ENDED)
        d = self._driver
        d.lifecycle.check()
        d.scheduler.checkpoint(self.ticket, self.deadline_ns)

    def close(self, pools: bool = True) -> None:
        """Give back the slot and the data's charge (if ``run`` did not: it does, unless told not
        to) and, with ``pools``, the pools (``run`` keeps them for its answer). Idempotent."""
        if self._held:
            self._held = False
            self._driver.scheduler.release(self.ticket)
        charged = self._charged
        if charged:
            self._charged = 0
        standing = self.standing
        if standing is not None:
            self.standing = None
            charged = standing.done(self.session.id, charged)
        if charged:
            # What the heap gets back: none of a shared pool's bytes (``BoundPools.heap_bytes``).
            freed = min(charged, self.bound.heap_bytes)
            self._driver.budget.uncharge(self.session.id, charged, REQUEST_DATA, freed)
        if pools:
            self.bound.drop()


def launch(driver: Driver, call: Execution, found: Found | None = None, ticket: Ticket | None = None) -> LeanRun | None:
    """``call`` launched the lean way, or None: take the full path (module docstring). Raises
    the HalError the full path raises before it holds anything (unknown session or model, a
    deadline passed or too near). ``found``: ``call``'s session and prepared model as the
    caller found them for ``call``'s names (not looked up again; None: looked up here).
    ``ticket``: the running slot the caller took for ``call`` (``Inline``: the run takes it; a
    None answer or a raise leaves it with the caller); None: the slot is taken here."""
    if call.profile:
        return None
    if found is None:
        found = _found(driver, call.session, call.prepared_model)
    request = call.request
    return launch_inline(
        driver,
        found,
        request.inputs,
        request.outputs,
        request,
        call.measure,
        call.deadline_ns,
        call.loop_timeout_ns,
        ticket,
        _bind_request,
    )


def _found(driver: Driver, session: str, model: str) -> Found:
    """The session and prepared model of these names (the driver's lookups raise, as the full
    path's do, for an ended session or an unknown or released model)."""
    s = driver.session(session)
    return s, driver.prepared(s, model)


def _bind_request(request: Request, plan: RequestPlan, driver: Driver, found: Found) -> BoundPools | None:
    """``request``'s pools bound as the full path binds them (``bind_pools``, which refuses
    inline pools over the limit before it allocates; a shared pool's ranges named); None when
    it refuses them (the full path refuses them after its admission, as it always did) or they
    do not fit ``plan`` (``RequestPlan.fits``: closed again)."""
    try:
        bound = bind_pools(
            request.pools,
            driver.config.shared_memory,
            plan.writable,
            token_placeholder,
            found[0].is_local,
            found[0].regions,
        )
    except Exception:
        return None
    if not plan.fits(bound):
        bound.close()
        return None
    if bound.has_shared:
        bound.plan(request.inputs, request.outputs)  # a shared pool's ranges (``resolve_tokens`` does it there)
    return bound


def _bind_parts(
    pools: Sequence[tuple[PoolData, int]], plan: RequestPlan, _driver: Driver, found: Found
) -> BoundPools | None:
    """Inline pools (bytes and size) bound as ``bind_pools`` binds them (``bind_inline``, each
    buffer of its pool's size) — or for the layout's lane on ``found``'s prepared model
    (``_Lane.bind_parts``: each input a view of its bytes, each output pool a buffer of its
    own, which the answer carries) when it has one and they carry every input's bytes; None
    when their sizes are not ``plan``'s (``RequestPlan.fits``), or they declare more than
    travels inline (``bind_pools`` refuses it before it allocates: the full path words it)."""
    if plan.pool_bytes > wire.max_inline_bytes():
        return None
    known = plan.lane  # the layout's lane, once made (``_Lane.of``: made there, once per plan)
    lane: _Lane | None = _Lane.of(plan, found[1]) if known is None else known[0]
    if lane is not None:
        laned = lane.bind_parts(pools)
        if laned is not None:
            return laned
    binding = plan.binding
    if len(pools) != len(binding):
        return None
    bound = BoundPools()
    for (data, size), (i, planned, writable) in zip(pools, binding):
        if size != planned:
            return None  # nothing to close: inline pools only
        bind_inline(bound, i, data, size, writable)
    bound.data_bytes = plan.pool_bytes
    return bound


#: How a lean launch binds its call's pools (:func:`launch_inline`'s ``bind``): from what the call
#: carries (its canonical request, its inline pools' parts, a compact call's body), for the
#: layout's plan, on the call's driver, session and prepared model (``Found``) — refusing inline
#: pools over the limit before it allocates them; None when they cannot be bound or do not fit
#: the plan (``RequestPlan.fits``; the full path words it).
Binder = Callable[[Any, RequestPlan, Driver, Found], "BoundPools | None"]


def launch_inline(
    driver: Driver,
    found: Found,
    inputs: tuple[RequestArgument, ...],
    outputs: tuple[RequestArgument, ...],
    pools: Any,
    measure: bool,
    deadline_ns: int | None,
    loop_timeout_ns: int,
    ticket: Ticket | None = None,
    bind: Binder = _bind_parts,
    standing: Standing | None = None,
) -> LeanRun | None:
    """A call with no profile launched from its arguments and pools as :func:`launch` launches
    its canonical execution — with no request, pool or execution object made when its pools
    are all inline: ``pools`` each one's bytes and size, the size at least the bytes' length
    (``wire_pool.inline_pools_from``) — or None: take the full path. ``found``: the call's
    session and prepared model, ``ticket`` the running slot taken for it (``Inline``; as
    :func:`launch`'s). Raises what ``launch`` raises, where it raises it.

    The one sequence of every lean launch (:func:`launch` and :func:`launch_compact` hand it
    their pools and their ``bind``), each step where the full path takes it: an injected
    execute delay (None); the layout's plan (None: a new layout); the deadline's fit (raises
    for one passed, None for one too near); ``bind(pools, plan, driver, found)``: the inline
    limit, the binding and the bound sizes' fit to the plan (None: refused or not fitting). Then the
    slot taken at once (``ticket``: the running one the caller took already) and the request
    data charged, in the full path's order; None when either is not had at once — the pools
    closed and everything taken here given back (a caller's ``ticket`` stays the caller's:
    only a run takes it). ``standing``: the stream's standing charge (:class:`Standing`), which
    covers the data when it can (nothing charged here), else may keep this run's charge; None:
    the session's (``Session.standing``) for a run launched with the caller's ``ticket`` (on the
    event loop's thread: ``Inline``), none for any other (its data charged and given back)."""
    session, pm = found
    if session.faults.execute_delay_ms:
        return None
    plan = pm.plans.of(inputs, outputs)
    if plan is None:
        return None
    if deadline_ns is not None and not _deadline_fits(pm, deadline_ns):
        return None
    bound = bind(pools, plan, driver, found)
    if bound is None:
        return None
    taken = ticket is None
    if ticket is None:
        ticket = driver.scheduler.try_start(session.client_key, pm.priority)
        if ticket is None:
            bound.close()
            return None
    cost = bound.data_bytes
    if standing is None and not taken:
        # Run on the event loop's thread (``Inline``: its slot taken by ``runs_inline``, there):
        # its session's standing charge (``Standing``), made by the session's first such run.
        standing = session.standing
        if standing is None:
            standing = session.standing = Standing(driver.budget)
    if standing is not None and standing.covers(session.id, cost):
        cost = 0  # charged to the session already, by the stream or the session
    else:
        try:
            driver.budget.charge(session.id, cost, REQUEST_DATA)
        except HalError:
            if taken:
                driver.scheduler.release(ticket)
            bound.close()
            return None  # over a limit: the full path refuses it with its status
        if not cost:
            standing = None  # nothing to keep (``Standing.done``)
    loop = min(loop_timeout_ns or LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS)
    return LeanRun(driver, session, pm, plan, bound, ticket, measure, deadline_ns, loop, cost, standing)


#: The most request data a stream's standing charge keeps (:class:`Standing`): an execution's
#: that may run on the event loop's thread (``Executions.runs_inline``'s ``INLINE_MAX_BYTES``).
STANDING_MAX_BYTES = 64 * 1024


class Standing:
    """A burst stream's standing charge of its small executions' request data (DESIGN §5: a burst
    cache, charged to its client before it is held, released when freed) — or a session's, for
    its lean runs on the event loop's thread (``Session.standing``, made by :func:`launch_inline`
    for the first run launched with a slot ``Executions.runs_inline`` took there, and given back
    with the session: ``Driver.close_session`` closes its budget account; ``end`` is not called).

    A burst's executions come one at a time, mostly of one layout: rather than charge each
    one's request data to its session as it launches and give it back as it ends, the stream
    keeps the first lean run's charge (at most :data:`STANDING_MAX_BYTES`) past the run —
    still charged to that run's session (its client), of the kind the run charged it as — and
    a later lean run of that session whose data is no larger is covered by it (:meth:`covers`:
    nothing charged or given back for it), one run at a time; any other run charges its own.
    So every byte an execution holds is still charged before it is held, and the stream holds
    at most one small execution's data between its calls, as a call in flight would. Given
    back when the stream ends (:meth:`end`: its end, the client's death or a cancellation —
    the stream's ``finally``, after its last run's close); a closed session's is given back
    with the session (the budget ignores the later uncharge). Used on the event loop's thread
    only (the stream's): no lock."""

    __slots__ = ("_budget", "_ended", "busy", "nbytes", "session")

    def __init__(self, budget: MemoryBudget) -> None:
        self._budget = budget
        self._ended = False
        #: The session charged and how many bytes (0: nothing kept yet).
        self.session = ""
        self.nbytes = 0
        #: Whether a run is covered by it now.
        self.busy = False

    def covers(self, session: str, nbytes: int) -> bool:
        """Whether a run of ``session`` with ``nbytes`` of data is covered (then it is, until
        that run's :meth:`done`)."""
        if self.busy or nbytes > self.nbytes or session != self.session:
            return False
        self.busy = True
        return True

    def may_cover(self, session: str, nbytes: int) -> bool:
        """Whether a later run of ``session`` with ``nbytes`` of data may be covered (:meth:`covers`,
        once the run in flight is done): the charge kept is that session's and no smaller, or none
        is kept yet and one of ``nbytes`` would be (:meth:`done`). For a caller keeping such runs'
        layout (``repeats.Repeats``: a layout never covered is not kept)."""
        if self.nbytes:
            return session == self.session and nbytes <= self.nbytes
        return not self._ended and nbytes <= STANDING_MAX_BYTES

    def done(self, session: str, charged: int) -> int:
        """A run's end (``LeanRun``'s give-back): a covered one's (``charged`` 0) frees the
        charge for the next; a charged one's charge kept when nothing is yet, the stream has
        not ended and it is small. Returns what the run gives back itself."""
        if not charged:
            self.busy = False
            return 0
        if self.nbytes or self._ended or charged > STANDING_MAX_BYTES:
            return charged
        self.session, self.nbytes = session, charged
        return 0

    def end(self) -> None:
        """Give the charge back (the stream ended); a run ending later keeps nothing. Idempotent."""
        self._ended = True
        nbytes, self.nbytes = self.nbytes, 0
        if nbytes:
            self._budget.uncharge(self.session, nbytes, REQUEST_DATA)


def _deadline_fits(pm: PreparedModel, deadline_ns: int) -> bool:
    """``Driver.begin_execute``'s deadline checks, in its order and words: raises for a
    deadline passed; False for one too near for the model (refused at launch: the full
    path words it)."""
    check_deadline(deadline_ns, "execution")
    fastest = pm.fastest_ns
    return fastest is None or deadline_ns - time.monotonic_ns() >= fastest


class Compact:
    """A request layout of inline pools only that the session's ``model`` ran (a compact
    call's layout, ``nnhal.core.fastpacket``): its arguments and, per pool, the bytes a call
    carries and the pool's size. :func:`launch_compact` launches a call of it from the
    call's bytes alone — no pool, request or execution object made, no generic binding —
    and :meth:`execution` makes the call's canonical execution for the full path. ``answers``
    encodes the answers to its calls (most of them alike: ``fastanswer.AnswerWriter``), on the
    thread serving the queue that granted it; ``reserve`` (that queue's
    ``FastQueue.reserve_answer``, None: none) lets a call's output pools be bound in the
    result ring, where its answer will carry them (:meth:`bind`)."""

    __slots__ = (
        "answers",
        "carried",
        "found",
        "inline",
        "inputs",
        "lane",
        "model",
        "outputs",
        "pools",
        "reserve",
        "session",
        "sizes",
        "spans",
    )

    def __init__(
        self,
        session: str,
        model: str,
        key: fastpacket.LayoutKey,
        reserve: Callable[[int], memoryview | None] | None = None,
    ) -> None:
        self.session = session
        self.model = model
        self.reserve = reserve
        #: The session and prepared model its calls ran with last (:func:`launch_compact` keeps
        #: them while the session is open and the model not released; None: looked up at the next).
        self.found: Found | None = None
        self.inputs, self.outputs, pools = key
        #: Where each pool's bytes are in a call's body (``fastpacket.body_spans``), the body's
        #: length, and what every pool's buffer measures.
        self.spans, self.carried = fastpacket.body_spans([n for n, _ in pools])
        self.sizes = tuple(size for _, size in pools)
        self.inline = sum(self.sizes)
        self.answers = fastanswer.AnswerWriter()
        #: The plan :meth:`bind` last bound for and its pools' entries for it (``_pools_for``),
        #: worked out once per plan (a layout's is mostly one).
        self.pools: tuple[RequestPlan | None, tuple[tuple[int, int, int, int, bool, bool], ...]] = (None, ())
        #: The plan and prepared model :meth:`bind` last bound for, and the layout's lane for
        #: them with where each input's bytes are in a call's body and the ``reserve`` its
        #: output pools' places are asked of (``_lane_for``; None: none), worked out once per
        #: plan and model.
        self.lane: tuple[RequestPlan | None, PreparedModel | None, _Laned | None] = (None, None, None)

    def check(self, body: memoryview) -> None:
        """PacketError unless ``body`` is of the layout's length (``fastpacket.Layout.pools``)."""
        if len(body) != self.carried:
            raise fastpacket.PacketError(
                f"a compact call carries {len(body)} bytes of pools; its layout has {self.carried}"
            )

    def execution(self, body: memoryview, measure: bool, deadline_ns: int | None, loop_timeout_ns: int) -> Execution:
        """The call as the full path takes it: its pools views into ``body``, or private
        copies of its bytes when ``body`` is a view of the queue's shared ring
        (``fastring.in_ring``: the full path computes on its pools in place)."""
        shared = fastring.in_ring(body)
        pools = tuple(
            InlinePool(bytes(body[a:b]) if shared else body[a:b], size) for (a, b), size in zip(self.spans, self.sizes)
        )
        request = Request(self.inputs, self.outputs, pools)
        return Execution(self.session, self.model, request, measure, deadline_ns, loop_timeout_ns)

    def bind(self, body: memoryview, plan: RequestPlan, _driver: Driver, _found: Found) -> BoundPools | None:
        """The pools as ``bind_pools`` binds them for ``plan``: an output pool a zeroed buffer
        of its size holding the call's bytes, any other the call's bytes (zero-padded to its
        size) — a view of ``body``, or a private copy when ``body`` is a view of the queue's
        shared ring and the layout's prepared model (``found``) computes on its inputs in
        place; an output pool in its place in the result ring when that model's graph only
        copies in and out and the layout's last answer gives the places
        (``fastanswer.AnswerWriter.places``), not zeroed first when every byte of it is
        written by a completed execution (``RequestPlan.filled``). None when their sizes are not
        ``plan``'s (``RequestPlan.fits``: each buffer is its pool's size), or they declare more
        than travels inline (``bind_pools`` refuses it before it allocates: the full path words
        it). A lean launch's ``Binder`` (:func:`launch_compact`, which set ``found``)."""
        if self.sizes != plan.sizes or self.inline > wire.max_inline_bytes():
            return None
        found = self.found
        if found is not None:
            lane = self.lane
            if lane[0] is not plan or lane[1] is not found[1]:
                lane = self.lane = (plan, found[1], self._lane_for(plan, found[1]))
            if lane[2] is not None:
                laned, spans, reserve = lane[2]
                return laned.bind(body, spans, None if reserve is None else self.answers.places(reserve))
        # The queue's rings are bound as they are only for a graph that copies each input out
        # once before it reads it and writes each output once, never reading it (LiteRT's):
        # then those copies are the tensors' one copy out of and into the rings. Any other
        # graph computes in place, so it gets private copies, as before (DESIGN §2).
        direct = found is not None and found[1].graph.copies_io
        copy = not direct and fastring.in_ring(body)
        places = self.answers.places(self.reserve) if direct and self.reserve is not None else None
        pools = self.pools
        if pools[0] is not plan:
            pools = self.pools = (plan, self._pools_for(plan))
        bound = BoundPools(None)
        for i, a, b, size, writable, filled in pools[1]:
            if writable:  # copied into its own buffer (or place) either way
                place = None if places is None else places.get(i)
                bind_inline(
                    bound,
                    i,
                    body[a:b],
                    size,
                    True,
                    place if place is not None and len(place) == size else None,
                    filled,
                )
            else:
                bind_inline(bound, i, bytes(body[a:b]) if copy else body[a:b], size, False)
        bound.data_bytes = self.inline
        return bound

    def _lane_for(self, plan: RequestPlan, pm: PreparedModel) -> _Laned | None:
        """The layout's lane for ``plan`` on ``pm`` (``_Lane.of``), where each input's bytes are
        in a call's body, and ``reserve`` when its answers may carry the output pools in place
        (``_Lane.placed``; else None); None: no lane, or an input's bytes not all carried
        (zero-padded: bound as buffers)."""
        lane = _Lane.of(plan, pm)
        if lane is None:
            return None
        spans = []
        for pool, a, b in lane.inputs:
            start, end = self.spans[pool]
            if b > end - start:
                return None
            spans.append(slice(start + a, start + b))
        # Once per layout of a queue: which calls skip the generic binding and run is worth knowing.
        log.info("compact calls of prepared model %s run through its graph's lane (%s)", self.model, lane.lane.library)
        return lane, tuple(spans), self.reserve if lane.placed else None

    def _pools_for(self, plan: RequestPlan) -> tuple[tuple[int, int, int, int, bool, bool], ...]:
        """Per pool, what :meth:`bind` binds it by for ``plan``: its index, where its bytes are in
        a call's body, its size, and whether it receives outputs (``RequestPlan.writable``) and
        every byte of it is written by a completed execution (``RequestPlan.filled``)."""
        return tuple(
            (i, a, b, size, i in plan.writable, i in plan.filled)
            for i, ((a, b), size) in enumerate(zip(self.spans, self.sizes))
        )


#: A call's inline pool's bytes and size (``_Lane.bind_parts``).
_DATA = itemgetter(0)
_SIZE = itemgetter(1)
_VIEW = cast("Callable[[PoolData], memoryview]", memoryview)
_SLICE = cast("Callable[[memoryview, slice], memoryview]", getitem)
#: A lane's output pools as an answer carries them (``_Lane.bind``).
_Pools = dict[int, PoolData]
#: Per input of a lane, where its bytes are in a compact call's body (``Compact._lane_for``).
_Spans = tuple[slice, ...]
#: A layout's output places (``_Lane.places``): each output's, and its pool's by index.
Places = tuple[list[memoryview], _Pools]
#: A compact layout's lane, its inputs' spans and where its answers' places are reserved
#: (``Compact._lane_for``).
_Laned = tuple["_Lane", _Spans, "Callable[[int], memoryview | None] | None"]


class _Lane:
    """A request layout's run through its prepared model's lane (``backend.Lane``): what a
    lean launch binds a call by when the layout's plan is bytes in and bytes out
    (``RequestPlan.lane_io``) and the model's graph offers a lane for it (``LaneGraph``: a
    model placed wholly on LiteRT, the reference executor's straight program) — each input a
    view of the call's bytes, each output a view of its pool's place in a same-host answer's
    result ring (``fastanswer.AnswerWriter.places``) or of a buffer of its own. Made once per
    plan (``of``, kept in ``RequestPlan.lane``: a plan is its prepared model's)."""

    # Weakly referable: a burst's ``repeat.Repeat`` holds its layout's lane without keeping a
    # released model's graph alive.
    __slots__ = (
        "__weakref__",
        "data_bytes",
        "inputs",
        "lane",
        "one",
        "outputs",
        "parts",
        "placed",
        "pools",
        "shapes",
        "sizes",
    )

    def __init__(
        self,
        lane: Lane,
        inputs: tuple[tuple[int, int, int], ...],
        outputs: tuple[tuple[int, int, int, int], ...],
        shapes: tuple[OutputShape, ...],
        plan: RequestPlan,
        pools: tuple[tuple[int, int], ...],
    ) -> None:
        self.lane = lane
        #: Per input: its pool and where its bytes are in it.
        self.inputs = inputs
        #: Per output: its pool, where its bytes are in it, and the pool's size.
        self.outputs = outputs
        #: The output pools (each tiled whole by its outputs) and their sizes, by index (the
        #: order ``bind_inline`` binds them in, hence an answer's).
        self.pools = pools
        self.shapes = shapes
        #: Every pool's size (what a call's pools must measure) and their sum (its data's charge).
        self.sizes = plan.sizes
        self.data_bytes = plan.pool_bytes
        #: What ``bind_parts`` binds a call's inline pools by: per pool the bytes its inputs need,
        #: and per input its pool and where its bytes are in it.
        needs = [0] * len(self.sizes)
        for pool, _, b in inputs:
            needs[pool] = max(needs[pool], b)
        self.parts = (tuple(needs), tuple(i[0] for i in inputs), tuple(slice(a, b) for _, a, b in inputs))
        #: Whether a same-host answer may carry the output pools in place in the result ring
        #: (``fastanswer.AnswerWriter.places``): the ring reserves a place only for a payload of
        #: ``fastring.DIRECT_BYTES`` or more, which an answer's head alone (its shapes, its
        #: pools' lengths) is far from: not asked for when the pools are under half of it.
        self.placed = 2 * sum(size for _, size in pools) >= fastring.DIRECT_BYTES
        #: The one output pool and its size when the layout has one output, filling it whole.
        self.one = pools[0] if len(outputs) == 1 and outputs[0][2] - outputs[0][1] == outputs[0][3] else None

    @staticmethod
    def of(plan: RequestPlan, pm: PreparedModel) -> _Lane | None:
        """The lane of ``plan``'s calls on ``pm`` (``plan`` is one of ``pm.plans``), or None: bound
        as buffers. Worked out once per plan (``RequestPlan.lane``)."""
        known = plan.lane
        if known is not None:
            lane: _Lane | None = known[0]
            return lane
        lane = None
        graph = pm.graph
        io = plan.lane_io()
        if io is not None and isinstance(graph, LaneGraph):
            ins, outs, shapes = io
            made = graph.lane([(d, shape) for *_, d, shape in ins], [(d, shape) for *_, d, shape in outs])
            if made is not None:
                sizes = plan.sizes
                inputs = tuple((pool, offset, offset + n) for pool, offset, n, _, _ in ins)
                outputs = tuple((pool, offset, offset + n, sizes[pool]) for pool, offset, n, _, _ in outs)
                pools = tuple((pool, sizes[pool]) for pool in sorted({o[0] for o in outs}))
                lane = _Lane(made, inputs, outputs, shapes, plan, pools)
                log.info("calls of a request layout run through its prepared model's lane (%s)", made.library)
        plan.lane = (lane,)
        return lane

    def bind(self, body: memoryview, spans: _Spans, places: dict[int, memoryview] | None) -> LanePools:
        """A compact call of ``body`` bound for the lane (``spans``: its inputs' bytes in it):
        its output pools ``places`` (handed on as the answer's pools, unchanged:
        ``fastanswer.AnswerWriter.places``) when it has a place of each output pool's size, and
        no other; else buffers of their own."""
        inputs = list(map(body.__getitem__, spans))
        if places is not None and len(places) == len(self.pools):
            into = []
            for pool, a, b, size in self.outputs:
                place = places.get(pool)
                if place is None or len(place) != size:
                    break
                into.append(place[a:b])
            else:
                results = cast(_Pools, places)
                return LanePools(self.lane, inputs, into, results, self.shapes, self.data_bytes)
        return self._own(inputs)

    def places(self) -> Places:
        """Output places of buffers of their own (each output's, and its pool's by index): what
        a layout's repeated calls are bound into (:meth:`again`). Nothing of the lane or its
        graph is held by them."""
        pools = self._own([])
        return pools.into, pools.results

    def again(self, body: memoryview, spans: _Spans, places: Places) -> LanePools:
        """A call of ``body`` bound for the lane (``spans``: its inputs' bytes in it) into
        ``places`` (:meth:`places`; the caller's, never a run's: a run drops its pools), the
        previous call's answer written (its data copied out) before this one runs: a layout's
        repeated call (``repeat.Repeat``) allocates nothing. Every output fills its place at
        each run, so a place reused holds what a fresh one would."""
        inputs = list(map(body.__getitem__, spans))
        return LanePools(self.lane, inputs, places[0], places[1], self.shapes, self.data_bytes)

    def bind_parts(self, pools: Sequence[tuple[PoolData, int]]) -> LanePools | None:
        """A call of inline ``pools`` (bytes and size, ``_bind_parts``) bound for the lane: each
        input a view of its bytes, each output pool a buffer of its own. None when the pools'
        sizes are not the layout's (the generic binding refuses them) or an input's bytes are
        not all carried (zero-padded: bound as buffers). C calls over the pools and inputs (what
        each takes was worked out once, ``parts``), no Python step per pool or input."""
        if tuple(map(_SIZE, pools)) != self.sizes:
            return None
        views: list[memoryview] = list(map(_VIEW, map(_DATA, pools)))
        needs, at, slices = self.parts
        if not all(map(le, needs, map(len, views))):
            return None
        return self._own(list(map(_SLICE, map(views.__getitem__, at), slices)))

    def _own(self, inputs: list[memoryview]) -> LanePools:
        """A call of ``inputs`` bound for the lane, each output pool a buffer of its own."""
        one = self.one
        if one is not None:  # one output, filling its pool: the pool's buffer is its place
            view = memoryview(bytearray(one[1]))
            return LanePools(self.lane, inputs, [view], {one[0]: view}, self.shapes, self.data_bytes)
        own: dict[int, PoolData] = {}
        for pool, size in self.pools:
            own[pool] = memoryview(bytearray(size))
        into = [cast(memoryview, own[pool])[a:b] for pool, a, b, _ in self.outputs]
        return LanePools(self.lane, inputs, into, own, self.shapes, self.data_bytes)


def launch_compact(
    driver: Driver, compact: Compact, body: memoryview, measure: bool, deadline_ns: int | None, loop_timeout_ns: int
) -> LeanRun | None:
    """A compact call of ``compact`` (``body``: its pools' bytes, of the layout's length; a
    private copy or a view of the queue's shared ring, ``fastring.in_ring``) launched as
    :func:`launch` launches ``compact.execution(...)``, or None: take the full path with it.
    Raises what ``launch`` raises, where it raises it. The session and prepared model are
    looked up once and kept in ``compact.found`` while the session is open and the model
    not released (a closed or released one is looked up again, which refuses it)."""
    found = compact.found
    if found is None or found[0].closed or found[1].released:
        # Looked up again: an ended session or a released model is refused as the full path
        # words it (the driver's lookups raise), and a later call of the layout finds them here.
        found = compact.found = _found(driver, compact.session, compact.model)
    return launch_inline(
        driver, found, compact.inputs, compact.outputs, body, measure, deadline_ns, loop_timeout_ns, None, compact.bind
    )

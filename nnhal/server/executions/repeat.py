"""``Repeat``: a burst stream's repeated request layout, run with everything resolved once.

A burst's messages mostly repeat one layout: the same session, prepared model, arguments
and pool sizes, only the inline pools' data differing. Once a message of a layout ran the
lean path bound for its model's lane (``lean._Lane``) and got the common answer (a success
with no message, unmeasured, one output pool, no profile: ``wire_result.answer_bytes``),
the stream keeps a :class:`Repeat` of it: the message's :class:`~nnhal.core.wire_spans.Template`
(its bytes outside the pools' data), its session and prepared model, its plan and its lane
(held weakly: a released model's memory is not kept), where each input's bytes are in a
message, and its answer's head. A later message
that matches the template (same length, identical bytes outside the data: it parses to
the same message but for the data's contents, so it passes the same validation) runs
from its bytes alone — nothing parsed, looked up, validated or serialized again
(:meth:`Repeat.answer`).

Every per-call rule still runs, through its owner, once, in the full path's order; where
one says no, nothing is held and the message takes the full path (parsed, run and answered
as any other, which refuses it as it always did):

- the session still open and the model not released (else: the full path's refusal);
- no fault armed (``FaultPlan.armed``) and no hook but failures-only ones that read no
  arguments (``Observer.failures_only``, ``reads_args``);
- ``Executions.inline_slot``: the model's fastest run, the session's injected delay, the
  data's size, and the scheduler's slot (``Scheduler.try_start``), taken at once;
- the lifecycle's ``enter`` (draining: the full path's DEVICE_UNAVAILABLE);
- the stream's standing charge covering the data (``lean.Standing.covers``: every byte
  charged before it is held; else the full path charges it).

Then the run: a ``lean.LeanRun`` (its own ``ExecutionControl``: the checkpoint hook, the
server's maximum, memory reservations) over the lane's pools (``_Lane.bind``: each input a
view of the message, the output pool a buffer of its own), counted
(``Method.count_execution``, ``driver.executions``), its answer's size checked
(``within_limit``), timed and counted (``Method.record``), a failure told to the
failures-only hooks; its close (the slot, the standing charge's turn, the pools) and the
lifecycle's ``leave`` handed to the stream's ``Afterwards``, run once the answer was handed
to gRPC. A run that fails answers as the full path would: its status and message
(``fallback``, the transport's serialization).

The inline data's limit (``wire.max_inline_bytes``) and the burst fields' level checks
(``Executions.check_burst_fields``) were passed by the message the Repeat was made from:
the bytes they read are outside the data, identical in every match.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import cast

from nnhal.core.errors import HalError
from nnhal.core.types import ExecutionResult, PoolData, RequestArgument
from nnhal.core.wire_spans import BURST_POOL_DATA, BURST_POOLS_AT, Template, WireError, field_spans
from nnhal.server.executions.afterwards import Afterwards
from nnhal.server.executions.hooks import Call, Timings
from nnhal.server.executions.lean import Found, LeanRun, Places, Standing, _Lane
from nnhal.server.executions.methods import Method
from nnhal.server.executions.owner import Executions
from nnhal.server.executions.refusals import Refused, within_limit
from nnhal.server.memory import LanePools
from nnhal.server.prepared_model import PreparedModel
from nnhal.server.request_plan import RequestPlan

#: A layout's inputs and outputs (``PlanCache.of``'s key).
Layout = tuple[tuple[RequestArgument, ...], tuple[RequestArgument, ...]]
#: How a transport writes an answer that is not the common one (a failure, a refusal).
Fallback = Callable[[ExecutionResult | Refused], bytes]


class Repeat:
    """A burst stream's repeated layout (module docstring): made by :meth:`of` from a message
    the lean path ran; :meth:`answer` answers a later message of the layout, or says to take
    the full path (None)."""

    __slots__ = (
        "_driver",
        "_lane",
        "_places",
        "_plan",
        "executions",
        "fallback",
        "head",
        "index",
        "layout",
        "loop_timeout_ns",
        "match",
        "method",
        "model",
        "nbytes",
        "session",
        "sizes",
        "slices",
        "standing",
        "template",
    )

    def __init__(
        self,
        executions: Executions,
        method: Method,
        template: Template,
        run: LeanRun,
        lane: _Lane,
        layout: Layout,
        slices: tuple[slice, ...],
        nbytes: int,
        head: tuple[int, bytes],
        standing: Standing,
        fallback: Fallback,
    ) -> None:
        self.executions = executions
        self._driver = executions.driver
        self.method = method
        self.template = template
        self.match = template.match
        # The session, prepared model, plan and lane, held weakly: a stream that outlives its
        # model's release (or the plan's eviction) keeps none of its memory (DESIGN §5), and
        # its next message takes the full path, which refuses it.
        self.session = weakref.ref(run.session)
        self.model = weakref.ref(run.pm)
        self._plan = weakref.ref(run.plan)
        self._lane = weakref.ref(lane)
        #: Its arguments: its plan looked up again when the model learnt the layout anew
        #: (``PlanCache.learn``: a full-path run of it replaces the plan).
        self.layout = layout
        self.sizes = lane.sizes
        #: The output places its calls are bound into (``_Lane.places``, made at its first call,
        #: under the stream's standing charge: each answer's data is copied out before the next
        #: call runs).
        self._places: Places | None = None
        #: Where each of the lane's inputs' bytes are in a message.
        self.slices = slices
        #: At least the bytes a message carries inline (``Executions.runs_inline``'s measure).
        self.nbytes = nbytes
        self.loop_timeout_ns = run.loop_timeout_ns
        #: The answer's output pool index and its bytes before the pool's data.
        self.index, self.head = head
        self.standing = standing
        self.fallback = fallback

    @classmethod
    def of(
        cls,
        executions: Executions,
        method: Method,
        raw: bytes,
        datas: Sequence[PoolData],
        layout: Layout,
        nbytes: int,
        run: LeanRun,
        result: ExecutionResult | Refused,
        head: tuple[int, bytes] | None,
        standing: Standing,
        fallback: Fallback,
        path: tuple[Sequence[int], int] = (BURST_POOL_DATA, BURST_POOLS_AT),
    ) -> Repeat | None:
        """The Repeat of the message ``raw`` (its pools' inline data ``datas`` and its arguments
        ``layout``, as parsed; at least ``nbytes`` inline), which the lean path ran as ``run``
        and answered ``result``, the common answer, whose head is ``head`` (its pool's index and
        bytes before the data; None: not the common answer) — or None: no Repeat (a deadline, a
        measured run, pools not bound for a lane, a message whose data's spans do not tell its
        pools). ``path``: the path to the pools' data in ``raw`` and where it repeats
        (``wire_spans.field_spans``: a burst's by default; a unary call's is ``UNARY_POOL_DATA``,
        ``repeats.Repeats``)."""
        lane = cls.lane_of(run, result)
        if head is None or lane is None:
            return None
        try:
            entries = field_spans(raw, *path)
        except WireError:
            return None
        if len(entries) != len(datas):
            return None
        for entry, data in zip(entries, datas):
            if bytes(data) != (b"" if entry is None else raw[entry[0] : entry[1]]):
                return None
        slices = []
        for pool, a, b in lane.inputs:
            entry = entries[pool]
            if entry is None or entry[0] + b > entry[1]:
                return None  # zero-padded: bound as buffers (the full path's)
            slices.append(slice(entry[0] + a, entry[0] + b))
        template = Template(raw, [entry for entry in entries if entry is not None])
        return cls(executions, method, template, run, lane, layout, tuple(slices), nbytes, head, standing, fallback)

    @staticmethod
    def lane_of(run: LeanRun, result: ExecutionResult | Refused) -> _Lane | None:
        """The lane a Repeat of ``run`` (answered ``result``) would run its layout's calls on, or
        None: no Repeat of it (a refusal or a failure, a deadline, a measured run, pools not
        bound for a lane). :meth:`of` asks it; a caller may first (nothing of a message whose run
        makes no Repeat is looked at: ``prepared_model_servicer.repeat_of``)."""
        if isinstance(result, Refused) or result.status or run.deadline_ns is not None:
            return None
        if run.measure or type(run.bound) is not LanePools or run.plan.lane is None:
            return None
        lane: _Lane | None = run.plan.lane[0]
        return lane

    def found(self) -> Found | None:
        """Its session and prepared model while the session is open and the model not released;
        None: stale (either closed or gone: the full path refuses its messages)."""
        s, pm = self.session(), self.model()
        if s is None or pm is None or s.closed or pm.released:
            return None
        return s, pm

    def _relearnt(self, pm: PreparedModel) -> tuple[RequestPlan | None, _Lane | None]:
        """The plan ``pm`` has now for the layout (learnt anew by a full-path run of it, or
        evicted and learnt again) and its lane (``_Lane.of``: made once per plan), kept weakly
        in turn; None where it has none of the layout's pool sizes (the full path learns it)
        or no lane. A plan of the same arguments and sizes binds each input where the first did."""
        plan = pm.plans.of(*self.layout)
        if plan is None or plan.sizes != self.sizes:
            return None, None
        lane = _Lane.of(plan, pm)
        if lane is None:
            return None, None
        self._plan, self._lane = weakref.ref(plan), weakref.ref(lane)
        return plan, lane

    def answer(self, raw: bytes, after: Afterwards, matched: bool = False) -> bytes | None:
        """The answer to ``raw`` when it matches the layout and every per-call rule lets it run
        here (module docstring), its close and the lifecycle's leave left in ``after``; None:
        nothing held, take the full path. ``matched``: ``raw`` is known to match (found by its
        template: ``repeats.Repeats.find``)."""
        if not matched and not self.match(raw):
            return None
        x = self.executions
        found = self.found()
        if found is None:
            return None
        s, pm = found
        plan, lane = self._plan(), self._lane()
        if plan is None or lane is None:
            plan, lane = self._relearnt(pm)
            if plan is None or lane is None:
                return None
        obs = x.observer
        if x.faults.armed or (obs is not None and (obs.reads_args or not obs.failures_only)):
            return None
        t0 = time.perf_counter()
        ticket = x.inline_slot(s, pm, self.nbytes)
        if ticket is None:
            return None
        method = self.method
        lifecycle = x.lifecycle
        try:
            lifecycle.enter(method.what)
        except HalError:
            self._driver.scheduler.release(ticket)
            return None  # draining: the full path refuses it
        standing = self.standing
        if not standing.covers(s.id, lane.data_bytes):
            self._driver.scheduler.release(ticket)
            lifecycle.leave()
            return None  # the full path charges it
        places = self._places
        if places is None:  # covered by the standing charge from now on
            places = self._places = lane.places()
        bound = lane.again(memoryview(raw), self.slices, places)
        run = LeanRun(self._driver, s, pm, plan, bound, ticket, False, None, self.loop_timeout_ns, 0, standing)
        method.count_execution()
        t1 = 0.0 if obs is None else time.perf_counter()
        result: ExecutionResult | Refused
        try:
            result = within_limit(run.run(False), x.answer_limit())
        except Exception as err:
            result = Refused.of(err, f"in {method.what}")
        finally:
            defer = after.defer
            defer(run.close)
            defer(lifecycle.leave)
        status = result.status
        t2 = time.perf_counter()
        method.record(status, t2 - t0)
        if not status:
            return self.head + cast(ExecutionResult, result).output_pools[self.index]
        if obs is not None:
            x.tell(obs, Call(method.name, method.what, None), status, Timings(t0, t1, t2), result)
        return self.fallback(result)

"""``Executions``: the one owner of a device's HAL calls (the package docstring says what it owns).

Each use case takes its call's canonical arguments as a ``build`` function, called once
the call is admitted (counted by the lifecycle), so that a request that cannot be
converted is the call's launch error, answered and counted like any other. Every method
returns its answer and never raises but for an injected abort (``faults.Abort``), which
the transport turns into its own status.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Generator
from typing import Protocol

from nnhal.core.enums import ErrorStatus, HalVersion
from nnhal.core.errors import GeneralFailure, HalError
from nnhal.core.methods import METHOD_LEVEL, require_field
from nnhal.core.types import ExecutionResult, FencedExecutionInfo
from nnhal.server.driver import Driver
from nnhal.server.executions import faults as injected, lean
from nnhal.server.executions.afterwards import Afterwards
from nnhal.server.executions.calls import (
    CachedPreparation,
    Execution,
    FencedExecution,
    Launch,
    Notify,
    Preparation,
    Prepared,
)
from nnhal.server.executions.faults import FAULTABLE, KINDS, FaultPlan, Liveness
from nnhal.server.executions.hooks import Call, Observer, Observers, Timings
from nnhal.server.executions.lean import LeanRun
from nnhal.server.executions.long_calls import Held, LongCalls, held
from nnhal.server.executions.methods import CARRIER, SAME, Arrival, Method
from nnhal.server.executions.notified import launch_then_notify
from nnhal.server.executions.refusals import Refused, within_limit
from nnhal.server.jobs import ExecutionJob, PrepareJob
from nnhal.server.metrics import TRANSPORTS, DeviceMetrics, Metrics
from nnhal.server.prepared_model import PreparedModel
from nnhal.server.scheduler import Ticket
from nnhal.server.session import Session

#: Executions of a model whose fastest run is shorter than this may run on the event loop's
#: thread (``Executions.runs_inline``); 1 ms: the loop is never held up longer than a
#: round trip takes anyway.
INLINE_MAX_NS = 1_000_000
#: ... and whose request carries at most this many bytes inline.
INLINE_MAX_BYTES = 64 * 1024
#: A fence wait answers this long before the caller's deadline expires.
INFO_MARGIN_S = 0.05
#: A fence wait looks this often whether its caller is still there (a cancelled call's
#: thread and cap slot are given back within this).
INFO_SLICE_S = 0.5
_NO_LIMIT = 1 << 62


def _result_bytes(result: ExecutionResult) -> int:
    return sum(len(data) for data in result.output_pools.values())


def _prepared_bytes(prepared: Prepared) -> int:
    return len(prepared.model_cache)


class Stream(Liveness, Protocol):
    """The transport's call of a launch / notify stream: ``add_callback`` calls back when the
    call ends (False, and never, when it has ended already)."""

    def add_callback(self, callback: Callable[[], None]) -> bool: ...


class Waiting(Liveness, Protocol):
    """The transport's call of a fence wait: the seconds left before its deadline."""

    def time_remaining(self) -> float | None: ...


class Executions:
    """The HAL calls of one device (package docstring). Thread-safe.

    ``metrics``: the server's (a fresh, unserved set when None); ``message_limit``: the
    most bytes of output pools one answer may carry (the transport's message size, read at
    call time; None: no limit)."""

    def __init__(
        self,
        driver: Driver,
        metrics: Metrics | DeviceMetrics | None = None,
        message_limit: Callable[[], int] | None = None,
    ) -> None:
        self.driver = driver
        if metrics is None:
            metrics = Metrics(driver)
        #: This device's counted series.
        self.metrics = metrics if isinstance(metrics, DeviceMetrics) else metrics.device(driver.config.name)
        self.lifecycle = driver.lifecycle
        self.level = driver.config.feature_level
        #: Whether a burst execution's fields are checked against the level (``check_burst_fields``:
        #: the 1.2 burst lacks some; from 1.3 on nothing to look at), fixed with the level.
        self.burst_fields_checked = self.level < HalVersion.V1_3
        self.long_calls = LongCalls.of(driver.config)
        config = driver.config
        self.faults = FaultPlan(config.fault_seed if config.fault_injection else None, config.fault_rate)
        #: The hooks (``hooks.Observer``); None: none, and the calls pay one attribute read.
        self.observer: Observer | None = None
        self._observers: list[Observer] = []
        #: The most bytes of output pools one answer may carry (``within_limit``), read per call.
        self.answer_limit: Callable[[], int] = message_limit or (lambda: _NO_LIMIT)
        self._methods: dict[tuple[str, str, str | None, str | None, str | None, str], Method] = {}
        self._lock = threading.Lock()

    # -- methods and hooks --------------------------------------------------------------
    def method(
        self,
        name: str,
        what: str = "",
        timer: str | None = "execute",
        fault: str | None = SAME,
        gate: str | None = SAME,
        transport: str = "grpc",
    ) -> Method:
        """The :class:`Method` ``name`` (made once): counted under ``name``, gated by the level
        of ``gate`` (default: ``name``, when ``nnhal.core.methods`` lists it), faulted as
        ``fault`` (default: ``name``, when faultable), timed in the ``timer`` histogram
        ("execute", "prepare", None); the executions it launches counted under ``transport``."""
        if transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {transport!r} (one of {', '.join(TRANSPORTS)})")
        key = (name, what, timer, fault, gate, transport)
        m = self._methods.get(key)
        if m is None:
            if fault is SAME:
                fault = name if name in FAULTABLE else None
            level = METHOD_LEVEL.get(name if gate is SAME else gate or "")
            metrics = self.metrics
            m = Method(
                name, what or name, level, fault, metrics.recorder(name, timer), transport, metrics.execution_counts()
            )
            with self._lock:
                m = self._methods.setdefault(key, m)
        return m

    def observe(self, observer: Observer) -> None:
        """Tell ``observer`` of every call from now on (``hooks``), after those added before."""
        with self._lock:
            self._observers.append(observer)
            self.observer = Observers(self._observers)

    # -- arrival: the level gate and injected faults ---------------------------------------
    def arrive(self, method: Method, kinds: Collection[str] = KINDS) -> Arrival | None:
        """What a call of ``method`` meets as it arrives: GENERAL_FAILURE when the device's
        level lacks the method, else the injected fault it takes (of ``kinds``); None mostly."""
        if method.level is not None and self.level < method.level:
            return Arrival(
                GeneralFailure(
                    f"{method.name} needs NN HAL {method.level.label}; this device serves {self.level.label}"
                )
            )
        if method.fault is not None and self.faults.armed:
            fault = self.faults.take(method.fault, kinds)
            if fault is not None:
                return Arrival(None, fault)
        return None

    def check_burst_fields(self, deadline: bool, loop_timeout_ns: int, tokens: bool) -> None:
        """INVALID_ARGUMENT for a burst execution carrying what the device's level lacks (the
        1.2 burst has no deadline, loop timeout or driver-managed buffer tokens)."""
        if not self.burst_fields_checked:
            return
        carried = {
            "a deadline": deadline,
            "a loop timeout": bool(loop_timeout_ns),
            "a driver-managed buffer (token) pool": tokens,
        }
        for what, used in carried.items():
            if used:
                require_field(self.level, HalVersion.V1_3, what, "configureExecutionBurst")

    # -- synchronous executions -----------------------------------------------------------
    def runs_inline(self, session: str, handle: str, inline_bytes: int) -> lean.Inline | None:
        """Where an execution may run: on the event loop's thread — the session and prepared
        model it found and the slot it took (``lean.Inline``), to hand to :meth:`execute` as
        ``inline``, which gives the slot back on every path — or on a worker's (None, nothing
        taken).

        Handing a call to a worker thread and its answer back to the loop costs two thread
        switches under the GIL — more than a small model's whole execution. So an execution
        runs inline when it cannot hold the loop up: its model's fastest run so far is under
        :data:`INLINE_MAX_NS`, its inline data (``inline_bytes``: at least the bytes its pools
        carry inline, as a message's serialized size tells them without copying a pool) under
        :data:`INLINE_MAX_BYTES`,
        a slot is free for it at once (``Scheduler.try_start``: taken then, so the scheduler
        is asked once per call), and no fault or injected delay is set. Anything else — a
        model never run, a large one, a busy device — goes to a worker. (The same client's
        higher-priority work arriving mid-run may pause it: bounded by one execution, and
        rare.)"""
        if self.faults.armed:
            return None
        try:
            s = self.driver.session(session)
            pm = self.driver.prepared(s, handle)
        except HalError:
            return None  # the worker's path reports it
        ticket = self.inline_slot(s, pm, inline_bytes)
        return None if ticket is None else ((s, pm), ticket)

    def inline_slot(self, s: Session, pm: PreparedModel, inline_bytes: int) -> Ticket | None:
        """:meth:`runs_inline` of an execution whose session and prepared model were found
        (open, not released) and no fault is armed: the slot it took when the execution may
        run on the event loop's thread (its model's fastest run, the session's injected
        delay, its inline data's size, a free slot at once), else None with nothing taken.
        For a caller that keeps them found (``repeat.Repeat``: a burst's repeated layout)."""
        fastest = pm.fastest_ns
        if fastest is None or fastest >= INLINE_MAX_NS or s.faults.execute_delay_ms:
            return None
        if inline_bytes > INLINE_MAX_BYTES:
            return None
        return self.driver.scheduler.try_start(s.client_key, pm.priority)

    def execute(
        self,
        method: Method,
        build: Callable[[], Execution],
        live: Liveness | None = None,
        arrival: Arrival | None = None,
        since: float | None = None,
        lean_launch: Callable[[], LeanRun | None] | None = None,
        inline: lean.Inline | None = None,
        after: Afterwards | None = None,
    ) -> ExecutionResult | Refused:
        """One synchronous execution (also a burst's, a streamed one's, every form's): counted
        by the lifecycle from launch to result (DEVICE_UNAVAILABLE while draining), the job
        closed on every path. Its result — a result too large for one message is
        INVALID_ARGUMENT — or, when it was refused or failed without one, a ``Refused``.
        ``arrival``: what ``arrive`` returned for this call; ``since``: when it arrived
        (``time.perf_counter()``, a streamed execution's start; default: now).
        ``lean_launch``: the call's own lean launch (``lean.launch_compact``,
        ``lean.launch_inline``), tried first when no hook reads the calls' canonical arguments
        (``Observer.reads_args``; the hooks are then told the call with ``args`` None); when
        it returns None, ``build()`` is called
        and the call launched as any other. ``inline``: what ``runs_inline`` returned for
        this call (its session and prepared model, and its slot: this call's own lean launch
        was handed it too, and ``lean.launch`` is). The slot is given back exactly once: by
        the run that took it, else here — on a refusal, on a raise, and before the full path
        (which admits the call afresh).
        ``after``: where the caller, which runs it once the answer has left, takes the work
        that need not precede the answer (``afterwards``): when given, no fault was met
        (``arrival`` None) and no hook but those of failures (``Observer.failures_only``) is
        told, a call that ran leaves its job's close (the
        slot and the charge given back, the pools dropped) and the lifecycle's ``leave``
        there, in that order; its metrics are recorded before it returns, as always. Every
        refusal, and every call run otherwise, closes and leaves before it returns."""
        t0 = time.perf_counter() if since is None else since
        error = arrival.start() if arrival is not None else None  # an abort raises
        obs = self.observer
        # Where the job's close goes once the job ran, and then the leave (``handed``); None: done here.
        defer = None if after is None or arrival is not None or not (obs is None or obs.failures_only) else after.defer
        handed = None
        args: Execution | None = None
        found = ticket = None
        if inline is not None:
            found, ticket = inline
        try:
            if error is not None:
                raise error
            self.lifecycle.enter(method.what)
        except Exception as err:
            if ticket is not None:
                self.driver.scheduler.release(ticket)
            return self.refuse(method, err, None, t0)
        try:
            job: ExecutionJob | LeanRun | None
            try:
                job = None
                if lean_launch is not None and (obs is None or not obs.reads_args):
                    job = lean_launch()
                if job is None:
                    args = build()
                    # A layout run before, with a free slot: the lean launch (``lean``); else the full one.
                    job = lean.launch(self.driver, args, found, ticket)
                    if job is None:
                        if ticket is not None:  # the full path admits the call afresh
                            self.driver.scheduler.release(ticket)
                            ticket = None
                        job = self._begin(args)
            except Exception as err:
                if ticket is not None:  # no run took it (one that did raises nothing after)
                    self.driver.scheduler.release(ticket)
                return self.refuse(method, err, args, t0)
            method.count_execution()
            t1 = 0.0
            call = None  # one for every hook of the call, made when one is told
            if obs is not None:
                t1 = time.perf_counter()
                if not obs.failures_only:
                    call = Call(method.name, method.what, args)
                    obs.started(call)
            result: ExecutionResult | Refused
            try:
                result = within_limit(job.run(defer is None), self.answer_limit())
            except Exception as err:
                result = Refused.of(err, f"in {method.what}")
            finally:
                if defer is None:
                    job.close()
                else:
                    defer(job.close)
                    handed = defer
            if arrival is not None:
                injected.before_reply(arrival.fault, live)
            t2 = time.perf_counter()
            method.record(result.status, t2 - t0)
            if obs is not None and (call is not None or result.status != ErrorStatus.NONE):
                if call is None:
                    call = Call(method.name, method.what, args)
                self.tell(obs, call, result.status, Timings(t0, t1, t2), result)
            return result
        finally:
            if handed is None:
                self.lifecycle.leave()
            else:
                handed(self.lifecycle.leave)

    def _begin(self, call: Execution, admit: bool = True) -> ExecutionJob:
        d = self.driver
        return d.begin_execute(
            d.session(call.session),
            call.prepared_model,
            call.request,
            call.measure,
            call.deadline_ns,
            call.loop_timeout_ns,
            call.profile,
            admit=admit,
        )

    def refuse(self, method: Method, err: Exception, args: object = None, since: float | None = None) -> Refused:
        """``err`` (raised where the refusal was found: a HalError, or a bug) as the refusal of
        a call of ``method`` that was not launched: counted, and told to the hooks (``args``:
        the call's canonical arguments when they were converted; ``since``: its arrival)."""
        refused = Refused.of(err, f"launching {method.what}")
        method.record(refused.status, None)
        obs = self.observer
        if obs is not None:
            t = time.perf_counter()
            timings = Timings(t if since is None else since, None, t)
            self.tell(obs, Call(method.name, method.what, args), refused.status, timings, refused)
        return refused

    @staticmethod
    def tell(obs: Observer, call: Call, status: ErrorStatus, timings: Timings, answer: object) -> None:
        obs.finished(call, status, timings)
        obs.answered(call, answer)

    # -- asynchronous calls: launch, then notify ------------------------------------------
    def execute_async(
        self,
        method: Method,
        build: Callable[[], Execution],
        live: Stream | None = None,
        arrival: Arrival | None = None,
    ) -> Generator[Launch | Notify[ExecutionResult], None, None]:
        """An asynchronous execution (``execute_1_3``, the HIDL ``execute`` forms): its
        :class:`Launch`, then one :class:`Notify` carrying the result (``notified.launch_then_notify``)."""
        limit = self.answer_limit

        def begin(call: Execution) -> ExecutionJob:
            # Launch checks now; the scheduler ticket only once the launch was written (the
            # job's ``run`` takes it): a client that does not read holds no place on the device.
            job = self._begin(call, admit=False)
            method.count_execution()
            return job

        return launch_then_notify(
            self, method, build, begin, lambda job: within_limit(job.run(), limit()), live, arrival, _result_bytes
        )

    def prepare(
        self,
        method: Method,
        build: Callable[[], Preparation | CachedPreparation],
        live: Stream | None = None,
        arrival: Arrival | None = None,
    ) -> Generator[Launch | Notify[Prepared], None, None]:
        """A preparation (every ``prepareModel*`` form): its :class:`Launch`, then one
        :class:`Notify` carrying the prepared model. It holds a place among its client's
        long-lived calls ("preparation") from its launch to its notify."""
        want_cache = [False]

        def start(call: Preparation | CachedPreparation) -> Held[PrepareJob]:
            d = self.driver
            session = d.session(call.session)
            if isinstance(call, CachedPreparation):
                launch: Callable[[], PrepareJob] = lambda: d.prepare_from_cache(  # noqa: E731
                    session, list(call.model_cache), list(call.data_cache), call.token, call.deadline_ns
                )
            else:
                want_cache[0] = call.want_cache
                launch = lambda: d.begin_prepare(  # noqa: E731
                    session, call.model, call.preference, call.priority, call.deadline_ns, call.token
                )
            return held(self.long_calls, "preparation", session.client_key, launch)

        def run(job: Held[PrepareJob]) -> Prepared:
            handle, model_cache = job.job.run()
            # If the client vanished before the notify, its session's end releases the model.
            return Prepared(handle, model_cache if want_cache[0] else b"")

        return launch_then_notify(self, method, build, start, run, live, arrival, _prepared_bytes)

    # -- fenced executions ----------------------------------------------------------------
    def execute_fenced(
        self, what: str, call: FencedExecution, method: str = "executeFenced", transport: str = "grpc"
    ) -> str:
        """IPreparedModel::executeFenced (every form, ``method`` its name for the hooks): the
        handle of its sync fence and callback. Counted by the lifecycle until its launch took
        its scheduler ticket, which then counts it (DEVICE_UNAVAILABLE while draining). Raises
        HalError. The hooks are told of the launch (its answer: the fence's handle), not of the
        run, which starts when the fences it waits for signal; a launched one is counted
        under ``transport``."""
        t0 = time.perf_counter()
        d = self.driver
        try:
            with self.lifecycle.work(what):
                fence = d.execute_fenced(
                    d.session(call.session),
                    call.prepared_model,
                    call.request,
                    list(call.wait_for),
                    call.measure,
                    call.deadline_ns,
                    call.loop_timeout_ns,
                    call.duration_ns,
                    call.on_signal,
                )
        except HalError as err:
            self._observed(Call(method, what, call), t0, Refused(err.error_status, err.message))
            raise
        self.metrics.execution(CARRIER.get() or transport)
        self._observed(Call(method, what, call), t0, fence)
        return fence

    def fenced_info(
        self, session: str, callback: str, wait: bool, live: Waiting, method: str = "getExecutionInfo"
    ) -> FencedExecutionInfo:
        """IFencedExecutionCallback::getExecutionInfo (``method``: its name for the hooks). With
        ``wait``, until the fence signals, the caller's deadline is near or the caller is gone —
        a long-lived call of its client ("fence wait"), capped (RESOURCE_EXHAUSTED_TRANSIENT,
        unless the fence has signalled already). Raises HalError."""
        t0 = time.perf_counter()
        d = self.driver
        s = d.session(session)
        info = d.fenced_info(s, callback, False, None)
        if wait and not info.signalled:
            with self.long_calls.holding("fence wait", s.client_key):
                while True:
                    remaining = live.time_remaining()
                    timeout = (
                        INFO_SLICE_S if remaining is None else max(0.0, min(INFO_SLICE_S, remaining - INFO_MARGIN_S))
                    )
                    info = d.fenced_info(s, callback, True, timeout)
                    if info.signalled or timeout < INFO_SLICE_S or not live.is_active():
                        break
        info = within_limit(info, self.answer_limit())
        self._observed(Call(method, method, (session, callback, wait)), t0, info)
        return info

    def _observed(self, call: Call, t0: float, answer: object) -> None:
        """Tell the hooks of a call answered at once (``answer``: its canonical answer)."""
        obs = self.observer
        status = getattr(answer, "status", ErrorStatus.NONE)
        if obs is not None and (not obs.failures_only or status != ErrorStatus.NONE):
            t = time.perf_counter()
            self.tell(obs, call, status, Timings(t0, None if isinstance(answer, Refused) else t0, t), answer)

    # -- other work --------------------------------------------------------------------------
    def admit(self, what: str) -> None:
        """DEVICE_UNAVAILABLE while draining: for work that is not counted (``allocate``)."""
        self.lifecycle.admit(what)

"""An asynchronous call's two events — its :class:`Launch`, then exactly one :class:`Notify`,
whatever happens (:func:`launch_then_notify`, for :class:`Executions`' asynchronous
executions and preparations) — and its answer's bytes charged to its session while they wait
to be written (:func:`hold_answer`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, TypeVar

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.server.budget import MemoryBudget
from nnhal.server.executions import faults as injected
from nnhal.server.executions.calls import Launch, Notify
from nnhal.server.executions.hooks import Call, Timings
from nnhal.server.executions.long_calls import Job, once
from nnhal.server.executions.methods import Arrival, Method
from nnhal.server.executions.refusals import Refused

if TYPE_CHECKING:
    from nnhal.server.executions.owner import Executions, Stream

A = TypeVar("A")
C = TypeVar("C")
J = TypeVar("J", bound=Job)

#: The budget's kind for an answer's bytes waiting to be written to its client.
RESULTS_WAITING = "results waiting to be written"
#: An answer waiting to be written is held as its message (charged to its session) and as
#: this many more copies the transport makes — the serialized bytes and gRPC's own buffer —
#: charged to the server's total.
TRANSPORT_COPIES = 2
#: ... but for an answer of at most this many bytes.
SMALL_ANSWER_BYTES = 64 * 1024


def launch_then_notify(
    x: Executions,
    method: Method,
    build: Callable[[], C],
    start: Callable[[C], J],
    run: Callable[[J], A],
    live: Stream | None,
    arrival: Arrival | None,
    size: Callable[[A], int],
) -> Generator[Launch | Notify[A], None, None]:
    """An asynchronous call: ``Launch`` with the launch status, then exactly one ``Notify``,
    whatever happens. A launch error (an arrival's, a drain's, ``build``'s, ``start``'s)
    is notified with the same status; otherwise the notify carries ``run(job)``, or its
    failure. The lifecycle counts the work from launch to notify.

    The job is closed (and the work uncounted) exactly once on every path. When the
    call ends between the two events (cancel, deadline, the client's death, the
    server's stop) the transport never resumes the generator: ``live``'s end callback
    then closes the job at once, and the generator's ``finally`` (run when it is
    collected) finds nothing left to do; without ``live`` that ``finally`` alone does it.
    The generator resumed after its launch event means the launch was written: the
    hooks' ``launch_written`` is called then, before the work runs. Likewise for the
    notify: its answer's bytes (``size(answer)``) are charged to the call's session
    (:data:`RESULTS_WAITING`) from the notify until it was written or the call ended, so
    that results a client does not read count against its own memory limit; past it
    the notify carries the RESOURCE_EXHAUSTED_* refusal instead of the answer."""
    t0 = time.perf_counter()
    obs = x.observer
    args: C | None = None
    counted = False
    fault = arrival.fault if arrival is not None else None
    error = arrival.start() if arrival is not None else None  # an abort raises: nothing was launched
    try:
        if error is not None:
            raise error
        x.lifecycle.enter(method.what)
        counted = True
        args = build()
        job = start(args)
    except Exception as err:
        if counted:
            x.lifecycle.leave()
        refused = x.refuse(method, err, args, t0)
        yield Launch(refused.status, refused.message)
        yield Notify(refused.status, refused.message)
        return

    close_job = once(job.close)

    def finish() -> None:
        try:
            close_job()
        finally:
            x.lifecycle.leave()

    end = once(finish)
    del build  # the call's request message: nothing here holds it past the launch
    waiting: Callable[[], None] | None = None
    # "parked": suspended at the launch event, the job held by no thread; "running": the
    # generator resumed; "abandoned": the call ended while parked and the job was closed.
    state = ["parked"]
    lock = threading.Lock()

    def on_termination() -> None:
        with lock:
            if state[0] != "parked":
                return
            state[0] = "abandoned"
        end()

    try:
        if live is not None:
            live.add_callback(on_termination)
        yield Launch(ErrorStatus.NONE)
        with lock:
            if state[0] == "abandoned":
                return
            state[0] = "running"
        call = Call(method.name, method.what, args) if obs is not None and not obs.failures_only else None
        if obs is not None and call is not None:
            obs.launch_written(call)
        injected.after_message(fault, 1)  # an abort raises: the finally ends the job
        t1 = time.perf_counter()
        if obs is not None and call is not None:
            obs.started(call)
        notify: Notify[A]
        answer: A | None = None
        answered: object = None
        try:
            answer = run(job)
            status = getattr(answer, "status", ErrorStatus.NONE)
            notify = Notify(status, getattr(answer, "message", ""), answer)
        except Exception as err:
            refused = Refused.of(err, f"during {method.what}")
            notify = Notify(refused.status, refused.message)
        # The job's bound pools (the request's data and the outputs) go before the answer
        # waits to be written; the lifecycle still counts the call until it was.
        close_job()
        if notify.answer is not None:
            notify, waiting = hold_answer(x.driver.budget, method, getattr(args, "session", ""), notify, size)
        injected.before_reply(fault, live)
        t2 = time.perf_counter()
        method.record(notify.status, t2 - t0)
        if obs is not None and (call is not None or notify.status != ErrorStatus.NONE):
            if call is None:
                call = Call(method.name, method.what, args)
            answered = notify.answer if notify.answer is not None else Refused(notify.status, notify.message)
            x.tell(obs, call, notify.status, Timings(t0, t1, t2), answered)
        # Yielded from a box: while it waits to be written, no local here holds the answer.
        box = [notify]
        del notify, args, call, answer, answered
        yield box.pop()
    finally:
        try:
            if waiting is not None:
                waiting()
        finally:
            end()


def hold_answer(
    budget: MemoryBudget, method: Method, session: str, notify: Notify[A], size: Callable[[A], int]
) -> tuple[Notify[A], Callable[[], None] | None]:
    """``notify`` with its answer's bytes charged to ``session`` while they wait to be
    written, and the function giving them back (None: nothing charged); or, past the
    session's memory limits, the notify of that refusal."""
    answer = notify.answer
    nbytes = size(answer) if answer is not None else 0
    if not nbytes:
        return notify, None
    # A small answer's copies are not worth refusing it for (a victim's answer is small).
    copies = TRANSPORT_COPIES * nbytes if nbytes > SMALL_ANSWER_BYTES else 0
    try:
        budget.charge(session, nbytes, RESULTS_WAITING)
        try:
            budget.charge_working(copies, RESULTS_WAITING, keep_reserve=True)
        except HalError:
            budget.uncharge(session, nbytes, RESULTS_WAITING)
            raise
    except HalError as err:
        message = f"{method.what}'s answer ({nbytes} bytes) cannot wait to be written: {err.message}"
        return Notify(err.error_status, message), None

    def release() -> None:
        budget.uncharge(session, nbytes, RESULTS_WAITING)
        budget.uncharge_working(copies, RESULTS_WAITING)

    return notify, once(release)

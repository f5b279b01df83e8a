"""The owner's hooks: what a capability built on the owner observes of every call.

An :class:`Observer` is told, in this order, for one call:

1. ``launch_written(call)`` — asynchronous calls only: the transport wrote the launch
   status to the client (a stream's generator is resumed after its launch message went
   out; the owner calls this then, on the thread that goes on to run the work, before it
   runs). Admission may wait here: the work does not run until this returns.
2. ``started(call)`` — the call was launched (admitted, pools bound, request validated)
   and is about to run. Not called for a call refused before its launch.
3. ``finished(call, status, timings)`` — the answer is ready (its HAL status and its
   :class:`Timings`), also for a refused call.
4. ``answered(call, answer)`` — the call and its answer in canonical types (an
   ``ExecutionResult``, ``Prepared``, ``FencedExecutionInfo``, or a ``refusals.Refused``),
   for record & replay.

A fenced execution's launch and a ``getExecutionInfo`` are told as calls answered at
once (``finished``, ``answered``; their answers the fence's handle and the info).

Hooks run on the call's own thread (a worker's, or the event loop's for an inline
execution): they must be quick and must not raise (an exception is logged and dropped).
With no observer set the owner pays one attribute read per call.

An observer that never reads a call's canonical arguments says so (``reads_args`` False):
while no observer of the owner reads them, a call that can launch from its bytes alone (a
same-host compact call, ``lean.launch_compact``; an all-inline gRPC execution,
``lean.launch_inline``) launches so, with no arguments made, and the hooks are told it with
``args`` None.

An observer that wants only the calls that failed says so (``failures_only``): it is told
``finished`` and ``answered`` of a call whose status is not NONE, and nothing else. While
every observer of the owner wants only failures, a call that succeeds costs no hook and
no ``Call`` or ``Timings`` made (``Observers.failures_only``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nnhal.core.enums import ErrorStatus

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Call:
    """One call as the hooks see it: its ``method`` (the name its metrics count it by),
    ``what`` it is (``"a burst execution"``) and its canonical ``args`` (``calls.Execution`` …;
    None when it was refused before its arguments were converted, or launched from its
    bytes while no observer reads them: module docstring)."""

    method: str
    what: str
    args: object


@dataclass(frozen=True, slots=True)
class Timings:
    """``time.perf_counter()`` seconds: when the call arrived at the owner, when it was
    launched (None: refused before) and when its answer was ready."""

    arrived: float
    started: float | None
    finished: float

    @property
    def seconds(self) -> float:
        return self.finished - self.arrived


class Observer:
    """No-op hooks (module docstring); override those you need."""

    #: Whether this observer reads ``Call.args`` (False: it never does, so calls may launch
    #: without making their canonical arguments; module docstring).
    reads_args: bool = True
    #: Whether this observer wants only the calls that failed (module docstring): told
    #: ``finished`` and ``answered`` of those alone, never ``launch_written`` or ``started``.
    failures_only: bool = False

    def launch_written(self, call: Call) -> None:
        """The launch status of ``call`` reached the transport's client side."""

    def started(self, call: Call) -> None:
        """``call`` was launched and is about to run."""

    def finished(self, call: Call, status: ErrorStatus, timings: Timings) -> None:
        """``call``'s answer is ready."""

    def answered(self, call: Call, answer: object) -> None:
        """``call`` and its canonical answer."""


class Observers(Observer):
    """Several observers, each told in the order given; one that raises is logged and skipped.
    A hook an observer does not override is not called on it (the owner calls every hook of
    every call: most observers want one or two), nor one of an observer that wants only
    failures (``failures_only``) for a call that succeeded (an answer without a status, a
    ``Prepared`` or a fence's handle, is a success)."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)
        #: Whether any of them reads ``Call.args``.
        self.reads_args = any(o.reads_args for o in self.observers)
        #: Whether every one of them wants only failures: the owner then tells a call that
        #: succeeded to none of them, and makes no ``Call`` for it.
        self.failures_only = all(o.failures_only for o in self.observers)

        def overriding(hook: str, failures_only: bool) -> tuple[Callable[..., None], ...]:
            base = getattr(Observer, hook)
            return tuple(
                getattr(o, hook)
                for o in self.observers
                if getattr(type(o), hook) is not base and o.failures_only == failures_only
            )

        self._launch_written = overriding("launch_written", False)
        self._started = overriding("started", False)
        self._finished = overriding("finished", False)
        self._answered = overriding("answered", False)
        self._failed = overriding("finished", True)
        self._failed_answers = overriding("answered", True)

    def launch_written(self, call: Call) -> None:
        for hook in self._launch_written:
            _safely(hook, call)

    def started(self, call: Call) -> None:
        for hook in self._started:
            _safely(hook, call)

    def finished(self, call: Call, status: ErrorStatus, timings: Timings) -> None:
        for hook in self._finished:
            _safely(hook, call, status, timings)
        if status != ErrorStatus.NONE:
            for hook in self._failed:
                _safely(hook, call, status, timings)

    def answered(self, call: Call, answer: object) -> None:
        for hook in self._answered:
            _safely(hook, call, answer)
        if self._failed_answers and getattr(answer, "status", ErrorStatus.NONE) != ErrorStatus.NONE:
            for hook in self._failed_answers:
                _safely(hook, call, answer)


def _safely(hook: object, *args: object) -> None:
    try:
        hook(*args)  # type: ignore[operator]
    except Exception:
        log.exception("an observer's hook failed")

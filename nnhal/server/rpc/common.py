"""What every servicer shares: HAL errors as in-band statuses, never transport errors.

A servicer never lets an exception escape as a gRPC status: a HalError becomes
the response's ``status`` + ``message`` (``wire.status_to``); anything else is a
server bug, logged and reported as GENERAL_FAILURE so that the server and the
caller survive it.

Long-lived calls — an open ``configureExecutionBurst`` stream, a
``getExecutionInfo(wait=True)`` waiting for its fence, a preparation stream from its
launch to its notify — last as long as the client likes (or its model takes). A fence
wait (and a same-host fast burst) holds a worker thread all that time, a preparation
while it works; an idle burst stream or a parked preparation holds none (they wait on
the server's event loop, ``sync_handlers``) but still holds memory and a scheduler
record. So they are capped (``LongCalls``): per client and in total, leaving worker
threads for executions, stats and releases whatever one client does. Past a cap the
call is refused at once with RESOURCE_EXHAUSTED_TRANSIENT naming the cap.

Every answer with an in-band status is counted in the server's metrics
(``Metrics.rpc``, by method and status) here: ``guarded`` counts unary answers,
``launch_then_notify`` the notify of a stream (and times launched work). Work
launched through ``launch_then_notify`` is counted by the lifecycle from launch
to notify, and refused with DEVICE_UNAVAILABLE while the server drains.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, Protocol, TypeVar

import grpc

from nnhal.core import wire
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError, ResourceExhaustedTransient
from nnhal.core.types import PoolData
from nnhal.proto import service_pb2 as spb
from nnhal.server import call_log
from nnhal.server.driver import DeviceConfig, Driver
from nnhal.server.lifecycle import Lifecycle
from nnhal.server.metrics import Metrics
from nnhal.server.rpc import faults as injected
from nnhal.server.rpc.faults import FAULTABLE, FaultPlan

log = logging.getLogger(__name__)

M = TypeVar("M")
E = TypeVar("E")


ENVELOPE_BYTES = wire.ENVELOPE_BYTES


class HasOutputPools(Protocol):
    @property
    def output_pools(self) -> dict[int, PoolData]: ...


R = TypeVar("R", bound=HasOutputPools)


def within_message_limit(result: R, refuse: Callable[[ErrorStatus, str], R]) -> R:
    """``result`` (an ExecutionResult or FencedExecutionInfo), or — when its output pools
    would not fit one gRPC message with room for the envelope (:data:`ENVELOPE_BYTES`), so
    the client would get a transport error instead of an answer — ``refuse(INVALID_ARGUMENT,
    why)``. Measured on the canonical result (lengths of bytes, free), not the message
    (``ByteSize`` serializes it: 135 ms for 64 MiB)."""
    size = sum(len(data) for data in result.output_pools.values())
    limit = wire.max_inline_bytes()
    if size <= limit:
        return result
    return refuse(
        ErrorStatus.INVALID_ARGUMENT,
        f"the answer would carry {size} bytes of output pools; at most {limit} travel inline in one "
        "message (use shared memory for larger outputs)",
    )


def once(fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` run at most once, by whichever thread calls first (a stream's end is seen both
    by its generator's ``finally`` and by gRPC's termination callback)."""
    lock = threading.Lock()
    done = False

    def run() -> None:
        nonlocal done
        with lock:
            if done:
                return
            done = True
        fn()

    return run


class Job(Protocol):
    def close(self) -> None: ...


class Servicer(Protocol):
    metrics: Metrics
    faults: FaultPlan


#: Counts a launched call's answer: its HAL status and (when launched) its duration in s.
Record = Callable[[int, "float | None"], None]


def recorder(metrics: Metrics, method: str, observe: Callable[[float], None] | None = None) -> Record:
    """A ``Record`` counting answers of ``method`` and timing launched ones with ``observe``."""

    def record(status: int, seconds: float | None) -> None:
        metrics.rpc(method, status)
        if seconds is not None and observe is not None:
            observe(seconds)

    return record


J = TypeVar("J", bound=Job)


def failure(err: Exception, where: str) -> tuple[ErrorStatus, str]:
    """The in-band status of ``err``: a HalError's own; anything else is logged (call this
    inside the ``except`` block) and becomes GENERAL_FAILURE."""
    if isinstance(err, HalError):
        return err.error_status, err.message
    log.exception("unexpected error %s", where)
    return ErrorStatus.GENERAL_FAILURE, f"internal error: {err!r}"


def guarded(make: Callable[[], M]) -> Callable[[Callable[..., M]], Callable[..., M]]:
    """Turn HalErrors (and bugs) of a unary handler into an in-band status of a fresh ``make()``."""

    def wrap(fn: Callable[..., M]) -> Callable[..., M]:
        name = fn.__name__
        faultable = name in FAULTABLE

        def handler(self: Servicer, request: Any, context: grpc.ServicerContext) -> M:
            fault = self.faults.take(name) if faultable and self.faults.armed else None
            error = injected.at_start(fault, context)  # an abort raises, outside the try below
            try:
                if error is not None:
                    raise error
                msg = fn(self, request, context)
            except Exception as err:
                msg = wire.status_to(make(), *failure(err, f"in {name}"))
            injected.before_reply(fault, context)
            self.metrics.rpc(name, getattr(msg, "status", 0))
            call_log.failed(name, getattr(msg, "status", 0), getattr(msg, "message", ""))
            return msg

        handler.__name__ = fn.__name__
        return handler

    return wrap


def launch_then_notify(
    event: Callable[..., E],
    notify: Callable[[], Any],
    launch: Callable[[], J],
    run: Callable[[J], Any],
    what: str,
    lifecycle: Lifecycle,
    record: Record,
    context: grpc.ServicerContext | None = None,
    fault: injected.Fault | None = None,
) -> Iterator[E]:
    """An asynchronous HAL call as a server stream (DESIGN.md §2): ``event(launch=…)`` with
    the launch status, then exactly one ``event(notify=…)``, whatever happens. A launch
    error is followed by a ``notify()`` message with the same status; otherwise the notify
    is ``run(job)``, or its failure as a status. ``lifecycle`` counts the work from launch
    to notify and refuses it while draining (DEVICE_UNAVAILABLE, as a launch error);
    ``record`` gets the notify's status, and the time since launch when the launch succeeded.

    The job is closed (and the work uncounted) exactly once on every path. When the
    stream ends between the two messages (cancel, deadline, the client's death, the
    server's stop) gRPC never resumes the generator: ``context``'s termination callback
    then closes the job at once, and the generator's ``finally`` (run when it is
    collected) finds nothing left to do; without a ``context`` that ``finally`` alone does it.

    ``fault`` (``nnhal.server.rpc.faults``), taken by the caller for this call, is applied
    at its points: an injected error as the launch error, an abort before or after the
    launch message, an exit after it or before the notify, a stall before the notify."""
    t0 = time.perf_counter()
    counted = False
    error = injected.at_start(fault, context)  # an abort raises: nothing was launched
    try:
        if error is not None:
            raise error
        lifecycle.enter(what)
        counted = True
        job = launch()
    except Exception as err:
        if counted:
            lifecycle.leave()
        status, message = failure(err, f"launching {what}")
        record(status, None)
        call_log.failed(what, status, message)
        yield event(launch=wire.status_to(spb.StatusMessage(), status, message))
        yield event(notify=wire.status_to(notify(), status, message))
        return

    def finish() -> None:
        try:
            job.close()
        finally:
            lifecycle.leave()

    end = once(finish)
    # "parked": suspended at the launch message, the job held by no thread; "running": the
    # generator resumed; "abandoned": the stream ended while parked and the job was closed.
    state = ["parked"]
    lock = threading.Lock()

    def on_termination() -> None:
        with lock:
            if state[0] != "parked":
                return
            state[0] = "abandoned"
        end()

    try:
        if context is not None:
            context.add_callback(on_termination)
        yield event(launch=wire.status_to(spb.StatusMessage(), ErrorStatus.NONE, ""))
        with lock:
            if state[0] == "abandoned":
                return
            state[0] = "running"
        injected.after_message(fault, 1, context)  # an abort raises: the finally ends the job
        try:
            result = run(job)
        except Exception as err:
            result = wire.status_to(notify(), *failure(err, f"during {what}"))
        injected.before_reply(fault, context)
        record(result.status, time.perf_counter() - t0)
        call_log.failed(what, result.status, result.message)
        yield event(notify=result)
    finally:
        end()


# -- long-lived calls ---------------------------------------------------------------
#: Defaults of the caps (``DeviceConfig`` fields of the same names override them).
MAX_BURSTS_PER_CLIENT = 16
MAX_FENCE_WAITS_PER_CLIENT = 16
MAX_PREPARATIONS_PER_CLIENT = 16
#: Worker threads kept free of long-lived calls and queued executions: stats, releases
#: and buffer copies always find one (health checks and sessions need none: they are
#: coroutines on the server's loop).
RESERVED_THREADS = 16
#: The total cap is never below this, however the thread budget is configured.
_MIN_TOTAL = 8
#: The server's ``max_threads`` when the config does not say (serve.ServerOptions' default).
_DEFAULT_MAX_THREADS = 256


def default_long_call_total(config: DeviceConfig) -> int:
    """The total cap on long-lived calls when none is configured: the worker threads
    (``max_threads``) minus those admitted executions may hold while queued or running
    (``slots + queue_depth``), minus :data:`RESERVED_THREADS`; at least 8. Sessions are
    not counted: a session stream holds no worker thread."""
    threads = int(getattr(config, "max_threads", _DEFAULT_MAX_THREADS))
    busy = config.slots + config.queue_depth + RESERVED_THREADS
    return max(_MIN_TOTAL, threads - busy)


class LongCalls:
    """Counts of long-lived calls by kind and client, capped. Thread-safe; its lock is a leaf.

    ``per_client``: kind -> cap for one client (a session, or for a burst stream the
    connection that opened it: its session is only named by its first request, which an
    idle stream never sends). ``total``: cap over every kind and client."""

    def __init__(self, per_client: dict[str, int], total: int) -> None:
        self.per_client = dict(per_client)
        self.total = max(1, total)
        self._lock = threading.Lock()
        self._held: dict[tuple[str, str], int] = {}
        self._all = 0

    @classmethod
    def of(cls, config: DeviceConfig) -> LongCalls:
        per_client = {
            "burst": int(getattr(config, "max_bursts_per_session", MAX_BURSTS_PER_CLIENT)),
            # An open executeStreamed holds a thread as a burst does, and is capped alike.
            "streamed execution": int(getattr(config, "max_bursts_per_session", MAX_BURSTS_PER_CLIENT)),
            "fence wait": int(getattr(config, "max_fence_waits_per_session", MAX_FENCE_WAITS_PER_CLIENT)),
            "preparation": int(getattr(config, "max_preparations_per_session", MAX_PREPARATIONS_PER_CLIENT)),
        }
        total = int(getattr(config, "max_long_calls", 0)) or default_long_call_total(config)
        return cls(per_client, total)

    @property
    def in_progress(self) -> int:
        with self._lock:
            return self._all

    def held(self, kind: str, client: str) -> int:
        with self._lock:
            return self._held.get((kind, client), 0)

    def enter(self, kind: str, client: str) -> None:
        """Count one call; RESOURCE_EXHAUSTED_TRANSIENT (naming the cap) past a cap."""
        cap = self.per_client[kind]
        with self._lock:
            mine = self._held.get((kind, client), 0)
            if mine >= cap:
                raise ResourceExhaustedTransient(
                    f"this client already has {mine} {kind}s in progress (the cap per client is {cap}); "
                    "end one first, or retry later"
                )
            if self._all >= self.total:
                raise ResourceExhaustedTransient(
                    f"the server already has {self._all} bursts, fence waits and preparations in progress (the "
                    f"cap is {self.total}, so that other calls always find a thread); retry later"
                )
            self._held[(kind, client)] = mine + 1
            self._all += 1

    def leave(self, kind: str, client: str) -> None:
        with self._lock:
            left = self._held.get((kind, client), 0) - 1
            if left > 0:
                self._held[(kind, client)] = left
            else:
                self._held.pop((kind, client), None)  # nothing is kept for a client holding none
            self._all -= 1

    @contextmanager
    def holding(self, kind: str, client: str) -> Iterator[None]:
        """``enter`` / ``leave`` around a block."""
        self.enter(kind, client)
        try:
            yield
        finally:
            self.leave(kind, client)


class Held(Generic[J]):
    """A launched job holding a place among the long-lived calls until it is closed."""

    def __init__(self, job: J, release: Callable[[], None]) -> None:
        self.job = job
        self._release = once(release)

    def close(self) -> None:
        try:
            self.job.close()
        finally:
            self._release()


def held(calls: LongCalls, kind: str, client: str, launch: Callable[[], J]) -> Held[J]:
    """``launch()`` counted as a long-lived call of ``kind`` until the result is closed
    (RESOURCE_EXHAUSTED_TRANSIENT past a cap, before launching anything)."""
    calls.enter(kind, client)
    try:
        job = launch()
    except BaseException:
        calls.leave(kind, client)
        raise
    return Held(job, lambda: calls.leave(kind, client))


_LONG_CALLS: weakref.WeakKeyDictionary[Driver, LongCalls] = weakref.WeakKeyDictionary()
_LONG_CALLS_LOCK = threading.Lock()


def long_calls(driver: Driver) -> LongCalls:
    """The one ``LongCalls`` of ``driver``, shared by its servicers (the total cap spans them)."""
    with _LONG_CALLS_LOCK:
        calls = _LONG_CALLS.get(driver)
        if calls is None:
            calls = _LONG_CALLS[driver] = LongCalls.of(driver.config)
        return calls

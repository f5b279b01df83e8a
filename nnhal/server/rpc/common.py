"""What every servicer shares: HAL errors as in-band statuses, never transport errors.

A servicer never lets an exception escape as a gRPC status: a HalError becomes
the response's ``status`` + ``message`` (``wire.status_to``); anything else is a
server bug, logged and reported as GENERAL_FAILURE so that the server and the
caller survive it.

Every answer with an in-band status is counted in the server's metrics
(``Metrics.rpc``, by method and status) here: ``guarded`` counts unary answers,
``launch_then_notify`` the notify of a stream (and times launched work). Work
launched through ``launch_then_notify`` is counted by the lifecycle from launch
to notify, and refused with DEVICE_UNAVAILABLE while the server drains.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import grpc

from nnhal.core import wire
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.proto import service_pb2 as spb
from nnhal.server.lifecycle import Lifecycle
from nnhal.server.metrics import Metrics

log = logging.getLogger(__name__)

M = TypeVar("M")
E = TypeVar("E")


class Job(Protocol):
    def close(self) -> None: ...


class Servicer(Protocol):
    metrics: Metrics


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
        def handler(self: Servicer, request: Any, context: grpc.ServicerContext) -> M:
            try:
                msg = fn(self, request, context)
            except Exception as err:
                msg = wire.status_to(make(), *failure(err, f"in {fn.__name__}"))
            self.metrics.rpc(fn.__name__, getattr(msg, "status", 0))
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
) -> Iterator[E]:
    """An asynchronous HAL call as a server stream (DESIGN.md §2): ``event(launch=…)`` with
    the launch status, then exactly one ``event(notify=…)``, whatever happens. A launch
    error is followed by a ``notify()`` message with the same status; otherwise the notify
    is ``run(job)``, or its failure as a status. The job is closed on every path, also
    when the client cancels the stream between the two messages (the generator is closed
    at its first ``yield``). ``lifecycle`` counts the work from launch to notify and
    refuses it while draining (DEVICE_UNAVAILABLE, as a launch error); ``record``
    gets the notify's status, and the time since launch when the launch succeeded."""
    t0 = time.perf_counter()
    counted = False
    try:
        lifecycle.enter(what)
        counted = True
        job = launch()
    except Exception as err:
        if counted:
            lifecycle.leave()
        status, message = failure(err, f"launching {what}")
        record(status, None)
        yield event(launch=wire.status_to(spb.StatusMessage(), status, message))
        yield event(notify=wire.status_to(notify(), status, message))
        return
    try:
        yield event(launch=wire.status_to(spb.StatusMessage(), ErrorStatus.NONE, ""))
        try:
            result = run(job)
        except Exception as err:
            result = wire.status_to(notify(), *failure(err, f"during {what}"))
        record(result.status, time.perf_counter() - t0)
        yield event(notify=result)
    finally:
        job.close()
        lifecycle.leave()

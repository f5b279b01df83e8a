"""What every servicer shares: HAL errors as in-band statuses, never transport errors.

A servicer never lets an exception escape as a gRPC status: a HalError becomes
the response's ``status`` + ``message`` (``wire.status_to``); anything else is a
server bug, logged and reported as GENERAL_FAILURE so that the server and the
caller survive it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import grpc

from nnhal.core import wire
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.proto import service_pb2 as spb

log = logging.getLogger(__name__)

M = TypeVar("M")
E = TypeVar("E")


class Job(Protocol):
    def close(self) -> None: ...


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
        def handler(self: Any, request: Any, context: grpc.ServicerContext) -> M:
            try:
                return fn(self, request, context)
            except Exception as err:
                return wire.status_to(make(), *failure(err, f"in {fn.__name__}"))  # type: ignore[no-any-return]

        handler.__name__ = fn.__name__
        return handler

    return wrap


def launch_then_notify(
    event: Callable[..., E],
    notify: Callable[[], Any],
    launch: Callable[[], J],
    run: Callable[[J], Any],
    what: str,
) -> Iterator[E]:
    """An asynchronous HAL call as a server stream (DESIGN.md §2): ``event(launch=…)`` with
    the launch status, then exactly one ``event(notify=…)``, whatever happens. A launch
    error is followed by a ``notify()`` message with the same status; otherwise the notify
    is ``run(job)``, or its failure as a status. The job is closed on every path, also
    when the client cancels the stream between the two messages (the generator is closed
    at its first ``yield``)."""
    try:
        job = launch()
    except Exception as err:
        status, message = failure(err, f"launching {what}")
        yield event(launch=wire.status_to(spb.StatusMessage(), status, message))
        yield event(notify=wire.status_to(notify(), status, message))
        return
    try:
        yield event(launch=wire.status_to(spb.StatusMessage(), ErrorStatus.NONE, ""))
        try:
            result = run(job)
        except Exception as err:
            result = wire.status_to(notify(), *failure(err, f"during {what}"))
        yield event(notify=result)
    finally:
        job.close()

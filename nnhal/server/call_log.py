"""One log line per failed HAL call: its method, status and message (and, through the
request-id filter, the call's request id), so that a client's request id finds it in the log.

The calls the executions owner answers are logged by :class:`CallLog`, an observer of the
owner (``Executions.observe``) told of each answer on the call's own thread; the unary
answers the servicers make themselves call :func:`failed`.

Statuses a client causes or must expect (INVALID_ARGUMENT, OUTPUT_INSUFFICIENT_SIZE, the
missed deadlines) are INFO; those that say the server is in trouble or shedding work
(GENERAL_FAILURE, DEVICE_UNAVAILABLE, DEAD_OBJECT, the resource exhaustions) are WARNING,
which the server's log handler rate-limits (``log_limits``). A success logs nothing.
"""

from __future__ import annotations

import logging

from nnhal.core.enums import ErrorStatus
from nnhal.server.executions.hooks import Call, Observer

log = logging.getLogger("nnhal.calls")

#: Statuses logged as WARNING; every other failure is INFO.
WARNING_STATUSES = frozenset(
    {
        ErrorStatus.GENERAL_FAILURE,
        ErrorStatus.DEVICE_UNAVAILABLE,
        ErrorStatus.DEAD_OBJECT,
        ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
        ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT,
    }
)


def failed(method: str, status: int, message: str) -> None:
    """Log the answer ``status`` / ``message`` of ``method`` when it is a failure."""
    if status == ErrorStatus.NONE:
        return
    try:
        name = ErrorStatus(status).name
    except ValueError:
        name = str(status)
    level = logging.WARNING if status in WARNING_STATUSES else logging.INFO
    log.log(level, "%s failed: %s: %s", method, name, message, extra={"status": name, "method": method})


class CallLog(Observer):
    """Logs each failed call the owner answers (an answer without a status, a ``Prepared``,
    is a success). It reads a call's method, never its arguments, and wants only failures."""

    reads_args = False
    failures_only = True

    def answered(self, call: Call, answer: object) -> None:
        failed(call.method, int(getattr(answer, "status", ErrorStatus.NONE)), str(getattr(answer, "message", "")))

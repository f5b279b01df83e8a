"""One vocabulary for refusals: a call that gets no answer of its own gets a :class:`Refused`.

A refusal is raised as a ``HalError`` (``nnhal.core.errors``: one class per ErrorStatus)
wherever it is found, and turned into a :class:`Refused` — a status and a message — in one
place, :meth:`Refused.of`: a HalError's own status; an allocation that failed
(``core.errors.allocation_failed``) RESOURCE_EXHAUSTED_TRANSIENT; anything else is a server bug, logged
with its traceback and answered GENERAL_FAILURE, so that the server and the caller
survive it. The transports put a ``Refused`` into their answer's in-band status; the
canonical answers of a refusal are :meth:`Refused.result` (an ExecutionResult) and
:meth:`Refused.info` (a FencedExecutionInfo).

An answer whose output pools would not fit one transport message is refused too
(:func:`within_limit`): INVALID_ARGUMENT, so that the client gets a status instead of a
transport error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import overload

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError, allocation_failed
from nnhal.core.types import ExecutionResult, FencedExecutionInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Refused:
    """The status (never NONE) and message of a call refused or failed."""

    status: ErrorStatus
    message: str

    @classmethod
    def of(cls, err: BaseException, where: str) -> Refused:
        """The refusal ``err`` stands for; a bug (not a HalError) is logged — call this inside
        the ``except`` block — and is GENERAL_FAILURE."""
        if isinstance(err, HalError):
            return cls(err.error_status, err.message)
        if allocation_failed(err):
            log.warning("out of memory %s: %s", where, err)
            return cls(ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT, f"the server ran out of memory {where}: {err}")
        log.exception("unexpected error %s", where)
        return cls(ErrorStatus.GENERAL_FAILURE, f"internal error: {err!r}")

    def result(self) -> ExecutionResult:
        return ExecutionResult(self.status, self.message)

    def info(self) -> FencedExecutionInfo:
        return FencedExecutionInfo(True, self.status, self.message)


@overload
def within_limit(answer: ExecutionResult, limit: int) -> ExecutionResult: ...
@overload
def within_limit(answer: FencedExecutionInfo, limit: int) -> FencedExecutionInfo: ...
def within_limit(answer: ExecutionResult | FencedExecutionInfo, limit: int) -> ExecutionResult | FencedExecutionInfo:
    """``answer``, or — when its output pools carry more than ``limit`` bytes — its
    INVALID_ARGUMENT refusal. Measured on the canonical answer (lengths of bytes, free),
    not on a message."""
    size = sum(map(len, answer.output_pools.values()))
    if size <= limit:
        return answer
    refused = Refused(
        ErrorStatus.INVALID_ARGUMENT,
        f"the answer would carry {size} bytes of output pools; at most {limit} travel inline in one "
        "message (use shared memory for larger outputs)",
    )
    if isinstance(answer, FencedExecutionInfo):
        return refused.info()
    return refused.result()

"""Protobuf <-> canonical statuses: the ``status`` + ``message`` pair every response carries.

Part of the ``wire`` family (:mod:`nnhal.core.wire` states its contract), with its one
exception: a status never carries DEAD_OBJECT out (GENERAL_FAILURE instead), and an unknown
number or DEAD_OBJECT reads as GENERAL_FAILURE. Stateless.
"""

from __future__ import annotations

from typing import Any

from nnhal.core.enums import ErrorStatus

_STATUSES = {int(s): s for s in ErrorStatus if s != ErrorStatus.DEAD_OBJECT}


def error_status_from(value: int) -> ErrorStatus:
    """An unknown status number reads as GENERAL_FAILURE (a newer peer's code), and so does
    DEAD_OBJECT: it is the client's own verdict on a vanished server, never a peer's answer."""
    return _STATUSES.get(value, ErrorStatus.GENERAL_FAILURE)


def error_status_to(status: ErrorStatus) -> int:
    """DEAD_OBJECT is the client's verdict on a vanished server; a server that answers is
    not dead, so it never sends that code (GENERAL_FAILURE instead)."""
    return int(ErrorStatus.GENERAL_FAILURE if status == ErrorStatus.DEAD_OBJECT else status)


def status_to(msg: Any, status: ErrorStatus, message: str) -> Any:
    """Fill the ``status`` + ``message`` pair every response carries; returns ``msg``."""
    msg.status = error_status_to(status)
    msg.message = message
    return msg


def status_from(msg: Any) -> tuple[ErrorStatus, str]:
    return error_status_from(msg.status), str(msg.message)

"""Protobuf <-> deadlines: a deadline travels as the time remaining when it is sent and comes
back on this host's monotonic clock.

Part of the ``wire`` family (:mod:`nnhal.core.wire` states its contract). Stateless.
"""

from __future__ import annotations

import math
import time

from nnhal.core.errors import InvalidArgument
from nnhal.proto import types_pb2 as pb

_UINT64_MAX = (1 << 64) - 1


def deadline_to(remaining_s: float | None, msg: pb.Deadline) -> None:
    """A deadline travels as the time remaining when the request is sent (no deadline:
    the message stays unset). The remainder saturates to the field's range: negative ones
    travel as 0 (already passed), ones beyond uint64 ns (~584 years, or infinite) as its maximum.
    Raises InvalidArgument for NaN."""
    if remaining_s is None:
        return
    ns = remaining_ns(remaining_s)
    msg.has_deadline = True
    msg.remaining_ns = ns


def remaining_ns(remaining_s: float) -> int:
    """The ``Deadline.remaining_ns`` of a deadline ``remaining_s`` seconds away (saturated as
    :func:`deadline_to` says). Raises InvalidArgument for NaN."""
    if math.isnan(remaining_s):
        raise InvalidArgument("the deadline is not a number (NaN)")
    ns = remaining_s * 1e9
    return 0 if ns <= 0 else _UINT64_MAX if ns >= _UINT64_MAX else int(ns)


def deadline_from(msg: pb.Deadline) -> int | None:
    """The deadline re-based on this host's monotonic clock (ns), None for none."""
    if not msg.has_deadline:
        return None
    return time.monotonic_ns() + msg.remaining_ns

"""Injected faults on the wire: ``setFaults``' ``InjectedFault`` messages checked into
``Fault`` values, and an ``abort`` fault's gRPC status.

The plan and the points where faults apply are the owner's
(``nnhal.server.executions.faults``, whose docstring says what each kind does).
"""

from __future__ import annotations

import grpc

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import InvalidArgument
from nnhal.proto import service_pb2 as spb
from nnhal.server.executions.faults import (
    BURST as BURST,
    FAULTABLE as FAULTABLE,
    KINDS as KINDS,
    MAX_STALL_MS as MAX_STALL_MS,
    POINTS as POINTS,
    STREAMS as STREAMS,
    Abort,
    Fault as Fault,
    FaultPlan as FaultPlan,
)

_KIND_OF = {
    spb.InjectedFault.ERROR: "error",
    spb.InjectedFault.ABORT: "abort",
    spb.InjectedFault.STALL: "stall",
    spb.InjectedFault.EXIT: "exit",
}
_POINT_OF = {
    spb.InjectedFault.POINT_UNSPECIFIED: "start",
    spb.InjectedFault.START: "start",
    spb.InjectedFault.AFTER_LAUNCH: "after_launch",
    spb.InjectedFault.BEFORE_REPLY: "before_reply",
}
_GRPC_CODES = {code.value[0]: code for code in grpc.StatusCode if code is not grpc.StatusCode.OK}


def fault_from(msg: spb.InjectedFault) -> Fault:
    """The Fault ``msg`` asks for; INVALID_ARGUMENT saying what is wrong with it."""
    method = msg.method
    if method not in FAULTABLE:
        raise InvalidArgument(f"setFaults: method {method!r} cannot be faulted; one of {', '.join(sorted(FAULTABLE))}")
    kind = _KIND_OF.get(msg.kind)
    if kind is None:
        raise InvalidArgument(f"setFaults: fault kind {int(msg.kind)} is invalid; one of {', '.join(KINDS)}")
    stream = method in STREAMS
    if kind == "error":
        try:
            status = ErrorStatus(msg.status)
        except ValueError:
            raise InvalidArgument(f"setFaults: error status {int(msg.status)} is not an ErrorStatus") from None
        if status == ErrorStatus.NONE:
            raise InvalidArgument("setFaults: an injected error needs a status other than NONE")
        return Fault(method, kind, msg.count, status=status, message=msg.message)
    if kind == "abort":
        code = msg.grpc_code or grpc.StatusCode.UNAVAILABLE.value[0]
        if code not in _GRPC_CODES:
            raise InvalidArgument(f"setFaults: gRPC code {msg.grpc_code} is not a failure code (1-16)")
        most = None if method == BURST else (1 if stream else 0)
        if most is not None and msg.after_messages > most:
            raise InvalidArgument(
                f"setFaults: {method} can be aborted after at most {most} message(s), not {msg.after_messages}"
            )
        return Fault(method, kind, msg.count, message=msg.message, grpc_code=code, after=msg.after_messages)
    if kind == "stall":
        if not 0 < msg.stall_ms <= MAX_STALL_MS:
            raise InvalidArgument(f"setFaults: a stall takes 1 to {MAX_STALL_MS} ms, not {msg.stall_ms}")
        return Fault(method, kind, msg.count, stall_ms=msg.stall_ms)
    point = _POINT_OF.get(msg.point)
    if point is None:
        raise InvalidArgument(f"setFaults: exit point {int(msg.point)} is invalid; one of {', '.join(POINTS)}")
    if point == "after_launch" and not stream:
        raise InvalidArgument(f"setFaults: {method} has no launch; exit at start or before_reply")
    if msg.exit_code > 255:
        raise InvalidArgument(f"setFaults: an exit status is 0-255, not {msg.exit_code}")
    return Fault(method, kind, msg.count, point=point, exit_code=msg.exit_code)


def abort_status(abort: Abort) -> tuple[grpc.StatusCode, str]:
    """The gRPC status an injected abort ends its call with (a coroutine awaits
    ``context.abort(*abort_status(abort))``)."""
    return _GRPC_CODES[abort.code], abort.details

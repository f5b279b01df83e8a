"""Faults injected on purpose, so users can test their NNAPI clients' error paths (``--enable-fault-injection``).

``setFaults`` adds :class:`Fault` values to the server's one :class:`FaultPlan` (shared by
every session; ``clear`` empties it). A fault names an RPC method (:data:`FAULTABLE`) and
applies to its next ``count`` calls (0: every call until cleared); the faults of one
method are used in the order they were set. Each call takes at most one fault, when it
arrives (:meth:`FaultPlan.take`), and the servicer applies it at its points:

- ``error``: the call answers ``status`` in-band with a message saying it was injected (a
  stream's launch status, then the same notify; a burst's next response).
- ``abort``: the RPC ends with a gRPC status (``grpc_code``, UNAVAILABLE by default: the
  client sees DEAD_OBJECT) after ``after`` messages — 0: at once; 1 on ``prepareModel*`` /
  ``execute_1_3``: after the launch status; K on ``configureExecutionBurst``: after K
  responses (the fault is taken when the burst stream opens). The work launched is ended.
- ``stall``: the answer (a stream's notify, a reply, a burst response) is held ``stall_ms``
  once the work is done (less when the caller goes away meanwhile).
- ``exit``: the process ends with ``os._exit(exit_code)`` at ``point``: ``start`` (the call
  arrived), ``after_launch`` (streams: the launch status was sent), ``before_reply`` (the
  work is done, its notify or reply not sent).

Every injection is logged (WARNING, with the call's request id). The plan costs a call one
attribute read while it is empty (:attr:`FaultPlan.armed`). Its lock is a leaf.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Collection

import grpc

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError, InvalidArgument
from nnhal.core.faults import Fault as Fault  # the one fault description, kept here for the servicers
from nnhal.proto import service_pb2 as spb
from nnhal.server.driver import Driver

log = logging.getLogger(__name__)

#: The asynchronous calls: a launch status, then one notify.
STREAMS = frozenset({"prepareModel_1_3", "prepareModelFromCache_1_3", "execute_1_3"})
BURST = "configureExecutionBurst"
#: Every method a fault may name. Not openSession, getStatus, getStats, setFaults (faults
#: must stay clearable) nor the two ``release`` RPCs (one name for two services).
FAULTABLE = frozenset(
    {
        *STREAMS,
        BURST,
        "executeSynchronously_1_3",
        "executeFenced",
        "getExecutionInfo",
        "allocate",
        "copyTo",
        "copyFrom",
        "getCapabilities_1_3",
        "getSupportedOperations_1_3",
        "getVersionString",
        "getType",
        "getSupportedExtensions",
        "getNumberOfCacheFilesNeeded",
    }
)
KINDS = ("error", "abort", "stall", "exit")
POINTS = ("start", "after_launch", "before_reply")
#: A stall is at most this long (a fault must not hold a worker thread for ever).
MAX_STALL_MS = 600_000
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
#: A stall looks this often whether its caller is still there.
_STALL_SLICE_S = 0.05


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
        code = _GRPC_CODES.get(msg.grpc_code or grpc.StatusCode.UNAVAILABLE.value[0])
        if code is None:
            raise InvalidArgument(f"setFaults: gRPC code {msg.grpc_code} is not a failure code (1-16)")
        most = None if method == BURST else (1 if stream else 0)
        if most is not None and msg.after_messages > most:
            raise InvalidArgument(
                f"setFaults: {method} can be aborted after at most {most} message(s), not {msg.after_messages}"
            )
        return Fault(method, kind, msg.count, message=msg.message, grpc_code=code.name, after=msg.after_messages)
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


class _Entry:
    __slots__ = ("fault", "left")

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.left = fault.count or None  # None: until cleared


class FaultPlan:
    """The server's injected faults. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[_Entry] = []
        #: False while no fault is set: the calls' one check, read without the lock.
        self.armed = False

    def add(self, faults: Collection[Fault]) -> None:
        with self._lock:
            self._entries.extend(_Entry(f) for f in faults)
            self.armed = bool(self._entries)
        for f in faults:
            calls = f"the next {f.count} call(s)" if f.count else "every call"
            log.warning("fault set: %s for %s", f.describe(), calls)

    def clear(self) -> None:
        with self._lock:
            had = len(self._entries)
            self._entries.clear()
            self.armed = False
        if had:
            log.warning("faults cleared (%d)", had)

    def pending(self) -> list[Fault]:
        with self._lock:
            return [e.fault for e in self._entries]

    def take(self, method: str, kinds: Collection[str] = KINDS) -> Fault | None:
        """The fault for this call of ``method`` (of one of ``kinds``), counted; None mostly."""
        if not self.armed:
            return None
        with self._lock:
            for i, entry in enumerate(self._entries):
                if entry.fault.method != method or entry.fault.kind not in kinds:
                    continue
                if entry.left is not None:
                    entry.left -= 1
                    if entry.left <= 0:
                        del self._entries[i]
                        self.armed = bool(self._entries)
                fault = entry.fault
                break
            else:
                return None
        log.warning("injecting fault: %s", fault.describe())
        return fault


def exit_now(fault: Fault) -> None:
    """End the process as the ``exit`` fault says, its log lines written first."""
    log.warning("injected fault: exiting with status %d (%s)", fault.exit_code, fault.describe())
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(fault.exit_code)


def at_start(fault: Fault | None, context: grpc.ServicerContext | None) -> HalError | None:
    """Apply ``fault`` as the call arrives: exit, abort (raises gRPC's abort), or the
    HalError the call must answer (``error``); None to go on."""
    if fault is None:
        return None
    if fault.kind == "exit" and fault.point == "start":
        exit_now(fault)
    if fault.kind == "error":
        return fault.hal_error()
    if fault.kind == "abort" and fault.after == 0:
        abort(fault, context)
    return None


def after_message(fault: Fault | None, sent: int, context: grpc.ServicerContext | None) -> None:
    """Apply ``fault`` once ``sent`` messages went out: abort after its count, exit after the launch."""
    if fault is None:
        return
    if fault.kind == "abort" and fault.after == sent:
        abort(fault, context)
    if fault.kind == "exit" and fault.point == "after_launch" and sent == 1:
        exit_now(fault)


def before_reply(fault: Fault | None, context: grpc.ServicerContext | None) -> None:
    """Apply ``fault`` when the answer is ready: stall, or exit."""
    if fault is None:
        return
    if fault.kind == "stall":
        end = time.monotonic() + fault.stall_ms / 1000
        while (left := end - time.monotonic()) > 0 and (context is None or context.is_active()):
            time.sleep(min(_STALL_SLICE_S, left))
    elif fault.kind == "exit" and fault.point == "before_reply":
        exit_now(fault)


def abort(fault: Fault, context: grpc.ServicerContext | None) -> None:
    """End the RPC with the fault's gRPC status (raises; gRPC sends the status)."""
    if context is None:
        raise RuntimeError("an abort fault needs the call's context")
    context.abort(*abort_status(fault))


def abort_status(fault: Fault) -> tuple[grpc.StatusCode, str]:
    """The gRPC status an ``abort`` fault ends its RPC with (a coroutine awaits
    ``context.abort(*abort_status(fault))``)."""
    text = f"injected fault: {fault.method} aborted ({fault.grpc_code})"
    return grpc.StatusCode[fault.grpc_code], f"{text}: {fault.message}" if fault.message else text


_PLANS: weakref.WeakKeyDictionary[Driver, FaultPlan] = weakref.WeakKeyDictionary()
_PLANS_LOCK = threading.Lock()


def fault_plan(driver: Driver) -> FaultPlan:
    """The one FaultPlan of ``driver``, shared by its servicers."""
    with _PLANS_LOCK:
        plan = _PLANS.get(driver)
        if plan is None:
            plan = _PLANS[driver] = FaultPlan()
        return plan

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

Seeded schedules (``--fault-seed S``, with ``--enable-fault-injection``): the plan also
injects faults of its own into calls that carry a fault scope (``nnhal.core.fault_scope``;
:data:`CALL_SCOPE`, set when the call arrives). A call of a method in :data:`SEEDED` whose
scope has no set fault to take draws one from (S, the scope's label, the method, the call's
ordinal among that method's calls in this run of the scope) alone (:func:`seeded_fault`):
with probability ``--fault-rate`` an ``error`` fault answering one of
:data:`SEEDED_STATUSES`. Only in-band errors, local to their call: no abort kills the
session, no stall changes another call's timing, so concurrent work cannot change a
decision and a run replays its faults exactly, whatever ``--jobs``. Burst streams are not
seeded (their executions share one call). Calls without a scope are never seeded.

Every injection is logged (WARNING, with the call's request id). The plan costs a call one
attribute read while it is empty and unseeded (:attr:`FaultPlan.armed`). Its lock is a leaf.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Collection
from contextvars import ContextVar
from dataclasses import dataclass

import grpc

from nnhal.core import fault_scope
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError, InvalidArgument
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
#: Methods a seeded schedule may fault: every one but the burst stream.
SEEDED = FAULTABLE - {BURST}
#: The statuses a seeded fault answers (chosen by the same draw): in-band, the call's own.
SEEDED_STATUSES = (
    ErrorStatus.GENERAL_FAILURE,
    ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT,
    ErrorStatus.MISSED_DEADLINE_TRANSIENT,
)
#: Runs of scopes whose call counts are kept (the least recently used are forgotten).
_MAX_SCOPES = 4096
#: The fault scope of the call being served (its metadata value), set as it arrives.
CALL_SCOPE: ContextVar[str | None] = ContextVar("nnhal_fault_scope", default=None)


def note_scope(metadata: Collection[tuple[str, object]]) -> None:
    """Publish the call's fault scope (from its invocation ``metadata``) in :data:`CALL_SCOPE`."""
    for key, value in metadata:
        if key == fault_scope.METADATA_KEY:
            if isinstance(value, str):
                CALL_SCOPE.set(value)
            return


@dataclass(frozen=True)
class Fault:
    """One injected fault (module docstring). Build it with :func:`fault_from`, which checks it."""

    method: str
    kind: str
    count: int = 1
    status: ErrorStatus = ErrorStatus.GENERAL_FAILURE
    message: str = ""
    grpc_code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE
    after: int = 0
    stall_ms: int = 0
    point: str = "start"
    exit_code: int = 1
    #: Who asked for it: ``setFaults``, or ``--fault-seed`` (a seeded schedule).
    origin: str = "setFaults"

    def describe(self) -> str:
        detail = {
            "error": self.status.name,
            "abort": f"{self.grpc_code.name} after {self.after} message(s)",
            "stall": f"{self.stall_ms} ms",
            "exit": f"status {self.exit_code} at {self.point}",
        }[self.kind]
        return f"{self.kind} ({detail}) on {self.method}"

    def error(self) -> HalError:
        """The HalError an ``error`` fault answers."""
        text = f"injected fault: {self.status.name} on {self.method} ({self.origin})"
        return HalError.of(self.status, f"{text}: {self.message}" if self.message else text)


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


class _Entry:
    __slots__ = ("fault", "left")

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.left = fault.count or None  # None: until cleared


def seeded_fault(seed: int, rate: float, label: str, method: str, ordinal: int) -> Fault | None:
    """The fault a seeded schedule gives call ``ordinal`` (from 0) of ``method`` in scope
    ``label``: a function of its arguments alone (SHA-256 of them; module docstring)."""
    digest = hashlib.sha256(f"{seed}\0{label}\0{method}\0{ordinal}".encode()).digest()
    if int.from_bytes(digest[:8], "big") >= rate * 2**64:
        return None
    status = SEEDED_STATUSES[digest[8] % len(SEEDED_STATUSES)]
    why = f"seed {seed}, scope {label}, {method} call {ordinal}"
    return Fault(method, "error", 1, status=status, message=why, origin="--fault-seed")


class FaultPlan:
    """The server's injected faults: those set (``setFaults``) and, with ``seed``, a seeded
    schedule faulting each scoped call with probability ``rate``. Thread-safe."""

    def __init__(self, seed: int | None = None, rate: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._entries: list[_Entry] = []
        self._seed = seed
        self._rate = rate
        #: Calls so far per (scope value, method) of the runs of scopes seen lately.
        self._ordinals: OrderedDict[tuple[str, str], int] = OrderedDict()
        #: False while no fault is set and none is seeded: the calls' one check, read without the lock.
        self.armed = seed is not None

    def _rearm(self) -> None:
        self.armed = bool(self._entries) or self._seed is not None

    def add(self, faults: Collection[Fault]) -> None:
        with self._lock:
            self._entries.extend(_Entry(f) for f in faults)
            self._rearm()
        for f in faults:
            calls = f"the next {f.count} call(s)" if f.count else "every call"
            log.warning("fault set: %s for %s", f.describe(), calls)

    def clear(self) -> None:
        with self._lock:
            had = len(self._entries)
            self._entries.clear()
            self._rearm()
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
                        self._rearm()
                fault = entry.fault
                break
            else:
                seeded = self._seeded(method, kinds)
                if seeded is None:
                    return None
                fault = seeded
        log.warning("injecting fault: %s", fault.describe())
        return fault

    def _seeded(self, method: str, kinds: Collection[str]) -> Fault | None:
        """The seeded schedule's fault for this call (under the lock), counting it in its scope."""
        if self._seed is None or method not in SEEDED or "error" not in kinds:
            return None
        value = CALL_SCOPE.get()
        scope = fault_scope.decode(value) if value else None
        if scope is None:
            return None
        key = (value or "", method)
        ordinal = self._ordinals.pop(key, 0)
        self._ordinals[key] = ordinal + 1
        if len(self._ordinals) > _MAX_SCOPES:
            self._ordinals.popitem(last=False)
        return seeded_fault(self._seed, self._rate, scope[1], method, ordinal)


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
        return fault.error()
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
    text = f"injected fault: {fault.method} aborted ({fault.grpc_code.name})"
    return fault.grpc_code, f"{text}: {fault.message}" if fault.message else text


_PLANS: weakref.WeakKeyDictionary[Driver, FaultPlan] = weakref.WeakKeyDictionary()
_PLANS_LOCK = threading.Lock()


def fault_plan(driver: Driver) -> FaultPlan:
    """The one FaultPlan of ``driver``, shared by its servicers."""
    with _PLANS_LOCK:
        plan = _PLANS.get(driver)
        if plan is None:
            config = driver.config
            seed = config.fault_seed if config.fault_injection else None
            plan = _PLANS[driver] = FaultPlan(seed, config.fault_rate)
        return plan

"""Faults injected on purpose, so users can test their NNAPI clients' error paths (``--enable-fault-injection``).

``setFaults`` adds :class:`Fault` values to the device's one :class:`FaultPlan` (owned by
its ``Executions``, shared by every session; ``clear`` empties it). A fault names a
method (:data:`FAULTABLE`) and applies to its next ``count`` calls (0: every call until
cleared); the faults of one method are used in the order they were set. Each call takes
at most one fault, when it arrives (:meth:`FaultPlan.take`), and the owner applies it at
its points:

- ``error``: the call answers ``status`` in-band with a message saying it was injected (a
  stream's launch status, then the same notify; a burst's next response).
- ``abort``: the call ends with a transport status (``grpc_code``, a gRPC status code
  number, 14 UNAVAILABLE by default: the client sees DEAD_OBJECT) after ``after``
  messages — 0: at once; 1 on a launch / notify stream: after the launch status; K on
  ``configureExecutionBurst``: after K responses (the fault is taken when the burst
  stream opens). The work launched is ended. The owner raises :class:`Abort`; the
  transport ends the call with the code.
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
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.methods import METHOD_LEVEL

log = logging.getLogger(__name__)

#: The 1.3 asynchronous calls: a launch status, then one notify.
STREAMS_1_3 = frozenset({"prepareModel_1_3", "prepareModelFromCache_1_3", "execute_1_3"})
BURST = "configureExecutionBurst"
#: The HIDL / AIDL asynchronous forms: a launch status, then one notify, like the 1.3 ones.
FORM_STREAMS = frozenset(
    {
        "prepareModel",
        "prepareModel_1_1",
        "prepareModel_1_2",
        "prepareModelFromCache",
        "prepareModelWithConfig",
        "execute",
        "execute_1_2",
    }
)
STREAMS = STREAMS_1_3 | FORM_STREAMS
#: The 1.3 methods a fault may name (by their RPC names).
FAULTABLE_1_3 = frozenset(
    {
        *STREAMS_1_3,
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
#: Every method a fault may name: the 1.3 ones and every HAL method form by its HAL name
#: (``nnhal.core.methods``: "getCapabilities_1_1", "AIDL IPreparedModel.executeSynchronously",
#: "IBurst.executeSynchronously" ...). Not openSession, getStatus, getStats, setFaults (faults
#: must stay clearable) nor the ``release`` calls.
FAULTABLE = FAULTABLE_1_3 | (
    frozenset(METHOD_LEVEL)
    # getStatus is never faulted; the other three are the 1.3 RPCs' HAL names (copyTo ...).
    - {"getStatus", "IBuffer.copyTo", "IBuffer.copyFrom", "IFencedExecutionCallback.getExecutionInfo"}
)
KINDS = ("error", "abort", "stall", "exit")
POINTS = ("start", "after_launch", "before_reply")
#: A stall is at most this long (a fault must not hold a worker thread for ever).
MAX_STALL_MS = 600_000
#: gRPC status code numbers, by name (the codes are gRPC's public numbering).
GRPC_CODE_NAMES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)
UNAVAILABLE = 14
#: A stall looks this often whether its caller is still there.
_STALL_SLICE_S = 0.05


class Liveness(Protocol):
    """What the owner asks of the transport's call: whether its caller is still there
    (``grpc.ServicerContext`` and the server's ``SyncContext`` are one)."""

    def is_active(self) -> bool: ...


class Abort(Exception):
    """An injected ``abort``: the transport ends the call with gRPC status ``code`` and
    ``details``. An ``Exception`` raised outside the owner's ``try`` blocks: nothing between
    the abort and the transport catches it."""

    def __init__(self, code: int, details: str) -> None:
        super().__init__(f"{GRPC_CODE_NAMES[code]}: {details}")
        self.code = code
        self.details = details


@dataclass(frozen=True)
class Fault:
    """One injected fault (module docstring). Build it with ``rpc.faults.fault_from``, which checks it."""

    method: str
    kind: str
    count: int = 1
    status: ErrorStatus = ErrorStatus.GENERAL_FAILURE
    message: str = ""
    #: A gRPC status code number (1-16).
    grpc_code: int = UNAVAILABLE
    after: int = 0
    stall_ms: int = 0
    point: str = "start"
    exit_code: int = 1

    def describe(self) -> str:
        detail = {
            "error": self.status.name,
            "abort": f"{GRPC_CODE_NAMES[self.grpc_code]} after {self.after} message(s)",
            "stall": f"{self.stall_ms} ms",
            "exit": f"status {self.exit_code} at {self.point}",
        }[self.kind]
        return f"{self.kind} ({detail}) on {self.method}"

    def error(self) -> HalError:
        """The HalError an ``error`` fault answers."""
        text = f"injected fault: {self.status.name} on {self.method} (setFaults)"
        return HalError.of(self.status, f"{text}: {self.message}" if self.message else text)

    def abort(self) -> Abort:
        """The :class:`Abort` an ``abort`` fault ends its call with."""
        text = f"injected fault: {self.method} aborted ({GRPC_CODE_NAMES[self.grpc_code]})"
        return Abort(self.grpc_code, f"{text}: {self.message}" if self.message else text)


class _Entry:
    __slots__ = ("fault", "left")

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.left = fault.count or None  # None: until cleared


class FaultPlan:
    """A device's injected faults. Thread-safe."""

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


def at_start(fault: Fault | None) -> HalError | None:
    """Apply ``fault`` as the call arrives: exit, abort (raises :class:`Abort`), or the
    HalError the call must answer (``error``); None to go on."""
    if fault is None:
        return None
    if fault.kind == "exit" and fault.point == "start":
        exit_now(fault)
    if fault.kind == "error":
        return fault.error()
    if fault.kind == "abort" and fault.after == 0:
        raise fault.abort()
    return None


def after_message(fault: Fault | None, sent: int) -> None:
    """Apply ``fault`` once ``sent`` messages went out: abort after its count, exit after the launch."""
    if fault is None:
        return
    if fault.kind == "abort" and fault.after == sent:
        raise fault.abort()
    if fault.kind == "exit" and fault.point == "after_launch" and sent == 1:
        exit_now(fault)


def before_reply(fault: Fault | None, live: Liveness | None) -> None:
    """Apply ``fault`` when the answer is ready: stall (while ``live``'s caller is there), or exit."""
    if fault is None:
        return
    if fault.kind == "stall":
        end = time.monotonic() + fault.stall_ms / 1000
        while (left := end - time.monotonic()) > 0 and (live is None or live.is_active()):
            time.sleep(min(_STALL_SLICE_S, left))
    elif fault.kind == "exit" and fault.point == "before_reply":
        exit_now(fault)

"""Faults injected on purpose, so users can test their NNAPI clients' error paths (``--enable-fault-injection``).

``setFaults`` adds :class:`Fault` values to the device's one :class:`FaultPlan` (owned by
its ``Executions``, shared by every session; ``clear`` empties it). A fault names a
method (:data:`FAULTABLE`) and applies to its next ``count`` calls (0: every call until
cleared; an omitted count is 1 on the wire, ``nnhal.core.wire_session``); the faults of
one method are used in the order they were set. Each call takes at most one fault, when
it arrives (:meth:`FaultPlan.take`), and the owner applies it at its points:

- ``error``: the call answers ``status`` in-band with a message saying it was injected (a
  stream's launch status, then the same notify; a burst's next response).
- ``abort``: the call ends with a transport status (``grpc_code``, a gRPC status code
  number 1-16, 14 UNAVAILABLE when omitted: the client sees DEAD_OBJECT; 0 is OK, refused) after ``after``
  messages — 0: at once; 1 on a launch / notify stream: after the launch status; K on
  ``configureExecutionBurst``: after K responses (the fault is taken when the burst
  stream opens). The work launched is ended. The owner raises :class:`Abort`; the
  transport ends the call with the code.
- ``stall``: the answer (a stream's notify, a reply, a burst response) is held ``stall_ms``
  once the work is done (less when the caller goes away meanwhile).
- ``exit``: the process ends with ``os._exit(exit_code)`` at ``point``: ``start`` (the call
  arrived), ``after_launch`` (streams: the launch status was sent), ``before_reply`` (the
  work is done, its notify or reply not sent).

Seeded schedules (``--fault-seed S``, with ``--enable-fault-injection``): the plan also
injects faults of its own into calls that carry a fault scope (``nnhal.core.fault_scope``;
:data:`CALL_SCOPE`, which the transport sets as a call arrives: :func:`note_scope`; the direct
handlers of a device only when its plan is seeded, :attr:`FaultPlan.seeded`). A call
of a method in :data:`SEEDED` that takes no set fault draws one from (S, the scope's label,
the method, the call's ordinal among that method's calls in this run of the scope) alone
(:func:`seeded_fault`): with probability ``--fault-rate`` an ``error`` fault answering one
of :data:`SEEDED_STATUSES`. Only in-band errors, local to their call: no abort kills the
session, no stall changes another call's timing, so concurrent work cannot change a
decision and a run replays its faults exactly, whatever ``--jobs``. A burst stream's
responses are not seeded (they share the stream's one call). Calls without a scope never are.

Every injection is logged (WARNING, with the call's request id). The plan costs a call one
attribute read while it is empty and unseeded (:attr:`FaultPlan.armed`). Its lock is a leaf.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Collection
from contextvars import ContextVar
from typing import Protocol

from nnhal.core import fault_scope
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.faults import (  # the one fault description, shared with the client
    GRPC_CODE_NAMES as GRPC_CODE_NAMES,
    UNAVAILABLE as UNAVAILABLE,
    Fault as Fault,
)
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
#: A stall looks this often whether its caller is still there.
_STALL_SLICE_S = 0.05
#: Methods a seeded schedule may fault: every one but the burst stream's responses.
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


def abort_of(fault: Fault) -> Abort:
    """The :class:`Abort` an ``abort`` fault ends its call with."""
    return Abort(fault.grpc_code, fault.abort_details())


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
    """A device's injected faults: those set (``setFaults``) and, with ``seed``, a seeded
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
        #: Whether a seeded schedule decides by the calls' fault scope (:data:`CALL_SCOPE`): fixed
        #: for the plan's life; a transport that knows its device's plan notes the scope only then.
        self.seeded = seed is not None

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
        if value is None or scope is None:
            return None
        key = (value, method)
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


def at_start(fault: Fault | None) -> HalError | None:
    """Apply ``fault`` as the call arrives: exit, abort (raises :class:`Abort`), or the
    HalError the call must answer (``error``); None to go on."""
    if fault is None:
        return None
    if fault.kind == "exit" and fault.point == "start":
        exit_now(fault)
    if fault.kind == "error":
        return fault.hal_error()
    if fault.kind == "abort" and fault.after == 0:
        raise abort_of(fault)
    return None


def after_message(fault: Fault | None, sent: int) -> None:
    """Apply ``fault`` once ``sent`` messages went out: abort after its count, exit after the launch."""
    if fault is None:
        return
    if fault.kind == "abort" and fault.after == sent:
        raise abort_of(fault)
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

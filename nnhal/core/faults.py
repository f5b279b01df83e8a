"""The description of a fault a server started with ``--enable-fault-injection`` injects on
request, for testing clients — one value both sides use: the client builds it (the
constructors) and sends it with ``setFaults``; the server checks what arrives, keeps it
and applies it (``nnhal.server.rpc.faults``).

Build them with the constructors and hand them to ``Device.inject_faults`` (or the
``nnhal_faults`` pytest fixture)::

    dev.inject_faults(Fault.error("execute_1_3", ErrorStatus.GENERAL_FAILURE))   # next call fails
    dev.inject_faults(Fault.abort("prepareModel_1_3", after=1))      # transport error after launch
    dev.inject_faults(Fault.stall("execute_1_3", ms=500, count=3))    # notify 0.5 s late, 3 times
    dev.inject_faults(Fault.exit("prepareModel_1_3", point="after_launch"))  # the server dies
    dev.clear_faults()

Faults are the server's (every session sees them) and apply to the next ``count`` calls of
the named RPC method (0: every call until cleared), in the order they were set. ``error``
answers the status in-band (a stream's launch status and notify) with a message saying it
was injected (:meth:`Fault.hal_error`); ``abort`` ends the RPC with a gRPC status after
``after`` messages, which the client maps like any transport failure (UNAVAILABLE, the
default: DEAD_OBJECT, and the session is then dead; INTERNAL: GENERAL_FAILURE); ``stall``
holds the answer ``ms``; ``exit`` ends the server process with ``code`` at ``point``
(``start``, ``after_launch`` of a prepare / ``execute_1_3``, ``before_reply``). A fault the
server cannot inject, or any fault on a server without ``--enable-fault-injection``, is
INVALID_ARGUMENT.

The core is transport-free: a gRPC status is its number here (``grpc_code``; the
constructors take its name, a key of :data:`GRPC_CODES`); each side's transport turns the
number into its own status.
"""

from __future__ import annotations

from dataclasses import dataclass

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError

#: gRPC status code names, by number (gRPC's public numbering; checked against grpcio's
#: ``StatusCode`` by a test).
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
#: The gRPC status codes an ``abort`` may end a call with: name -> number (every one but OK).
GRPC_CODES = {name: number for number, name in enumerate(GRPC_CODE_NAMES) if number}
UNAVAILABLE = GRPC_CODES["UNAVAILABLE"]


@dataclass(frozen=True)
class Fault:
    """One fault for the server to inject (module docstring). Clients use the constructors;
    the server builds it from the request it checked."""

    method: str
    kind: str
    count: int = 1
    status: ErrorStatus = ErrorStatus.GENERAL_FAILURE
    message: str = ""
    #: The gRPC status code (number, 1-16) an ``abort`` ends the call with.
    grpc_code: int = UNAVAILABLE
    after: int = 0
    stall_ms: int = 0
    point: str = "start"
    exit_code: int = 1
    #: Who asked for it: ``setFaults``, or ``--fault-seed`` (a server's seeded schedule).
    origin: str = "setFaults"

    @classmethod
    def error(cls, method: str, status: ErrorStatus, *, count: int = 1, message: str = "") -> Fault:
        """The next ``count`` calls of ``method`` answer ``status`` (saying it was injected)."""
        return cls(method, "error", count, status=status, message=message)

    @classmethod
    def abort(cls, method: str, *, after: int = 0, code: str = "UNAVAILABLE", count: int = 1) -> Fault:
        """End the next ``count`` calls of ``method`` with the gRPC status ``code`` after ``after``
        messages (1 on a prepare / ``execute_1_3``: after the launch status; K on
        ``configureExecutionBurst``: after K responses). ValueError for an unknown ``code``."""
        if code not in GRPC_CODES:
            raise ValueError(f"gRPC code {code!r} is not one of {', '.join(GRPC_CODES)}")
        return cls(method, "abort", count, grpc_code=GRPC_CODES[code], after=after)

    @classmethod
    def stall(cls, method: str, *, ms: int, count: int = 1) -> Fault:
        """Hold the answer of the next ``count`` calls of ``method`` ``ms`` milliseconds."""
        return cls(method, "stall", count, stall_ms=ms)

    @classmethod
    def exit(cls, method: str, *, point: str = "start", code: int = 1) -> Fault:
        """End the server process with status ``code`` at ``point`` of the next call of ``method``."""
        return cls(method, "exit", 1, point=point, exit_code=code)

    def describe(self) -> str:
        """One line for a log: the kind, its detail and the method."""
        detail = {
            "error": self.status.name,
            "abort": f"{GRPC_CODE_NAMES[self.grpc_code]} after {self.after} message(s)",
            "stall": f"{self.stall_ms} ms",
            "exit": f"status {self.exit_code} at {self.point}",
        }[self.kind]
        return f"{self.kind} ({detail}) on {self.method}"

    def hal_error(self) -> HalError:
        """The HalError an ``error`` fault answers."""
        text = f"injected fault: {self.status.name} on {self.method} ({self.origin})"
        return HalError.of(self.status, f"{text}: {self.message}" if self.message else text)

    def abort_details(self) -> str:
        """The details of the transport status an ``abort`` fault ends its call with."""
        text = f"injected fault: {self.method} aborted ({GRPC_CODE_NAMES[self.grpc_code]})"
        return f"{text}: {self.message}" if self.message else text

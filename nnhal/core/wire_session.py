"""The session handshake and the protocol version's meaning of omitted fields.

``openSession`` carries the client's protocol version (``OpenSessionRequest.protocol_version``;
0, omitted, is version 1: the protocol before the handshake); the server answers, in the
first ``SessionEvent``, the version the session speaks — the lower of the client's and its
own newest — with the range it speaks and its capabilities (:func:`negotiate`). A version
the server no longer speaks is refused in-band (INVALID_ARGUMENT naming the range). A
client reads a first event whose ``protocol_version`` is 0 as an older server's (version 1).

What changed from version 1 to 2, all read per session by the server (``docs/protocol.md``):

- an omitted ``priority`` / ``preference`` of a preparation is NNAPI's default, MEDIUM /
  FAST_SINGLE_ANSWER (:func:`priority_of`, :func:`preference_of`); version 1 read the proto3
  zero, LOW / LOW_POWER (its clients' generated code omits a field that is zero);
- an omitted ``InjectedFault.count`` is 1 (version 1: 0, every call until cleared);
- refusals of ``openSession`` (session cap, drain, unknown device) are in-band statuses in
  the first event; version 1 got gRPC statuses;
- ``closeSession`` exists.

Stateless; safe from any thread.
"""

from __future__ import annotations

from typing import Any

from nnhal.core.enums import ErrorStatus, ExecutionPreference, Priority
from nnhal.core.errors import HalError, InvalidArgument

#: The newest protocol version this code speaks, and the oldest the server still serves.
PROTOCOL_VERSION = 2
MIN_PROTOCOL_VERSION = 1
#: The first version that reads omitted fields as NNAPI's defaults and refuses sessions in-band.
DEFAULTS_VERSION = 2


def version_of(requested: int) -> int:
    """The version a client asked for: 0 (omitted) is 1."""
    return requested or 1


def negotiate(requested: int) -> int:
    """The version a session speaks when its client asked for ``requested`` (0: 1): the lower
    of that and :data:`PROTOCOL_VERSION`. INVALID_ARGUMENT for one older than the oldest served."""
    version = version_of(requested)
    if version < MIN_PROTOCOL_VERSION:
        raise InvalidArgument(
            f"protocol version {version} is no longer served; this server speaks "
            f"{MIN_PROTOCOL_VERSION} to {PROTOCOL_VERSION}"
        )
    return min(version, PROTOCOL_VERSION)


def priority_of(msg: Any, protocol: int, field: str = "priority") -> Priority:
    """The priority an ``optional uint32`` field asks for: omitted, MEDIUM (protocol 1: LOW).
    INVALID_ARGUMENT for a number that is no Priority."""
    if not msg.HasField(field):
        return Priority.MEDIUM if protocol >= DEFAULTS_VERSION else Priority.LOW
    return priority_from_wire(int(getattr(msg, field)))


def priority_from_wire(value: int) -> Priority:
    """The Priority a wire number names; INVALID_ARGUMENT for a number that is no Priority."""
    if value not in (0, 1, 2):
        raise InvalidArgument(f"priority {value} is not one of LOW (0), MEDIUM (1), HIGH (2)")
    return Priority(value)


def preference_of(msg: Any, protocol: int, field: str = "preference") -> ExecutionPreference:
    """The preference an ``optional ExecutionPreference`` field asks for: omitted,
    FAST_SINGLE_ANSWER (protocol 1: LOW_POWER). INVALID_ARGUMENT for an unknown number."""
    if not msg.HasField(field):
        return ExecutionPreference.FAST_SINGLE_ANSWER if protocol >= DEFAULTS_VERSION else ExecutionPreference.LOW_POWER
    value = int(getattr(msg, field))
    try:
        return ExecutionPreference(value)
    except ValueError:
        raise InvalidArgument(f"execution preference {value} is invalid") from None


def fault_count_of(msg: Any, protocol: int) -> int:
    """``InjectedFault.count``: omitted, 1 (protocol 1: 0, every call until cleared)."""
    if msg.HasField("count"):
        return int(msg.count)
    return 1 if protocol >= DEFAULTS_VERSION else 0


def refusal_of(event: Any) -> HalError | None:
    """The HalError a first ``SessionEvent`` refuses the session with (None when it opened it)."""
    if event.status == ErrorStatus.NONE:
        return None
    try:
        status = ErrorStatus(event.status)
    except ValueError:
        status = ErrorStatus.GENERAL_FAILURE
    return HalError.of(status, f"openSession: {event.message}")

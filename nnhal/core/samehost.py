"""The same-host execution queue's packets: any execution method form, carried through the rings.

A session's same-host queue (``openFastBurst`` with ``executions`` set; the rings and
doorbell of :mod:`nnhal.core.fastring` / :mod:`nnhal.core.doorbell`) carries every
execution method form of the session, each as the request message its gRPC method
takes, so that both sides keep one conversion of each form (the gRPC adapters').
Packets, little-endian:

- :data:`METHOD` (client to server): :data:`METHOD_HEADER` (method number u32, request
  id bytes u32, fault scope bytes u32), the request id and the fault scope (ASCII, at most
  :data:`MAX_REQUEST_ID` bytes each; what gRPC metadata carries on that path), then the
  serialized request message of method :data:`METHODS` ``[number - 1]``;
- :data:`REPLY` (server to client): message count u32, then per message its length u32
  and its bytes — one message for a unary method, the launch then the notify event for
  a launch / notify method;
- :data:`ABORTED` (server to client): the gRPC status code u32 then the details (UTF-8):
  the call ended as the gRPC call would have (an injected abort), and the client maps it
  the same way;
- :data:`STEP_ASIDE` (server to client): a reason (UTF-8): the call was not run; the
  client sends it over gRPC instead (e.g. while an injected abort waits for its call,
  which only the gRPC transport can deliver).

On a session's queue, ``executeSynchronously_1_3`` may also travel as a fast burst's
packets (``fastring.REQUEST``, ``fastpacket.LEARN`` / ``CALL``, answered as on a burst),
each payload then prefixed with :data:`TAG_HEADER` (request id bytes u32, fault scope
bytes u32), the request id and the fault scope, zero bytes up to a multiple of
``fastpacket.ALIGN`` (so that the tensors of the packet behind it stay aligned in the
payload): :func:`encode_tag`.

A packet the server cannot read is answered with a ``fastring.RESULT`` (an
ExecuteResult carrying INVALID_ARGUMENT), as on a fast burst. Every field is untrusted:
the decoders raise :class:`~nnhal.core.fastpacket.PacketError` for anything that does
not hold together. The codec knows no protobuf: messages are bytes here.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from nnhal.core.fastpacket import ALIGN, PacketError, aligned

#: Packet kinds (beside those of ``fastring`` and ``fastpacket``).
METHOD = 7
REPLY = 8
ABORTED = 9
STEP_ASIDE = 10

#: The methods a queue carries, by (gRPC service, method); a method's number is its index + 1.
#: Append only: the numbers are the wire's.
METHODS: tuple[tuple[str, str], ...] = (
    ("PreparedModel", "executeSynchronously_1_3"),
    ("PreparedModel", "execute_1_3"),
    ("PreparedModel", "executeFenced"),
    ("HidlPreparedModel", "execute"),
    ("HidlPreparedModel", "execute_1_2"),
    ("HidlPreparedModel", "executeSynchronously"),
    ("AidlPreparedModel", "executeSynchronously"),
    ("AidlPreparedModel", "executeFenced"),
    ("AidlPreparedModel", "executeSynchronouslyWithConfig"),
    ("AidlPreparedModel", "executeFencedWithConfig"),
    ("Execution", "executeSynchronously"),
    ("Execution", "executeFenced"),
    ("Burst", "executeSynchronously"),
    ("Burst", "executeSynchronouslyWithConfig"),
)
#: The methods whose answer is a launch / notify stream (two messages); the others answer one.
STREAMS = frozenset(
    {("PreparedModel", "execute_1_3"), ("HidlPreparedModel", "execute"), ("HidlPreparedModel", "execute_1_2")}
)

METHOD_HEADER = struct.Struct("<III")
TAG_HEADER = struct.Struct("<II")
_TAG_BYTES = TAG_HEADER.size
#: The zeros a tag's pad is cut from.
_PAD = bytes(ALIGN)
MAX_REQUEST_ID = 128
_U32 = struct.Struct("<I")


def number_of(service: str, method: str) -> int:
    """The wire number of a carried method (ValueError for one the queue does not carry)."""
    return METHODS.index((service, method)) + 1


def encode_method(number: int, request_id: str, message: bytes, scope: str = "") -> bytes:
    rid = request_id.encode("ascii", "replace")[:MAX_REQUEST_ID]
    sc = scope.encode("ascii", "replace")[:MAX_REQUEST_ID]
    return METHOD_HEADER.pack(number, len(rid), len(sc)) + rid + sc + message


def decode_method(payload: bytes) -> tuple[int, str, str, bytes]:
    """The method number, request id, fault scope and request message bytes of a METHOD packet."""
    if len(payload) < METHOD_HEADER.size:
        raise PacketError(f"a method packet of {len(payload)} bytes is shorter than its header")
    number, rid_len, scope_len = METHOD_HEADER.unpack_from(payload)
    if not 1 <= number <= len(METHODS):
        raise PacketError(f"unknown method number {number}")
    if max(rid_len, scope_len) > MAX_REQUEST_ID or METHOD_HEADER.size + rid_len + scope_len > len(payload):
        raise PacketError("a method packet's request id or fault scope does not fit")
    at = METHOD_HEADER.size
    try:
        rid = payload[at : at + rid_len].decode("ascii")
        scope = payload[at + rid_len : at + rid_len + scope_len].decode("ascii")
    except UnicodeDecodeError:
        raise PacketError("a method packet's request id or fault scope is not ASCII") from None
    return number, rid, scope, payload[at + rid_len + scope_len :]


def encode_tag(request_id: str, scope: str = "") -> bytes:
    """The prefix of a fast burst packet on a session's queue (a multiple of ``ALIGN`` bytes)."""
    rid = request_id.encode("ascii", "replace")[:MAX_REQUEST_ID]
    if not scope:  # every execution's tag outside a fault scope (most): its header and pad made once
        head, pad = _BARE_TAGS[len(rid)]
        return head + rid + pad
    sc = scope.encode("ascii", "replace")[:MAX_REQUEST_ID]
    n = TAG_HEADER.size + len(rid) + len(sc)
    return TAG_HEADER.pack(len(rid), len(sc)) + rid + sc + _PAD[: -n % ALIGN]


#: A tag without a fault scope by its request id's length: the header and the pad after the id.
_BARE_TAGS = tuple((TAG_HEADER.pack(n, 0), _PAD[: -(_TAG_BYTES + n) % ALIGN]) for n in range(MAX_REQUEST_ID + 1))


def split_tag(payload: bytes | memoryview) -> tuple[str, str, memoryview]:
    """The request id, fault scope and the rest of a tagged packet's payload, after the tag's
    pad (a view: an execution's inputs are not copied again). Each field of the tag is read
    once, into a private value, before it is checked (``payload`` may be a view of shared
    memory its writer still changes: ``fastring.in_ring``)."""
    size = len(payload)
    if size < _TAG_BYTES:
        raise PacketError(f"a tagged packet of {size} bytes is shorter than its tag")
    rid_len, scope_len = TAG_HEADER.unpack_from(payload)
    if rid_len > MAX_REQUEST_ID or scope_len > MAX_REQUEST_ID or _TAG_BYTES + rid_len + scope_len > size:
        raise PacketError("a tagged packet's request id or fault scope does not fit")
    try:
        # Each name decoded straight from the payload: one read of its bytes, into a private
        # string. Most calls have no fault scope.
        rid = str(payload[_TAG_BYTES : _TAG_BYTES + rid_len], "ascii")
        scope = str(payload[_TAG_BYTES + rid_len : _TAG_BYTES + rid_len + scope_len], "ascii") if scope_len else ""
    except UnicodeDecodeError:
        raise PacketError("a tagged packet's request id or fault scope is not ASCII") from None
    end = _TAG_ENDS[rid_len + scope_len]
    if end > size:
        raise PacketError("a tagged packet's tag is not padded to its alignment")
    return rid, scope, memoryview(payload)[end:]


#: Where a tag whose names (request id and fault scope) take ``n`` bytes ends, by ``n``: its
#: pad's end (``aligned``), worked out once for every length a tag may declare.
_TAG_ENDS = tuple(aligned(_TAG_BYTES + n) for n in range(2 * MAX_REQUEST_ID + 1))


def encode_reply(messages: Sequence[bytes]) -> bytes:
    parts = [_U32.pack(len(messages))]
    for m in messages:
        parts.append(_U32.pack(len(m)))
        parts.append(m)
    return b"".join(parts)


def decode_reply(payload: bytes, expected: int) -> list[bytes]:
    """The ``expected`` messages of a REPLY packet; PacketError unless it holds exactly them."""
    end = len(payload)
    if end < 4:
        raise PacketError("a reply shorter than its count")
    (count,) = _U32.unpack_from(payload)
    if count != expected:
        raise PacketError(f"a reply of {count} messages where {expected} were due")
    at = 4
    out = []
    for _ in range(count):
        if at + 4 > end:
            raise PacketError("a reply's messages run past its end")
        (n,) = _U32.unpack_from(payload, at)
        at += 4
        if at + n > end:
            raise PacketError("a reply's message runs past its end")
        out.append(payload[at : at + n])
        at += n
    if at != end:
        raise PacketError(f"a reply has {end - at} bytes beyond what it declares")
    return out


def encode_aborted(code: int, details: str) -> bytes:
    return _U32.pack(code) + details.encode()


def decode_aborted(payload: bytes) -> tuple[int, str]:
    if len(payload) < 4:
        raise PacketError("an aborted packet shorter than its code")
    try:
        return _U32.unpack_from(payload)[0], payload[4:].decode()
    except UnicodeDecodeError:
        raise PacketError("an aborted packet's details are not UTF-8") from None


def decode_text(payload: bytes) -> str:
    try:
        return payload.decode()
    except UnicodeDecodeError:
        raise PacketError("a step-aside packet's reason is not UTF-8") from None

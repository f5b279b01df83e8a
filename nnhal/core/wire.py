"""Validating conversion between protobuf messages and canonical types, and the size of a message.

Only the ``wire`` family of core modules touches generated code; each holds one kind of value:
:mod:`~nnhal.core.wire_model` (models, operands, subgraphs, models as bytes),
:mod:`~nnhal.core.wire_pool` (memory pools), :mod:`~nnhal.core.wire_request` (requests and
their arguments), :mod:`~nnhal.core.wire_status` (statuses), :mod:`~nnhal.core.wire_result`
(execution results, output shapes, timing), :mod:`~nnhal.core.wire_deadline` (deadlines),
:mod:`~nnhal.core.wire_device` (the device's facts), and the method forms of
:mod:`~nnhal.core.wire_hidl`, :mod:`~nnhal.core.wire_aidl`, :mod:`~nnhal.core.wire_stream`
and :mod:`~nnhal.core.wire_session`. This module holds what they share: the bound on one
message's size.

The family's contract: ``*_to`` functions fill (or build) protobuf messages; ``*_from``
functions build canonical values and raise InvalidArgument naming the field when a wire
value has no canonical meaning (an unknown enum number, an extension type this driver does
not know, a pool with no content or token 0). Canonical -> wire -> canonical gives back an
equal value (tests/core/test_wire.py), with three documented exceptions: statuses never carry
DEAD_OBJECT out (GENERAL_FAILURE) and read unknown numbers as GENERAL_FAILURE; device types
and states read unknown numbers as OTHER / UNKNOWN; deadlines travel as the time remaining
and come back on this host's monotonic clock. Every function is safe from any thread; the
only state is bounded caches of values already converted (request arguments and output
shapes), whose lost races cost a conversion, never a value.
"""

from __future__ import annotations

#: Messages up to 1 GiB each way: inline pools carry tensors (the 64 MiB benchmark and
#: more). Inline pools of one request are held to it too: their contents travel in one.
MAX_MESSAGE_BYTES = 1 << 30
#: Room a response keeps beside inline pool contents (status, message, shapes, timing, profile).
ENVELOPE_BYTES = 1 << 20


def max_inline_bytes() -> int:
    """Bytes of inline pool contents that fit one message with its envelope, either way
    (read at call time, so a test may lower MAX_MESSAGE_BYTES)."""
    return MAX_MESSAGE_BYTES - ENVELOPE_BYTES

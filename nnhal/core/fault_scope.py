"""The fault scope a call carries: what a seeded fault schedule decides by (``nnhal serve
--fault-seed``; protocol constant, client and server read it from here).

A client names the unit of work a call belongs to — the conformance runner: a case and
its modes — in the metadata entry :data:`METADATA_KEY`, valued :func:`encode` ``(label,
nonce)``: the nonce is fresh for each time the unit runs, so the server counts the calls
of one run from 0 (per method); the label alone, with the seed and that count, decides
the call's fault. Values are printable ASCII, as gRPC metadata must be: the label is
percent-encoded. A malformed value is ignored (the call is in no scope).
"""

from __future__ import annotations

import re
from urllib.parse import quote

#: The metadata key of a call's fault scope.
METADATA_KEY = "nnhal-fault-scope"
#: Longest value accepted (a longer one is no scope).
MAX_VALUE = 1024
_VALUE = re.compile(r"([0-9a-f]{8,32})\.([\x21-\x7e]+)")


def encode(label: str, nonce: str) -> str:
    """The metadata value of ``label`` for one run of it (``nonce``: 8-32 lowercase hex digits)."""
    return f"{nonce}.{quote(label, safe='/._-+:=')}"


def decode(value: str) -> tuple[str, str] | None:
    """(nonce, label as encoded) of a metadata value; None when it is not one :func:`encode` makes."""
    m = _VALUE.fullmatch(value) if len(value) <= MAX_VALUE else None
    return (m[1], m[2]) if m else None

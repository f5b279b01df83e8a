"""Which devices a server hosts: ``name=kind`` specs and the backend of each kind.

``nnhal serve --device cpu --device fast=ort`` hosts a reference CPU device named
``cpu`` and an ONNX Runtime device named ``fast``; the first is the default device
(the one a client that names none gets). Without specs a server hosts the one CPU
device it always had. Each device is its own Driver: its own sessions, scheduler
slots, memory limits, compilation-cache kind; the server's settings apply to each.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the backends import the executor: only a server that builds them loads it
    from nnhal.server.backend import Backend

#: Device kinds and what builds their backend (``threads``: the ort device's intra-op threads).
KINDS: dict[str, Callable[[int], Backend]] = {
    "cpu": lambda _threads: _reference_backend(),
    "ort": lambda threads: _ort_backend(threads),
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def _reference_backend() -> Backend:
    from nnhal.server.backend import ReferenceBackend

    return ReferenceBackend()


def _ort_backend(threads: int) -> Backend:
    from nnhal.server.ort.runtime import OrtBackend

    return OrtBackend(threads)


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    kind: str


def parse_device(text: str) -> DeviceSpec:
    """``KIND`` (named after its kind) or ``NAME=KIND``; ValueError saying what is allowed."""
    name, _, kind = text.strip().rpartition("=")
    name = name or kind
    if kind not in KINDS:
        raise ValueError(f"device kind must be one of {', '.join(KINDS)}, got {kind!r} (give KIND or NAME=KIND)")
    if not _NAME.match(name):
        raise ValueError(f"device name {name!r} must be 1-63 letters, digits, '.', '_' or '-'")
    return DeviceSpec(name, kind)


def make_backend(kind: str, threads: int = 1) -> Backend:
    return KINDS[kind](threads)

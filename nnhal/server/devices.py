"""Which devices a server hosts: ``name=kind`` specs and the backend of each kind.

``nnhal serve --device cpu --device fast=ort --device litert`` hosts a reference CPU
device named ``cpu``, an ONNX Runtime device named ``fast`` and a LiteRT (XNNPACK) device
named ``litert``; the first is the default device (the one a client that names none
gets). Without specs a server hosts the one CPU device it always had. Each device is its
own Driver: its own sessions, scheduler slots, memory limits, compilation-cache kind; the
server's settings apply to each.

A compiling device (ort, litert) takes every model: what its library cannot run runs on
the reference executor inside the same device (``nnhal.server.partitioned``). ``:strict``
(``fast=ort:strict``) turns that fallback off: the device then reports only what its
library runs, for the runtime's partitioner and its tests.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the backends import the executor: only a server that builds them loads it
    from nnhal.server.backend import Backend

#: Device kinds and what builds their backend (``threads``: a compiling device's threads).
KINDS: dict[str, Callable[[int], Backend]] = {
    "cpu": lambda _threads: _reference_backend(),
    "ort": lambda threads: _ort_backend(threads),
    "litert": lambda threads: _litert_backend(threads),
}
_STRICT = ":strict"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")


def _reference_backend() -> Backend:
    from nnhal.server.backend import ReferenceBackend

    return ReferenceBackend()


def _ort_backend(threads: int) -> Backend:
    from nnhal.server.ort.runtime import OrtBackend

    return OrtBackend(threads)


def _litert_backend(threads: int) -> Backend:
    from nnhal.server.litert.runtime import LiteRtBackend

    return LiteRtBackend(threads)


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    kind: str
    #: A compiling device without the reference fallback inside it (``KIND:strict``).
    strict: bool = False


def parse_device(text: str) -> DeviceSpec:
    """``KIND`` (named after its kind), ``NAME=KIND``, either with ``:strict`` after a
    compiling kind; ValueError saying what is allowed."""
    name, _, kind = text.strip().rpartition("=")
    strict = kind.endswith(_STRICT)
    kind = kind.removesuffix(_STRICT)
    name = name or kind
    if kind not in KINDS:
        raise ValueError(
            f"device kind must be one of {', '.join(KINDS)}, got {kind!r} (give KIND or NAME=KIND, "
            f"KIND{_STRICT} for a compiling device without the CPU fallback)"
        )
    if strict and kind == "cpu":
        raise ValueError("cpu runs every operation itself: ':strict' is for the compiling kinds (ort, litert)")
    if not _NAME.match(name):
        raise ValueError(f"device name {name!r} must be 1-63 letters, digits, '.', '_' or '-'")
    return DeviceSpec(name, kind, strict)


def make_backend(kind: str, threads: int = 1, strict: bool = False) -> Backend:
    """The backend of a device of ``kind``; a compiling kind gets the reference fallback
    inside it unless ``strict``."""
    backend = KINDS[kind](threads)
    if strict or kind == "cpu":
        return backend
    from nnhal.server.partitioned import PartitionedBackend

    return PartitionedBackend(backend)

"""A device backend's compiled artifact in the compilation cache, and building its graph.

The reference device's cache is the sealed model (``cache.seal``); a compiling backend's
is the model's skeleton with the artifact (``cache.seal_compiled``), bound to the
backend's kind, so a preparation from cache loads the artifact instead of compiling.
Kept apart from ``backend`` so that backends need not see the cache's wire format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from nnhal.core.enums import HalVersion, Priority
from nnhal.core.types import Model
from nnhal.server import cache
from nnhal.server.backend import Backend, ExecutableGraph, ReferenceBackend
from nnhal.server.executor.constants import Buffer
from nnhal.server.pieces import Pieces, contiguous


def sealer(
    backend: Backend, secret: bytes, token: bytes, level: HalVersion
) -> Callable[[Model, Priority, bytes], bytes]:
    """The PrepareJob's ``seal``: the reference's cache (the model), or the backend's
    compiled artifact with the model's skeleton (operands and operations without constant
    bytes: the artifact holds the constants; the prepared model needs only the operands),
    bound to the backend's kind."""

    def seal(model: Model, priority: Priority, artifact: bytes) -> bytes:
        if backend.kind == ReferenceBackend.kind:
            return cache.seal(secret, token, model, priority, level)
        skeleton = dataclasses.replace(model, operand_values=b"", pools=())
        tail = backend.tail_start(artifact)
        return cache.seal_compiled(secret, token, skeleton, priority, level, backend.kind, artifact, tail)

    return seal


def open_cache(
    backend: Backend, secret: bytes, token: bytes, blob: bytes | Pieces, level: HalVersion
) -> tuple[Model, Priority, memoryview | Pieces | None]:
    """The model, priority and compiled artifact (None for the reference) of a cache this
    server sealed for a device of ``backend``'s kind; INVALID_ARGUMENT otherwise."""
    if backend.kind == ReferenceBackend.kind:
        model, priority = cache.open_sealed(secret, token, bytes(contiguous(blob)), level)
        return model, priority, None
    return cache.open_compiled(secret, token, blob, level, backend.kind)


def builder(
    backend: Backend, artifact: memoryview | Pieces | None
) -> Callable[[Model, Sequence[Buffer]], tuple[ExecutableGraph, bytes]]:
    """The PrepareJob's ``build``: load ``artifact`` (from a cache) or compile afresh. A
    preparation from cache has no token, so it seals nothing: its artifact is not returned."""

    def build(model: Model, buffers: Sequence[Buffer]) -> tuple[ExecutableGraph, bytes]:
        if artifact is not None:
            return backend.load(model, buffers, artifact), b""
        return backend.compile(model, buffers)

    return build

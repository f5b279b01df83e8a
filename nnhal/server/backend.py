"""What a device computes with: the backend behind a Driver.

The driver does everything a HAL device does around the computation (sessions,
validation, scheduling, memory, caching); a backend answers which operations it
supports and turns a validated model into something that runs. The reference
backend is the numpy executor (every operation); others (``nnhal.server.ort``)
compile to an accelerator library and say per operation why they cannot run it.

``compile`` returns the executable graph and an artifact (the compiled form, b""
for none) that the compilation cache seals next to the model; ``load`` rebuilds
the graph from that artifact without converting or optimizing again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from nnhal.core.enums import HalVersion, OperandType, Priority
from nnhal.core.types import Capabilities, Model, Operand, OperandPerformance, PerformanceInfo
from nnhal.server import cache
from nnhal.server.executor.graph import Buffer, ExecutionControl, PreparedGraph
from nnhal.server.executor.validate import supported_operations


class ExecutableGraph(Protocol):
    def run(
        self,
        inputs: Sequence[np.ndarray | None],
        control: ExecutionControl | None = None,
        output_operands: Sequence[Operand] | None = None,
    ) -> list[np.ndarray]: ...


class Backend(Protocol):
    #: The device kind ("cpu", "ort"): names the backend in caches and device lists.
    kind: str
    #: For the version string ("numpy CPU executor").
    description: str

    def supported_operations(
        self, model: Model, pools: Sequence[Buffer], level: HalVersion
    ) -> tuple[list[bool], list[str]]: ...

    def compile(self, model: Model, pools: Sequence[Buffer]) -> tuple[ExecutableGraph, bytes]: ...

    def load(self, model: Model, pools: Sequence[Buffer], artifact: bytes) -> ExecutableGraph: ...

    def capabilities(self) -> Capabilities:
        """Performance relative to the reference CPU device (1.0: the same)."""
        ...


class ReferenceBackend:
    """The numpy executor: every operation of the HAL, exact; nothing to cache but the model."""

    kind = "cpu"
    description = "numpy CPU executor"

    def supported_operations(
        self, model: Model, pools: Sequence[Buffer], level: HalVersion
    ) -> tuple[list[bool], list[str]]:
        return supported_operations(model, pools, level)

    def compile(self, model: Model, pools: Sequence[Buffer]) -> tuple[ExecutableGraph, bytes]:
        return PreparedGraph(model, pools), b""

    def load(self, model: Model, pools: Sequence[Buffer], artifact: bytes) -> ExecutableGraph:
        return PreparedGraph(model, pools)

    def capabilities(self) -> Capabilities:
        return reference_capabilities()


def reference_capabilities() -> Capabilities:
    """1.0 for every operand type: the reference is the unit."""
    perf = PerformanceInfo(1.0, 1.0)
    return Capabilities(
        relaxed_float32_to_float16_performance_scalar=perf,
        relaxed_float32_to_float16_performance_tensor=perf,
        operand_performance=tuple(
            OperandPerformance(t, perf) for t in OperandType if t not in (OperandType.OEM, OperandType.TENSOR_OEM_BYTE)
        ),
        if_performance=perf,
        while_performance=perf,
    )


# -- the compilation cache of a backend's artifact -----------------------------------------
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
        return cache.seal_compiled(secret, token, skeleton, priority, level, backend.kind, artifact)

    return seal


def open_cache(
    backend: Backend, secret: bytes, token: bytes, blob: bytes, level: HalVersion
) -> tuple[Model, Priority, bytes | None]:
    """The model, priority and compiled artifact (None for the reference) of a cache this
    server sealed for a device of ``backend``'s kind; INVALID_ARGUMENT otherwise."""
    if backend.kind == ReferenceBackend.kind:
        model, priority = cache.open_sealed(secret, token, blob, level)
        return model, priority, None
    return cache.open_compiled(secret, token, blob, level, backend.kind)


def builder(
    backend: Backend, artifact: bytes | None
) -> Callable[[Model, Sequence[Buffer]], tuple[ExecutableGraph, bytes]]:
    """The PrepareJob's ``build``: load ``artifact`` (from a cache) or compile afresh."""

    def build(model: Model, buffers: Sequence[Buffer]) -> tuple[ExecutableGraph, bytes]:
        if artifact is not None:
            return backend.load(model, buffers, artifact), artifact
        return backend.compile(model, buffers)

    return build

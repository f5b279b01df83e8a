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

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from nnhal.core.enums import HalVersion, OperandType
from nnhal.core.types import Capabilities, Model, Operand, OperandPerformance, PerformanceInfo
from nnhal.server.executor.constants import Buffer
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.executor.validate import supported_operations
from nnhal.server.pieces import Pieces


class ExecutableGraph(Protocol):
    #: Whether ``run`` only copies across its boundary: it reads each input array once, to copy
    #: it into memory of its own before computing, and writes each ``into`` array once, with a
    #: finished output, never reading it. Then inputs and ``into`` arrays may be views of memory
    #: another process writes too (a same-host queue's rings), whose changes meanwhile can only
    #: change the values that process gets. False: ``run`` computes on its inputs (and may
    #: read its outputs) in place, which must be private memory.
    copies_io: bool
    #: Whether ``run`` may write an output into its ``into`` array (the caller then makes those
    #: arrays); False: ``run`` ignores ``into``, and the caller makes none.
    writes_into: bool

    def run(
        self,
        inputs: Sequence[np.ndarray | None],
        control: ExecutionControl | None = None,
        output_operands: Sequence[Operand] | None = None,
        into: Sequence[np.ndarray | None] | None = None,
    ) -> list[np.ndarray]:
        """The outputs in model order. ``into``: per output, a writable array where the caller
        puts that output (None: nowhere known), of the shape and dtype it would have; a graph
        may write an output of exactly that shape and dtype there and return that very array,
        which the caller then does not copy again (a graph that ignores ``into`` is correct)."""
        ...


#: What a lane reads and writes per tensor: its dtype and shape (``LaneGraph.lane``).
TensorSpec = tuple[np.dtype[Any], tuple[int, ...]]


class Lane(Protocol):
    """A graph's run of one request layout, made once per layout (``LaneGraph.lane``): each
    input copied from its bytes, the graph run, each output copied into its place — the
    whole of an execution that is bytes in and bytes out. A lane reads each input's bytes
    exactly once, to copy them into memory of its own, and writes each place exactly once,
    never reading it: its inputs and places may then be views of memory another process
    writes too (a same-host queue's rings; DESIGN §2), whatever its graph does inside."""

    #: The library's name in errors ("LiteRT", "the reference executor").
    library: str

    def __call__(self, inputs: Sequence[memoryview], into: Sequence[memoryview]) -> Sequence[memoryview]:
        """Copy ``inputs`` (each exactly its tensor's bytes) in, run, copy each output into its
        ``into`` view (exactly its bytes) and return ``into``: the lane alone, with no
        execution's control (its library's exceptions raised as they are)."""
        ...

    def run(self, inputs: Sequence[memoryview], into: Sequence[memoryview], control: ExecutionControl) -> object:
        """Copy ``inputs`` (each exactly its tensor's bytes) in, run under ``control`` as the
        graph's ``run`` runs (its checks, its errors: a HalError for what ends the execution),
        copy each output into its ``into`` view (exactly its bytes)."""
        ...


@runtime_checkable
class LaneGraph(Protocol):
    """A graph that offers a :class:`Lane` per request layout (the litert device's: a model
    placed wholly on LiteRT; the reference executor's straight program)."""

    def lane(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> Lane | None:
        """The lane of a layout whose inputs and outputs are of these dtypes and shapes, in the
        model's order; None when the graph does not run such a layout as bytes in and out
        (a dtype or shape other than its tensors', a graph of several steps)."""
        ...


@runtime_checkable
class PickingLaneGraph(Protocol):
    """A library's graph that offers lanes (``LaneGraph``) whose outputs it picks from its own
    (``pick``: per output, the index of the graph's output it is; None: the same order), as
    a step of a partitioned graph (``nnhal.server.partitioned``)."""

    def lane(
        self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], pick: Sequence[int] | None = None
    ) -> Lane | None: ...


class Backend(Protocol):
    #: The device kind ("cpu", "ort"): names the backend in caches and device lists.
    kind: str
    #: For the version string ("numpy CPU executor").
    description: str

    def supported_operations(
        self, model: Model, pools: Sequence[Buffer], level: HalVersion
    ) -> tuple[list[bool], list[str]]: ...

    def compile(self, model: Model, pools: Sequence[Buffer]) -> tuple[ExecutableGraph, bytes]: ...

    def load(self, model: Model, pools: Sequence[Buffer], artifact: bytes | memoryview | Pieces) -> ExecutableGraph:
        """The graph of a ``compile`` artifact (``artifact`` may be a view into a cache, or the
        pieces a cache was read in)."""
        ...

    def tail_start(self, artifact: bytes | memoryview) -> int | None:
        """Where in a ``compile`` artifact the part ``load`` keeps as one bytes object starts
        (a cache is read back cut there, so that part is read into its own object); None
        when ``load`` keeps no such part."""
        ...

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

    def load(self, model: Model, pools: Sequence[Buffer], artifact: bytes | memoryview | Pieces) -> ExecutableGraph:
        return PreparedGraph(model, pools)

    def tail_start(self, artifact: bytes | memoryview) -> int | None:
        return None

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

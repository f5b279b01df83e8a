"""A compiling device that takes every model: its library where it can, the reference
executor inside the same device where it cannot.

``PartitionedBackend(inner)`` reports every operation the reference executor validates as
supported. At compile time each main operation is placed on the inner backend when the
inner backend supports it, else on the reference executor; the graph is cut into steps as
the client's partitioner cuts it across devices (``nnhal.core.subgraphs``), and each
backend step's sub-model is asked again (a step's inputs and outputs are operands the
whole model's check did not see as graph boundaries, e.g. of unknown shape): what it
refuses moves to the reference, until every backend step is whole (and a step the library
still fails to compile runs on the reference, logged). A model placed wholly on the
backend is one step.

The cache artifact holds the placement and, per step, the backend's artifact or the
reference step's sub-model with its constants inlined (the sealed skeleton carries no
constants), so a preparation from cache neither converts nor places again.

``getSupportedOperations`` says per operation where it runs: a supported operation the
library lacks has the reason ``FALLBACK_REASON`` + the library's reason. The execution
profile names where each operation ran: backend steps as ``<kind>`` (count: the operations
in them), fallback operations as ``cpu fallback: <TYPE>``.
"""

from __future__ import annotations

import json
import logging
import struct
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any

import numpy as np

from nnhal.core import subgraphs, wire_model
from nnhal.core.enums import HalVersion, OperandLifeTime
from nnhal.core.errors import GeneralFailure
from nnhal.core.types import Capabilities, DataLocation, Model, Operand, OperationTiming, Subgraph
from nnhal.server.backend import Backend, ExecutableGraph, Lane, PickingLaneGraph, TensorSpec
from nnhal.server.executor.constants import Buffer, constant_value
from nnhal.server.executor.control import ExecutionControl
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.executor.validate import supported_operations as reference_support
from nnhal.server.pieces import Pieces

_log = logging.getLogger(__name__)
BACKEND, FALLBACK = 0, 1
_MAGIC = b"NNHALPB1"
_LENGTH = struct.Struct("<Q")
_LEVEL = max(HalVersion)
#: Profile key prefix of operations run by the reference fallback.
FALLBACK_PROFILE = "cpu fallback: "
#: Prefix of the support reason of a supported operation the fallback runs (the library's
#: reason follows); the library's own operations have no reason.
FALLBACK_REASON = "supported on the CPU fallback inside this device: "


@dataclass(frozen=True)
class PlacedStep:
    place: int  # BACKEND or FALLBACK
    operations: tuple[int, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


def place_operations(inner: Backend, model: Model, pools: Sequence[Buffer]) -> list[PlacedStep]:
    """The steps of ``model``: the inner backend's where it takes them, the reference's elsewhere."""
    supported, _ = inner.supported_operations(model, pools, _LEVEL)
    place = [BACKEND if ok else FALLBACK for ok in supported]
    for _ in range(len(place) + 1):
        cuts = subgraphs.cut(model, place)
        io = subgraphs.step_io(model, cuts)
        moved = False
        for (where, ops), (inputs, outputs) in zip(cuts, io):
            if where != BACKEND:
                continue
            sub = subgraphs.step_model(model, ops, inputs, outputs)
            ok, _ = inner.supported_operations(sub, pools, _LEVEL)
            for k, fine in zip(ops, ok):
                if not fine:
                    place[k], moved = FALLBACK, True
        if not moved:
            return [PlacedStep(w, tuple(ops), tuple(i), tuple(o)) for (w, ops), (i, o) in zip(cuts, io)]
    raise GeneralFailure("placing the model's operations did not settle")  # pragma: no cover - bounded above


def self_contained(model: Model, pools: Sequence[Buffer]) -> Model:
    """``model`` with every constant copied into its operand values (no pools)."""
    values = bytearray()

    def inline(sg: Subgraph) -> Subgraph:
        operands = []
        for op in sg.operands:
            if op.lifetime in (OperandLifeTime.CONSTANT_COPY, OperandLifeTime.CONSTANT_REFERENCE):
                value = constant_value(model, pools, op)
                assert value is not None
                raw = np.ascontiguousarray(value).tobytes()
                values.extend(b"\0" * (-len(values) % 8))
                location = DataLocation(0, len(values), len(raw))
                op = replace(op, lifetime=OperandLifeTime.CONSTANT_COPY, location=location)
                values.extend(raw)
            operands.append(op)
        return replace(sg, operands=tuple(operands))

    main = inline(model.main)
    referenced = tuple(inline(sg) for sg in model.referenced)
    return replace(model, main=main, referenced=referenced, operand_values=bytes(values), pools=())


class _Step:
    def __init__(self, placed: PlacedStep, graph: ExecutableGraph, outputs: Sequence[Operand]) -> None:
        self.placed = placed
        self.graph = graph
        self.output_operands = tuple(outputs)


class PartitionedGraph:
    """Steps run in order; results crossing steps are kept by operand index."""

    def __init__(self, model: Model, kind: str, steps: Sequence[_Step]) -> None:
        self._kind = kind
        self._steps = steps
        self._inputs = model.main.input_indexes
        self._outputs = model.main.output_indexes
        self._fallback_types = {
            s.placed.operations: tuple(model.main.operations[k].type.name for k in s.placed.operations)
            for s in steps
            if s.placed.place == FALLBACK
        }
        #: The one step of a model placed wholly on the library, taking the model's inputs and
        #: giving its outputs (None otherwise): an unprofiled run is that step's.
        self._whole: _Step | None = None
        #: Where each model output is among that step's outputs, when not the same order (the
        #: library's graph may list them in another).
        self._pick: tuple[int, ...] | None = None
        #: That pick when it reorders all the step's outputs: what takes a model-ordered sequence
        #: into the step's order, and the step's outputs into the model's (``run``).
        self._order: tuple[itemgetter[Any], itemgetter[Any]] | None = None
        if len(steps) == 1:
            only = steps[0].placed
            if only.place == BACKEND and only.inputs == tuple(self._inputs) and set(self._outputs) <= set(only.outputs):
                self._whole = steps[0]
                pick = tuple(only.outputs.index(o) for o in self._outputs)
                self._pick = None if pick == tuple(range(len(pick))) else pick
                if self._pick is not None and len(pick) == len(only.outputs):
                    # A reordering of all the step's outputs (two or more): the step's places in
                    # its order and its outputs back in the model's, each one C call per run.
                    self._order = (itemgetter(*map(pick.index, range(len(pick)))), itemgetter(*pick))
        #: A model placed wholly on one library step hands its inputs and ``into`` to that step's
        #: graph alone (``ExecutableGraph.copies_io``); steps on the fallback compute in place.
        self.copies_io = self._whole is not None and self._whole.graph.copies_io
        #: ``into`` reaches only that step's graph (``ExecutableGraph.writes_into``).
        self.writes_into = self._whole is not None and self._whole.graph.writes_into

    def lane(self, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> Lane | None:
        """``LaneGraph.lane``: the lane of the one library step of a model placed wholly on the
        library, when that step's graph offers lanes (None otherwise: fallback steps, several
        steps); its outputs picked as ``run`` picks them."""
        whole = self._whole
        if whole is None or not isinstance(whole.graph, PickingLaneGraph):
            return None
        return whole.graph.lane(inputs, outputs, self._pick)

    def run(
        self,
        inputs: Sequence[np.ndarray | None],
        control: ExecutionControl | None = None,
        output_operands: Sequence[Operand] | None = None,
        into: Sequence[np.ndarray | None] | None = None,
    ) -> list[np.ndarray]:
        """The outputs in model order; ``output_operands`` (a request's dims) apply to the
        steps writing model outputs; ``into`` goes to a step that computes the whole model
        (``ExecutableGraph.run``), the only one whose outputs are the model's in its order."""
        whole = self._whole
        if whole is not None and (control is None or control.profile is None):
            # The same call the loop below makes for this one step, without its bookkeeping.
            order = self._order
            if order is not None and output_operands is None:  # ``_run_picked``'s, in C calls
                ops = whole.output_operands
                outs = whole.graph.run(inputs, control, ops, None if into is None else order[0](into))
                if len(outs) < len(ops):
                    raise GeneralFailure(f"output operand {whole.placed.outputs[len(outs)]} was never written")
                return list(order[1](outs))
            if self._pick is not None:
                return self._run_picked(whole, self._pick, inputs, control, output_operands, into)
            wanted = whole.output_operands if output_operands is None else output_operands
            outs = whole.graph.run(inputs, control, wanted, into)
            n = len(self._outputs)
            if len(outs) < n:
                raise GeneralFailure(f"output operand {self._outputs[len(outs)]} was never written")
            return outs if len(outs) == n else list(outs[:n])
        values: dict[int, np.ndarray | None] = dict(zip(self._inputs, inputs))
        requested = dict(zip(self._outputs, output_operands)) if output_operands is not None else {}
        for step in self._steps:
            placed = step.placed
            ins = [values[i] for i in placed.inputs]
            outs_ops = [requested.get(o, op) for o, op in zip(placed.outputs, step.output_operands)]
            profile = None if control is None else control.profile
            if placed.place == FALLBACK and control is not None and profile is not None:
                control.profile = {}
                first = len(control.timeline) if control.timeline is not None else 0
                try:
                    outs = step.graph.run(ins, control, outs_ops)
                    for name, (count, ns) in control.profile.items():
                        entry = profile.setdefault(FALLBACK_PROFILE + name, [0, 0])
                        entry[0] += count
                        entry[1] += ns
                finally:
                    control.profile = profile
                if control.timeline is not None:
                    # The step's operations by their index in the whole model.
                    control.timeline[first:] = [
                        replace(t, index=placed.operations[t.index], operation=FALLBACK_PROFILE + t.operation)
                        if t.subgraph == 0
                        else t
                        for t in control.timeline[first:]
                    ]
            elif control is not None and profile is not None:
                control.start()
                t0 = time.perf_counter_ns()
                outs = step.graph.run(ins, control, outs_ops)
                t1 = time.perf_counter_ns()
                entry = profile.setdefault(self._kind, [0, 0])
                entry[0] += len(placed.operations)
                entry[1] += t1 - t0
                if control.timeline is not None:
                    # The library runs the step as one: one entry, at its first operation.
                    start = (t0 - control.timeline_t0_ns) // 1000
                    name = f"{self._kind} ({len(placed.operations)} operations)"
                    control.timeline.append(OperationTiming(placed.operations[0], name, 0, start, (t1 - t0) // 1000))
            else:
                outs = step.graph.run(ins, control, outs_ops)
            values.update(zip(placed.outputs, outs))
        results = []
        for i in self._outputs:
            value = values.get(i)
            if value is None:
                raise GeneralFailure(f"output operand {i} was never written")
            results.append(value)
        return results

    def _run_picked(
        self,
        whole: _Step,
        pick: tuple[int, ...],
        inputs: Sequence[np.ndarray | None],
        control: ExecutionControl | None,
        output_operands: Sequence[Operand] | None,
        into: Sequence[np.ndarray | None] | None,
    ) -> list[np.ndarray]:
        """The whole step's run when it lists the model's outputs in another order (``pick``):
        the request's dims and the outputs' places handed over in its order, its outputs
        taken back in the model's."""
        wanted = list(whole.output_operands)
        step_into: list[np.ndarray | None] | None = None if into is None else [None] * len(wanted)
        for k, at in enumerate(pick):
            if output_operands is not None:
                wanted[at] = output_operands[k]
            if step_into is not None and into is not None:
                step_into[at] = into[k]
        outs = whole.graph.run(inputs, control, wanted, step_into)
        if len(outs) < len(wanted):
            raise GeneralFailure(f"output operand {whole.placed.outputs[len(outs)]} was never written")
        return [outs[at] for at in pick]


class PartitionedBackend:
    """``inner`` with the reference executor behind it (``nnhal.server.backend.Backend``)."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.description = f"{inner.description}; the rest on the numpy CPU executor inside the device"
        #: Operations of every model compiled or loaded, by place and operation type (``placement_counts``).
        self._placed: dict[int, Counter[str]] = {BACKEND: Counter(), FALLBACK: Counter()}
        self._placed_lock = threading.Lock()  # a leaf

    def _count(self, model: Model, steps: Sequence[PlacedStep]) -> None:
        with self._placed_lock:
            for step in steps:
                self._placed[step.place].update(model.main.operations[k].type.name for k in step.operations)

    def placement_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """The operations of every model this backend compiled or loaded since it was made,
        by operation type: those on the library, those on the fallback."""
        with self._placed_lock:
            return dict(self._placed[BACKEND]), dict(self._placed[FALLBACK])

    def supported_operations(
        self, model: Model, pools: Sequence[Buffer], level: HalVersion
    ) -> tuple[list[bool], list[str]]:
        """Every operation the reference validates; the reason of one the library lacks says
        it runs on the fallback and why (``FALLBACK_REASON``), "" for the library's own."""
        supported, reasons = reference_support(model, pools, level)
        if not any(supported):
            return supported, reasons
        _, inner_reasons = self.inner.supported_operations(model, pools, level)
        for k, ok in enumerate(supported):
            if ok and inner_reasons[k]:
                reasons[k] = FALLBACK_REASON + inner_reasons[k]
        return supported, reasons

    def placement(self, model: Model, pools: Sequence[Buffer]) -> list[PlacedStep]:
        return place_operations(self.inner, model, pools)

    def compile(self, model: Model, pools: Sequence[Buffer]) -> tuple[ExecutableGraph, bytes]:
        steps = self.placement(model, pools)
        header: list[dict[str, object]] = []
        payloads: list[bytes] = []
        graphs: list[_Step] = []
        for placed in steps:
            sub = subgraphs.step_model(model, placed.operations, placed.inputs, placed.outputs)
            graph: ExecutableGraph
            if placed.place == BACKEND:
                try:
                    graph, payload = self.inner.compile(sub, pools)
                except GeneralFailure as err:
                    # The library refused a step it said it takes: the reference runs it.
                    _log.warning("%s: operations %s run on the fallback: %s", self.kind, placed.operations, err)
                    placed = replace(placed, place=FALLBACK)
            if placed.place == FALLBACK:
                sub = self_contained(sub, pools)
                graph, payload = PreparedGraph(sub, ()), wire_model.model_to_bytes(sub)
            graphs.append(_Step(placed, graph, [sub.main.operands[i] for i in sub.main.output_indexes]))
            header.append(_step_header(placed, len(payload)))
            payloads.append(payload)
        head = json.dumps(header).encode()
        artifact = b"".join((_MAGIC, _LENGTH.pack(len(head)), head, *payloads))
        self._count(model, [s.placed for s in graphs])
        return PartitionedGraph(model, self.kind, graphs), artifact

    def load(self, model: Model, pools: Sequence[Buffer], artifact: bytes | memoryview | Pieces) -> ExecutableGraph:
        """The graph from a ``compile`` artifact (sealed by this server's cache). ``model``
        may be the skeleton (no constants)."""
        # Steps' payloads are views (of a piece's tail when one lies there whole): the inner
        # load copies what it keeps.
        pieces = artifact if isinstance(artifact, Pieces) else Pieces(artifact, b"")
        header, at = _header(pieces)
        view = pieces.view
        graphs = []
        for entry in header:
            placed = PlacedStep(
                int(entry["place"]),
                tuple(entry["operations"]),
                tuple(entry["inputs"]),
                tuple(entry["outputs"]),
            )
            size = int(entry["size"])
            if size < 0 or at + size > len(pieces):
                raise GeneralFailure("the cached partitioned artifact is truncated")
            payload = view(at, at + size)
            at += size
            sub = subgraphs.step_model(model, placed.operations, placed.inputs, placed.outputs)
            graph: ExecutableGraph
            if placed.place == BACKEND:
                graph = self.inner.load(sub, pools, payload)
            else:
                sub = wire_model.model_from_bytes(bytes(payload))
                graph = PreparedGraph(sub, ())
            graphs.append(_Step(placed, graph, [sub.main.operands[i] for i in sub.main.output_indexes]))
        self._count(model, [s.placed for s in graphs])
        return PartitionedGraph(model, self.kind, graphs)

    def tail_start(self, artifact: bytes | memoryview) -> int | None:
        """Within the last step's payload when the library runs it (the largest, for a model
        the library takes whole)."""
        header, _ = _header(Pieces(artifact, b""))
        if not header or int(header[-1]["place"]) != BACKEND:
            return None
        last = len(artifact) - int(header[-1]["size"])
        inner = self.inner.tail_start(memoryview(artifact)[last:])
        return None if inner is None else last + inner

    def capabilities(self) -> Capabilities:
        return self.inner.capabilities()


def _header(artifact: Pieces) -> tuple[list[Any], int]:
    """The steps' header of a partitioned artifact, and where its payloads start."""
    if len(artifact) < len(_MAGIC) + _LENGTH.size or bytes(artifact.view(0, len(_MAGIC))) != _MAGIC:
        raise GeneralFailure("the cached artifact is not a partitioned one")
    at = len(_MAGIC) + _LENGTH.size
    (n,) = _LENGTH.unpack_from(artifact.view(len(_MAGIC), at))
    if at + n > len(artifact):
        raise GeneralFailure("the cached partitioned artifact is truncated")
    header = json.loads(bytes(artifact.view(at, at + n)))
    if not isinstance(header, list):
        raise GeneralFailure("the cached artifact is not a partitioned one")
    return header, at + n


def _step_header(placed: PlacedStep, size: int) -> dict[str, object]:
    return {
        "place": placed.place,
        "operations": list(placed.operations),
        "inputs": list(placed.inputs),
        "outputs": list(placed.outputs),
        "size": size,
    }

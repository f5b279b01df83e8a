"""What an execution works out from a request's layout, once per layout (the repeat-request hot path).

A request's *layout* — its input and output arguments (omissions, locations,
dimensions) and the real sizes of its pools — decides everything about an
execution that does not depend on the bytes: whether the request is valid for
the model (``validate_request`` is a function of the layout and the model
alone), which pools receive outputs, how each input is viewed as an array,
which outputs override the model's operand shapes, and where each output is
written. A ``RequestPlan`` holds those answers; ``PlanCache`` (one per prepared
model) keeps the plans of the layouts seen last, so that a burst or a loop of
executions of one shape validates and plans once and then only moves bytes.

Correctness: a plan is looked up by the arguments (equal arguments, equal
plan) and used only when the bound pools have exactly the sizes it was
validated with; anything else (a new layout, other pool sizes, a request with
driver-managed buffers, whose arguments are rewritten per execution from the
buffers' current shapes) is validated in full and planned afresh. Dynamic
shapes keep their per-execution checks: output sizes are compared with what
the execution produced every time (OUTPUT_INSUFFICIENT_SIZE).

Thread-safety: plans are immutable (but for the output shapes of their last
execution, immutable values replaced whole by one assignment); the cache is a small dict
whose reads need no lock (one assignment publishes a plan) and whose writes take a leaf lock.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from nnhal.core import large_copy
from nnhal.core.enums import OperandType
from nnhal.core.errors import InvalidArgument, OutputInsufficientSize
from nnhal.core.operand_types import DTYPE, INFO
from nnhal.core.types import Operand, OutputShape, Request, RequestArgument
from nnhal.server.memory import BoundPools

#: How many layouts one prepared model remembers (a client typically sends one or two).
CACHED_LAYOUTS = 8

_BOOL_TYPES = (OperandType.TENSOR_BOOL8, OperandType.BOOL)


@dataclass(frozen=True, slots=True)
class _Input:
    """How one input is viewed: ``count`` elements of ``dtype`` at ``offset`` of pool ``pool``."""

    pool: int
    offset: int
    dtype: np.dtype
    count: int
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Output:
    """Where one output goes (``pool`` -1: it has no value) and what decides how."""

    pool: int
    offset: int
    length: int
    is_tensor: bool
    as_uint8: bool
    #: The only argument in its pool, at offset 0: it may become the pool's bytes whole.
    alone: bool
    #: Its pool is one of ``RequestPlan.filled``: every byte of its location is written.
    fills: bool = False


class RequestPlan:
    """The layout-dependent half of executing one request (module docstring)."""

    __slots__ = (
        "__weakref__",  # a burst's ``repeat.Repeat`` holds its plan weakly (a released model's is let go)
        "_inputs",
        "_outputs",
        "_shapes",
        "_targets",
        "_views",
        "_whole",
        "binding",
        "filled",
        "lane",
        "overrides",
        "pool_bytes",
        "sizes",
        "writable",
    )

    def __init__(
        self, request: Request, sizes: Sequence[int], inputs: Sequence[Operand], outputs: Sequence[Operand]
    ) -> None:
        """``request`` was validated against the model with pools of ``sizes``; ``inputs`` and
        ``outputs`` are the model's main input and output operands."""
        self.sizes = tuple(sizes)
        #: The pools' sizes together (what a request of this layout carries when all are inline).
        self.pool_bytes = sum(self.sizes)
        self.writable = output_pools(request)
        #: Per pool, its index, size and whether it receives outputs: what a request of the
        #: layout whose pools are all inline binds each by (``executions.lean``: made once here).
        self.binding = tuple((i, size, i in self.writable) for i, size in enumerate(self.sizes))
        #: The layout's lane on the plan's prepared model as the lean launch worked it out once
        #: (``executions.lean``: in a one-tuple, None inside when there is none); None: not yet.
        self.lane: tuple[Any] | None = None
        self._inputs = tuple(_plan_input(op, arg) for op, arg in zip(inputs, request.inputs))
        #: Every input present and not empty: the array constructor's arguments for each but its
        #: buffer (``bind_inputs``), made once; None: each input looked at per call.
        self._views: tuple[tuple[tuple[int, ...], np.dtype, int, int], ...] | None = None
        if all(i is not None and i.count for i in self._inputs):
            self._views = tuple((i.shape, i.dtype, i.pool, i.offset) for i in self._inputs if i is not None)
        users: dict[int, int] = {}
        for a in (*request.inputs, *request.outputs):
            if not a.has_no_value:
                users[a.location.pool_index] = users.get(a.location.pool_index, 0) + 1
        targets = tuple(_plan_target(op, arg) for op, arg in zip(outputs, request.outputs))
        #: The output pools whose every byte a completed execution writes (``filled_pools``):
        #: one bound in a place that holds other bytes need not be zeroed first
        #: (``memory.bind_inline``'s ``whole``).
        self.filled = filled_pools(request, targets, self.sizes)
        self._outputs = tuple(_plan_output(op, arg, users, self.filled) for op, arg in zip(outputs, request.outputs))
        #: Every output a tensor (not a bool) with a value, alone in its pool and its location
        #: the whole pool: a repeat of the layout may make each output's bytes its pool whole
        #: (``write_outputs``).
        self._whole = all(
            o.pool >= 0 and o.alone and o.is_tensor and not o.as_uint8 and o.length == self.sizes[o.pool]
            for o in self._outputs
        )
        #: Per output, the place a graph may write it in (``output_targets``); None when none has one.
        self._targets = targets if any(targets) else None
        #: The output shapes of the last execution whose outputs all fitted and were written
        #: (shared, immutable; handed back whole while the shapes stay: ``write_outputs``).
        self._shapes: tuple[OutputShape, ...] | None = None
        #: The output operands with the request's dims where it gives them (None: the model's own).
        self.overrides: list[Operand] | None = None
        if any(a.dimensions for a in request.outputs):
            self.overrides = [
                replace(op, dimensions=arg.dimensions) if arg.dimensions else op
                for op, arg in zip(outputs, request.outputs)
            ]

    def fits(self, bound: BoundPools) -> bool:
        """Whether this plan holds for a request of its layout bound to ``bound``."""
        return not bound.has_tokens and bound.sizes == self.sizes

    def bind_inputs(self, buffers: Sequence[bytes | bytearray | memoryview]) -> list[np.ndarray | None]:
        """The input arrays: views of the pools' bytes (None for an omitted input; read-only
        but for a pool that also receives outputs)."""
        # One array constructor per input (``np.frombuffer`` then ``reshape`` costs three times
        # as much); an empty input, which may sit at its pool's very end, keeps ``frombuffer``.
        # A loop, not a comprehension: on every execution's path, where a comprehension's own
        # call costs as much as the one or two arrays it makes.
        nd = np.ndarray
        arrays: list[np.ndarray | None] = []
        views = self._views
        if views is not None:  # each input an array over its place: the common layout
            for shape, dtype, pool, offset in views:
                arrays.append(nd(shape, dtype, buffers[pool], offset))
            return arrays
        for i in self._inputs:
            if i is None:
                arrays.append(None)
            elif i.count:
                arrays.append(nd(i.shape, i.dtype, buffers[i.pool], i.offset))
            else:
                arrays.append(np.frombuffer(buffers[i.pool], dtype=i.dtype, count=0, offset=i.offset).reshape(i.shape))
        return arrays

    def output_targets(self, pools: BoundPools) -> list[np.ndarray | None] | None:
        """Per output, a writable array over its place in its inline output pool, of the shape
        and dtype the model (or the request) fixes for it — None for an output with no such
        place (no value, a shape not fully known, a bool, too small a location); None when no
        output has one or the request has driver-managed buffers. What a graph may write its
        outputs into (``ExecutableGraph.run``'s ``into``)."""
        targets = self._targets
        if targets is None or pools.token_outputs:
            return None
        inline, nd = pools.inline_outputs, np.ndarray
        arrays: list[np.ndarray | None] = []
        for t in targets:  # a loop: see ``bind_inputs``
            arrays.append(None if t is None or (buf := inline.get(t[0])) is None else nd(t[2], t[3], buf, t[1]))
        return arrays

    def write_outputs(
        self, pools: BoundPools, values: Sequence[np.ndarray], into: Sequence[np.ndarray | None] | None = None
    ) -> tuple[OutputShape, ...]:
        """Check every output fits its location (OUTPUT_INSUFFICIENT_SIZE with the shapes
        otherwise), then write them: into driver-managed buffers, as the whole bytes of an
        inline pool an output fills alone, or into the pool's bytes — but for an output that
        is its ``into`` array itself (``output_targets``), which is there already. ``pools`` had
        its ``check_shared`` (a shared output pool's staging buffer holds the region's bytes,
        which an output shorter than its range leaves as they were)."""
        last = self._shapes
        tokens = pools.token_outputs
        if last is not None and not tokens and len(values) == len(self._outputs) and (self._whole or into is not None):
            # The repeat of a layout whose every output keeps the last call's shape and either
            # is its ``into`` array (``output_targets``: of the shape and dtype fixed for it, over
            # its place, which it fits), in its pool already, or — the outputs each filling a
            # pool of their own (``_whole``) — is of its pool's size (so it fits its location,
            # which it fills) and becomes its pool's bytes, as below: the last call's
            # (immutable) shapes back. Any other value: the general steps below, from the start.
            inline, outs, whole = pools.inline_outputs, self._outputs, self._whole
            for k, value in enumerate(values):
                if value.shape != last[k].dimensions:
                    break
                if into is not None and value is into[k]:
                    continue
                out = outs[k]
                pool = inline.get(out.pool)
                if not whole or type(pool) is not bytearray or value.nbytes != len(pool) or value.dtype == np.bool_:
                    break
                inline[out.pool] = value.tobytes()
            else:
                return last
        insufficient = False
        kept = last is not None
        shapes: list[OutputShape] = []
        for k, (out, value) in enumerate(zip(self._outputs, values)):
            ok = out.pool < 0 or value.nbytes <= out.length or k in tokens
            insufficient |= not ok
            dims = value.shape if out.is_tensor else ()
            # A layout's outputs mostly keep their shapes: the last call's (immutable) values are reused.
            if last is not None and ok and last[k].dimensions == dims:
                shapes.append(last[k])
            else:
                shapes.append(OutputShape(dims, ok))
                kept = False
        if insufficient:
            err = OutputInsufficientSize(
                "output buffer too small: "
                + ", ".join(
                    f"output {k} needs {v.nbytes} bytes, has {o.length}"
                    for k, (o, v, s) in enumerate(zip(self._outputs, values, shapes))
                    if not s.is_sufficient
                )
            )
            err.shapes = tuple(shapes)  # type: ignore[attr-defined]
            raise err
        inline = pools.inline_outputs
        for k, (out, value) in enumerate(zip(self._outputs, values)):
            if k in tokens:  # zero-sized results too: they initialize the buffer
                tokens[k].store(value.tobytes(), value.shape)  # C order
                continue
            if out.fills and value.nbytes < out.length and (into is None or value is not into[k]):
                # A pool of ``filled`` may hold other bytes (``bind_inline``'s ``whole``):
                # what this shorter value leaves of its location is zeroed, as it would be.
                np.frombuffer(pools.buffers[out.pool], np.uint8, out.length, out.offset)[value.nbytes :] = 0
            if out.pool < 0 or value.nbytes == 0 or (into is not None and value is into[k]):
                continue
            pool = inline.get(out.pool)
            if out.alone and isinstance(pool, bytearray) and value.nbytes == len(pool) and value.dtype != np.bool_:
                # The output fills an inline pool of its own: its bytes become the pool,
                # with no staging copy (the pool's zeroed pages were never touched).
                inline[out.pool] = value.tobytes()
                continue
            dst = np.frombuffer(pools.buffers[out.pool], dtype=np.uint8, count=value.nbytes, offset=out.offset)
            if not dst.flags.writeable:
                raise InvalidArgument(f"output pool {out.pool} is not writable")
            if out.as_uint8:
                value = value.astype(np.uint8)
            large_copy.copy(dst, np.ascontiguousarray(value).reshape(-1).view(np.uint8))
        if kept and last is not None:
            return last  # the very tuple the last call returned: a reader may know it by identity
        self._shapes = answer = tuple(shapes)
        return answer

    def lane_io(
        self,
    ) -> (
        tuple[
            tuple[tuple[int, int, int, np.dtype, tuple[int, ...]], ...],
            tuple[tuple[int, int, int, np.dtype, tuple[int, ...]], ...],
            tuple[OutputShape, ...],
        ]
        | None
    ):
        """The layout as bytes in and bytes out, for a graph's lane (``backend.LaneGraph``):
        per input and per output its pool, offset, byte count, dtype and shape, and the output
        shapes of a completed execution (the last call's tuple while it holds). None unless
        every input has a value in a pool no output uses, and every output is a tensor (no
        bool) of a known shape whose place is its location's exact length, in a pool its
        outputs tile whole (``filled``): then an execution is each input's bytes copied in and
        each output's bytes copied to its location, which it fills, and every output is
        sufficient."""
        targets = self._targets
        if targets is None:
            return None
        ins = []
        for i in self._inputs:
            if i is None or i.pool in self.writable:
                return None
            ins.append((i.pool, i.offset, i.count * i.dtype.itemsize, i.dtype, i.shape))
        outs = []
        for out, t in zip(self._outputs, targets, strict=True):
            if t is None or out.pool not in self.filled:
                return None
            outs.append((out.pool, out.offset, out.length, t[3], t[2]))
        last = self._shapes
        shapes = tuple(OutputShape(o[4], True) for o in outs)
        return tuple(ins), tuple(outs), shapes if last is None or last != shapes else last


def output_pools(request: Request) -> frozenset[int]:
    """The pools that receive the request's outputs."""
    return frozenset(a.location.pool_index for a in request.outputs if not a.has_no_value)


def _plan_input(operand: Operand, arg: RequestArgument) -> _Input | None:
    if arg.has_no_value:
        return None
    dims = (arg.dimensions or operand.dimensions) if INFO[operand.type].is_tensor else ()
    return _Input(arg.location.pool_index, arg.location.offset, DTYPE[operand.type], math.prod(dims), dims)


def filled_pools(
    request: Request, targets: Sequence[tuple[int, int, tuple[int, ...], np.dtype] | None], sizes: Sequence[int]
) -> frozenset[int]:
    """The output pools whose every byte a completed execution writes: pools that only
    outputs use, whose locations tile them exactly (no gap, no overlap) and each of whose
    outputs has a place of its location's exact length (``_plan_target``). A graph writes
    such an output whole into its place, or ``RequestPlan.write_outputs`` writes its value
    there and zeroes what a shorter one leaves."""
    spans: dict[int, list[tuple[int, int]]] = {}
    others: set[int] = set()  # pools with an input or a location not surely written whole
    for arg, target in zip(request.outputs, targets):
        if arg.has_no_value:
            continue
        loc = arg.location
        if target is None or math.prod(target[2]) * target[3].itemsize != loc.length:
            others.add(loc.pool_index)
        else:
            spans.setdefault(loc.pool_index, []).append((loc.offset, loc.length))
    others.update(arg.location.pool_index for arg in request.inputs if not arg.has_no_value)
    filled = []
    for pool, pieces in spans.items():
        if pool in others or not 0 <= pool < len(sizes):
            continue
        at = 0
        for offset, length in sorted(pieces):
            if offset != at:
                break
            at += length
        else:
            if at == sizes[pool]:
                filled.append(pool)
    return frozenset(filled)


def _plan_output(operand: Operand, arg: RequestArgument, users: dict[int, int], filled: frozenset[int]) -> _Output:
    if arg.has_no_value:
        return _Output(-1, 0, 0, INFO[operand.type].is_tensor, False, False)
    loc = arg.location
    return _Output(
        loc.pool_index,
        loc.offset,
        loc.length,
        INFO[operand.type].is_tensor,
        operand.type in _BOOL_TYPES,
        users.get(loc.pool_index) == 1 and loc.offset == 0,
        loc.pool_index in filled,
    )


def _plan_target(operand: Operand, arg: RequestArgument) -> tuple[int, int, tuple[int, ...], np.dtype] | None:
    """Where an output may be written in place (``RequestPlan.output_targets``): its pool,
    offset, shape and dtype, when its shape is fully known and fits its location."""
    if arg.has_no_value or not INFO[operand.type].is_tensor or operand.type in _BOOL_TYPES:
        return None
    dims = tuple(arg.dimensions or operand.dimensions)
    dtype = DTYPE[operand.type]
    nbytes = math.prod(dims) * dtype.itemsize
    if not dims or 0 in dims or nbytes > arg.location.length:
        return None
    return arg.location.pool_index, arg.location.offset, dims, dtype


class PlanCache:
    """The plans of the layouts one prepared model saw last (at most :data:`CACHED_LAYOUTS`)."""

    def __init__(self, inputs: Sequence[Operand], outputs: Sequence[Operand]) -> None:
        self._inputs = tuple(inputs)
        self._outputs = tuple(outputs)
        self._plans: dict[tuple[tuple[RequestArgument, ...], tuple[RequestArgument, ...]], RequestPlan] = {}
        self._lock = threading.Lock()  # a leaf: guards replacing the dict's contents
        #: The last plan found, with the very argument tuples it was found for: a caller that
        #: sends the same tuples again (the same-host queue's compact calls rebuild requests
        #: from one validated layout) is answered without hashing them — the arguments'
        #: dataclass hashes are most of a lookup's cost. Replaced whole (one assignment).
        self._last: tuple[tuple[RequestArgument, ...], tuple[RequestArgument, ...], RequestPlan] | None = None

    def get(self, request: Request) -> RequestPlan | None:
        """The plan remembered for ``request``'s arguments (check ``fits`` before using it)."""
        return self.of(request.inputs, request.outputs)

    def of(self, inputs: tuple[RequestArgument, ...], outputs: tuple[RequestArgument, ...]) -> RequestPlan | None:
        """The plan remembered for these arguments (``get``, given the arguments only)."""
        last = self._last
        if last is not None and last[0] is inputs and last[1] is outputs:
            return last[2]
        plan = self._plans.get((inputs, outputs))
        if plan is not None:
            self._last = (inputs, outputs, plan)
        return plan

    def learn(self, request: Request, bound: BoundPools) -> RequestPlan:
        """The plan of ``request``, validated against the model with ``bound``'s pools;
        remembered unless the request uses driver-managed buffers."""
        plan = RequestPlan(request, bound.sizes, self._inputs, self._outputs)
        if not bound.has_tokens:
            with self._lock:
                if len(self._plans) >= CACHED_LAYOUTS:
                    self._plans.pop(next(iter(self._plans)))  # the oldest
                self._plans[(request.inputs, request.outputs)] = plan
                # A plan replaced (the same arguments, other pool sizes) is found no more by
                # ``of``'s shortcut either: else the layout's lean launches would find the old
                # plan, which does not fit, until another layout's lookup.
                self._last = None
        return plan

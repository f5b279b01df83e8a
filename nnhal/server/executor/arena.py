"""Operand buffers planned once per prepared subgraph and reused across executions.

At prepare the graph gives every intermediate operand that a bound kernel produces with a
static shape a buffer (``ArenaLayout.place``): a view at the start of a slot, an offset in one
block of memory. An execution checks an ``Arena`` (one such block with its views) out of the
``ArenaPool`` and hands each bound kernel its output buffers to write into; the arena goes back
to the pool when the execution ends. Executions running at the same time on one prepared model
each hold their own arena.

Contracts:

- a slot is shared only by operands whose lives do not overlap: an operand's slot is given back
  (``ArenaLayout.free``) after its last reader, and only when every reader is an operation whose
  kernels never return a view of their inputs (the bound ones); an operand read by another
  operation keeps its slot for the whole execution, since a view of it may live on. So no kernel
  writes into memory a live value uses, and a slot of recently used memory is reused while it
  is still in cache;
- a small model input of a fixed shape may get a slot of its own for the whole execution
  (``Arena.load`` copies the caller's array into it, so the steps reading it can be bound to
  fixed arrays), and so may a small model output a bound kernel writes; such slots are never
  reused within an execution. ``PreparedGraph.run`` copies any result that still shares memory
  with the arena (an output's slot, a view an operation returned), so nothing the caller
  receives is overwritten by a later execution;
- operands of unknown shape, and kernels that decline their buffer, allocate afresh.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

#: Slots start on this many bytes (a cache line; SIMD loads stay aligned).
ALIGN = 64
#: Idle arenas a pool keeps; executions beyond that many at once allocate one and drop it.
KEPT = 4


@dataclass(frozen=True, slots=True)
class Placement:
    """One operand's buffer: the first bytes of slot ``slot``, as ``shape`` and ``dtype``."""

    slot: int
    shape: tuple[int, ...]
    dtype: np.dtype[np.generic]


class ArenaLayout:
    """Slots of one subgraph: offsets and capacities in one block, reused as operands die."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.capacities: list[int] = []
        self.placements: list[Placement] = []
        self.nbytes = 0
        self._free: list[int] = []

    def place(self, shape: tuple[int, ...], dtype: np.dtype[np.generic]) -> int:
        """A buffer for an operand of ``shape`` and ``dtype`` in the most recently freed slot
        that fits it (at most twice its size), else in a new slot; returns the placement's
        number."""
        size = dtype.itemsize * math.prod(shape)
        # The most recently freed slot that fits: its memory is the likeliest still in cache.
        fits = [s for s in self._free if size <= self.capacities[s] <= 2 * size]
        if fits:
            slot = fits[-1]
            self._free.remove(slot)
        else:
            slot = len(self.offsets)
            offset = -(-self.nbytes // ALIGN) * ALIGN
            self.offsets.append(offset)
            self.capacities.append(size)
            self.nbytes = offset + size
        self.placements.append(Placement(slot, shape, dtype))
        return len(self.placements) - 1

    def free(self, placement: int) -> None:
        """The operand of ``placement`` is dead: its slot may hold a later operand."""
        self._free.append(self.placements[placement].slot)


class Arena:
    """One block of ``layout.nbytes`` bytes and, per step, the views its kernel writes into.

    ``outputs[k]`` is the list of output buffers of step ``k`` (None where the step has no slot
    for that output); ``inputs[n]`` the buffer of the model's input ``n`` (None where it has
    none); ``block`` lets results be checked for sharing memory with the arena."""

    def __init__(
        self,
        layout: ArenaLayout,
        step_slots: Sequence[tuple[int | None, ...]],
        input_slots: Sequence[int | None] = (),
    ) -> None:
        self.block = np.empty(layout.nbytes + ALIGN, np.uint8)
        base = (-self.block.ctypes.data) % ALIGN
        views = []
        for p in layout.placements:
            start = base + layout.offsets[p.slot]
            views.append(
                self.block[start : start + p.dtype.itemsize * math.prod(p.shape)].view(p.dtype).reshape(p.shape)
            )
        self.outputs: list[list[np.ndarray | None]] = [
            [None if n is None else views[n] for n in slots] for slots in step_slots
        ]
        self.inputs: tuple[np.ndarray | None, ...] = tuple(None if n is None else views[n] for n in input_slots)
        #: Per input with a buffer: its position, the buffer, its shape and dtype (``load``).
        self._loads = tuple((n, view, view.shape, view.dtype) for n, view in enumerate(self.inputs) if view is not None)
        #: Set by the pool's ``on_new`` (the graph's static program on these buffers): per step,
        #: fixed calls or None; and the values a run on this arena starts from.
        self.program: list[tuple[Callable[[], object], ...] | None] = []
        self.values: list[np.ndarray | None] | None = None
        #: Set by ``on_new`` when every step is static and the model's outputs are buffers: the
        #: whole program as segments of fixed calls (a checkpoint before each), and the buffers
        #: holding the model's outputs after it ran (PreparedGraph's straight run).
        self.straight: tuple[tuple[Callable[[], object], ...], ...] | None = None
        self.results: tuple[np.ndarray, ...] = ()
        #: With ``straight``, when every model input has a buffer: the input buffers' and the
        #: results' bytes, as writable byte views (a graph's lane copies through them,
        #: ``PreparedGraph.lane``); None otherwise.
        self.io_bytes: tuple[tuple[memoryview, ...], tuple[memoryview, ...]] | None = None

    def load(self, inputs: Sequence[np.ndarray | None]) -> bool:
        """Copy each model input that has a buffer into it; False (the arena's buffers then hold
        nothing the caller may rely on) when one is missing or not of its buffer's shape and
        dtype (then the execution cannot run on fixed arrays)."""
        if len(inputs) != len(self.inputs):
            return False
        for n, view, shape, dtype in self._loads:
            value = inputs[n]
            if value is None or value.shape != shape or (value.dtype is not dtype and value.dtype != dtype):
                return False
            view[...] = value  # of its buffer's shape and dtype: np.copyto's copy, without its dispatch
        return True

    def owns(self, value: np.ndarray) -> bool:
        """Whether ``value`` may share memory with this arena (then it must be copied out)."""
        return bool(np.may_share_memory(value, self.block))


class ArenaPool:
    """Arenas of one layout, checked out one per execution. Thread-safe (``deque.pop`` and
    ``deque.append`` are atomic)."""

    def __init__(
        self,
        layout: ArenaLayout,
        step_slots: Sequence[tuple[int | None, ...]],
        input_slots: Sequence[int | None] = (),
    ) -> None:
        self._layout = layout
        self._step_slots = list(step_slots)
        self._input_slots = tuple(input_slots)
        #: The idle arenas, the most recently given back last (taken first: its memory is the
        #: likeliest still in cache); at most :data:`KEPT`, the oldest dropped beyond them.
        self._idle: collections.deque[Arena] = collections.deque(maxlen=KEPT)
        #: Give back an arena: the caller holds nothing that shares its memory any more. One C
        #: call (the deque's ``append``: atomic, and at most :data:`KEPT` idle arenas kept, the
        #: one given back longest ago dropped for a newer one).
        self.checkin: Callable[[Arena], None] = self._idle.append
        #: Called with each arena made, before its first use.
        self.on_new: Callable[[Arena], None] | None = None

    @property
    def nbytes(self) -> int:
        """The memory one arena of this pool takes."""
        return self._layout.nbytes + ALIGN

    def checkout(self) -> Arena:
        """An arena no other execution holds (made on first use, then reused)."""
        try:
            return self._idle.pop()  # atomic: two executions never take one arena
        except IndexError:
            pass
        arena = Arena(self._layout, self._step_slots, self._input_slots)
        if self.on_new is not None:
            self.on_new(arena)
        return arena

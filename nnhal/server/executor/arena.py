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
- operands the model outputs (or takes as inputs) never get a slot, and ``PreparedGraph.run``
  copies any result that still shares memory with the arena (a view an operation returned),
  so nothing the caller receives is overwritten by a later execution;
- operands of unknown shape, and kernels that decline their buffer, allocate afresh.
"""

from __future__ import annotations

import math
import threading
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
    for that output); ``block`` lets results be checked for sharing memory with the arena."""

    def __init__(self, layout: ArenaLayout, step_slots: Sequence[tuple[int | None, ...]]) -> None:
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
        #: Set by the pool's ``on_new`` (the graph's static program on these buffers): per step,
        #: fixed calls or None; and the values a run on this arena starts from.
        self.program: list[tuple[Callable[[], object], ...] | None] = []
        self.values: list[np.ndarray | None] | None = None

    def owns(self, value: np.ndarray) -> bool:
        """Whether ``value`` may share memory with this arena (then it must be copied out)."""
        return bool(np.may_share_memory(value, self.block))


class ArenaPool:
    """Arenas of one layout, checked out one per execution. Thread-safe."""

    def __init__(self, layout: ArenaLayout, step_slots: Sequence[tuple[int | None, ...]]) -> None:
        self._layout = layout
        self._step_slots = list(step_slots)
        self._idle: list[Arena] = []
        self._lock = threading.Lock()
        #: Called with each arena made, before its first use.
        self.on_new: Callable[[Arena], None] | None = None

    @property
    def nbytes(self) -> int:
        """The memory one arena of this pool takes."""
        return self._layout.nbytes + ALIGN

    def checkout(self) -> Arena:
        """An arena no other execution holds (made on first use, then reused)."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        arena = Arena(self._layout, self._step_slots)
        if self.on_new is not None:
            self.on_new(arena)
        return arena

    def checkin(self, arena: Arena) -> None:
        """Give back ``arena``: the caller holds nothing that shares its memory any more."""
        with self._lock:
            if len(self._idle) < KEPT:
                self._idle.append(arena)

"""Operand buffers planned once per prepared subgraph and reused across executions.

At prepare the graph gives every intermediate operand that a bound kernel produces with a
static shape its own slot (an offset in one block of memory). An execution checks an
``Arena`` (one such block, cut into its slots) out of the ``ArenaPool`` and hands each bound
kernel its output slots to write into; the arena goes back to the pool when the execution
ends. Executions running at the same time on one prepared model each hold their own arena.

Contracts:

- a slot belongs to one operand: within an execution it is written only by that operand's
  producer, so no kernel ever writes into a buffer another live operand uses;
- operands the model outputs (or takes as inputs) never get a slot, and ``PreparedGraph.run``
  copies any result that still shares memory with the arena (a view an operation returned),
  so nothing the caller receives is overwritten by a later execution;
- operands of unknown shape, and kernels that decline their slot, allocate afresh.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Slots start on this many bytes (a cache line; SIMD loads stay aligned).
ALIGN = 64
#: Idle arenas a pool keeps; executions beyond that many at once allocate one and drop it.
KEPT = 4


@dataclass(frozen=True, slots=True)
class Slot:
    offset: int
    shape: tuple[int, ...]
    dtype: np.dtype[np.generic]


class ArenaLayout:
    """The slots of one subgraph, laid out one after the other (never shared between operands)."""

    def __init__(self) -> None:
        self.slots: list[Slot] = []
        self.nbytes = 0

    def add(self, shape: tuple[int, ...], dtype: np.dtype[np.generic]) -> int:
        """Reserve a slot for an array of ``shape`` and ``dtype``; returns its number."""
        offset = -(-self.nbytes // ALIGN) * ALIGN
        self.slots.append(Slot(offset, shape, dtype))
        self.nbytes = offset + dtype.itemsize * math.prod(shape)
        return len(self.slots) - 1


class Arena:
    """One block of ``layout.nbytes`` bytes and, per step, the views its kernel writes into.

    ``outputs[k]`` is the list of output buffers of step ``k`` (None where the step has no slot
    for that output); ``block`` lets results be checked for sharing memory with the arena."""

    def __init__(self, layout: ArenaLayout, step_slots: Sequence[tuple[int | None, ...]]) -> None:
        self.block = np.empty(layout.nbytes + ALIGN, np.uint8)
        base = (-self.block.ctypes.data) % ALIGN
        views = [
            self.block[base + s.offset : base + s.offset + s.dtype.itemsize * math.prod(s.shape)]
            .view(s.dtype)
            .reshape(s.shape)
            for s in layout.slots
        ]
        self.outputs: list[list[np.ndarray | None]] = [
            [None if n is None else views[n] for n in slots] for slots in step_slots
        ]

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

    def checkout(self) -> Arena:
        """An arena no other execution holds (made on first use, then reused)."""
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return Arena(self._layout, self._step_slots)

    def checkin(self, arena: Arena) -> None:
        """Give back ``arena``: the caller holds nothing that shares its memory any more."""
        with self._lock:
            if len(self._idle) < KEPT:
                self._idle.append(arena)

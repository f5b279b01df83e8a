"""Memory reservation before allocation: the executor's side of the memory limits.

An execution's ``ExecutionControl`` is made current for the thread running it
(``current``); the graph and every kernel or shared helper that is about to
allocate a tensor whose size the request controls (an output, a padded copy,
im2col patches, a broadcast) calls :func:`reserve` with its size first. The
control counts the bytes the execution holds and asks the server's budget for
more whenever that count passes what it was granted, so an execution that
cannot fit fails with RESOURCE_EXHAUSTED_* before numpy allocates anything.
Sizes are Python integers: a shape of 2^31-1 by 2^31-1 is refused, never
overflowed. Without a current control (tests, a server without limits) a
reservation is only checked against the machine: one allocation larger than its
physical memory (:data:`MACHINE_BYTES`) is RESOURCE_EXHAUSTED_PERSISTENT, never a
numpy error or an attempt that the kernel's out-of-memory killer would end.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Protocol

from nnhal.core.errors import ResourceExhaustedPersistent
from nnhal.core.validation import MAX_TENSOR_BYTES


def _machine_bytes() -> int:
    try:
        return min(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), MAX_TENSOR_BYTES)
    except (ValueError, OSError):
        return MAX_TENSOR_BYTES


#: The physical memory of this machine: no single allocation can be larger.
MACHINE_BYTES = _machine_bytes()


class Holder(Protocol):
    def hold(self, nbytes: int) -> None: ...

    def drop(self, nbytes: int) -> None: ...


class _Current(threading.local):
    holder: Holder | None = None


_CURRENT = _Current()


@contextmanager
def current(holder: Holder | None) -> Iterator[None]:
    """Make ``holder`` the target of this thread's reservations (nesting restores the outer one)."""
    outer = _CURRENT.holder
    _CURRENT.holder = holder
    try:
        yield
    finally:
        _CURRENT.holder = outer


def make_current(holder: Holder | None) -> Holder | None:
    """``current`` without the context manager, for a hot path: make ``holder`` the target and
    return the one it replaces (the caller restores it the same way, in a ``finally``)."""
    outer = _CURRENT.holder
    _CURRENT.holder = holder
    return outer


def reserve(nbytes: int) -> None:
    """Count ``nbytes`` about to be allocated until the current operation ends.

    Raises the budget's RESOURCE_EXHAUSTED_* when the execution cannot hold them."""
    if nbytes > MACHINE_BYTES:
        raise ResourceExhaustedPersistent(
            f"the execution needs {nbytes} bytes at once, more than this machine's {MACHINE_BYTES} bytes of memory"
        )
    holder = _CURRENT.holder
    if holder is not None and nbytes > 0:
        holder.hold(nbytes)


def release(nbytes: int) -> None:
    """Scratch of ``nbytes`` reserved earlier in this operation was freed (a loop's previous pass)."""
    holder = _CURRENT.holder
    if holder is not None and nbytes > 0:
        holder.drop(nbytes)


def shape_bytes(shape: Iterable[int], itemsize: int, copies: int = 1) -> int:
    return math.prod(max(int(d), 0) for d in shape) * itemsize * copies


def reserve_shape(shape: Iterable[int], itemsize: int, copies: int = 1) -> None:
    """``reserve`` for ``copies`` arrays of ``shape`` with ``itemsize``-byte elements."""
    reserve(shape_bytes(shape, itemsize, copies))

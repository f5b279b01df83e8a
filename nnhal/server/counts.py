"""Event counts that every call moves (``Counter``): exact, thread-safe and lock-free."""

from __future__ import annotations

import itertools
from collections.abc import Callable


class Counter:
    """A thread-safe event count (statistics): ``increment()`` is one C call, no lock and no
    Python frame — ``itertools.count``'s ``__next__``, which runs whole under the GIL, so no
    increment is lost — and ``value`` is the exact number of increments so far."""

    __slots__ = ("_count", "increment")

    def __init__(self) -> None:
        self._count = itertools.count()
        #: Count one event (returns the count before it: ignore it).
        self.increment: Callable[[], int] = self._count.__next__

    @property
    def value(self) -> int:
        # ``count(n)``: its next value, read without taking it (its repr is the one public
        # reading of it).
        return int(repr(self._count)[6:-1])

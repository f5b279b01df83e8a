"""``Afterwards``: the work a call leaves to run once its answer has left — answer first,
account after.

After its run, a synchronous execution still has bookkeeping to do that its answer does
not wait for: the job's close (a lean run's scheduler slot and its request data's charge
given back, its pools dropped) and the lifecycle's ``leave``. On the same-host queue a
small call's round trip is CPU-bound on both sides, so that work, done before the answer
is written, is on the client's critical path; done after it, it overlaps the client's own
work on the other core. ``Executions.execute`` hands it to an ``Afterwards`` when its
caller gives one (``after``), and the caller — whoever sends the answer — runs it
(:meth:`Afterwards.run`) right after the answer is written, also when writing it failed,
and before it does anything else that can block (waiting for or taking the next packet,
another queue's turn): a slot or a charge is held a few microseconds longer, never
unboundedly, and a drain (``Lifecycle``) waits for the deferred ``leave`` as it waits for
any work.

One ``Afterwards`` per same-host queue (``FastPathServicer``), used only by the thread
holding the queue (one at a time: the queue server's or a worker's), so it needs no lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class Afterwards:
    """Work to run once an answer has left (module docstring): ``defer(fn)`` adds ``fn``;
    ``run()`` runs everything added, in order, each guarded — one that raises is logged
    and the rest still run — and nothing is ever dropped (work added meanwhile runs too,
    and what an interrupt leaves unrun stays for the next ``run``). Not thread-safe: one
    holder at a time."""

    __slots__ = ("_work", "defer")

    def __init__(self) -> None:
        self._work: list[Callable[[], object]] = []
        #: Add one piece of work (the list's own ``append``: no Python frame on the call's path).
        self.defer: Callable[[Callable[[], object]], None] = self._work.append

    def __len__(self) -> int:
        """Pieces of work waiting."""
        return len(self._work)

    def run(self) -> None:
        """Run the work waiting, in order (class docstring)."""
        work = self._work
        take = work.pop
        while work:  # what is added meanwhile runs too
            fn = take(0)  # taken before it runs: an interrupt leaves only what did not start
            try:
                fn()
            except Exception:
                log.exception("work left for after an answer failed; the rest still runs")

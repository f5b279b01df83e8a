"""The one thread per device that serves every same-host queue (``QueueServer``): waits on
all their request doorbells at once and answers each queue's packets in order, quick ones on
its own thread, slow ones on a worker (which looks for the queue's next packet a while before
it hands the queue back) while other queues are served. The queue itself (its
memfd, handover and packets): :mod:`nnhal.server.fastpath`.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from nnhal.core import lookout
from nnhal.core.doorbell import HERALD, nonblocking_pipe
from nnhal.server.executions.afterwards import Afterwards
from nnhal.server.fastpath import FastQueue, Handle, Refuse

log = logging.getLogger(__name__)

#: A queue whose last packets took at least this long has its packets answered on a worker
#: while other queues are served (:class:`QueueServer`), so that they do not wait behind it.
INLINE_MAX_NS = 1_000_000
#: ... each of its last this many packets.
_SLOW_PACKETS = 2
#: What a turn of a served queue leaves to do (``QueueServer._answer``).
_ARM, _END = object(), object()

#: The most a serving thread may be told to look for the next rung doorbell (1 ms).
SPIN_MAX_US = 1000
#: How long the serving thread looks for the next rung doorbell by default, while looking pays
#: (:class:`nnhal.core.lookout.Lookout`).
SPIN_DEFAULT_US = 200


def _look(poll: Callable[[int], list[tuple[int, int]]], last: float) -> list[tuple[int, int]]:
    """Look for ready descriptors without sleeping until ``last`` (monotonic seconds): each
    look a non-blocking ``poll(0)`` (``epoll.poll`` or ``select.poll().poll``, which let other
    threads have the GIL), then the core yielded. The events, or an empty list."""
    monotonic, yield_core = time.monotonic, os.sched_yield
    while True:
        events = poll(0)
        if events or monotonic() >= last:
            return events
        yield_core()


def spin_from_env(value: str | None) -> tuple[float, bool]:
    """Seconds the serving thread may look for the next rung doorbell before it sleeps, and
    whether it always does, from ``NNHAL_QUEUE_SPIN_US``: unset, empty or ``auto`` —
    :data:`SPIN_DEFAULT_US`, while looking pays (the lookout's policy); ``0`` or ``off`` — it
    sleeps at once; whole microseconds 1 to :data:`SPIN_MAX_US` — that long, after every
    batch (never with a single CPU allowed). Anything else is ignored with a warning: the
    default."""
    return lookout.window_from_env("NNHAL_QUEUE_SPIN_US", value, SPIN_DEFAULT_US, SPIN_MAX_US)


#: The longest the serving thread looks for a packet its client announced (``doorbell.EARLY``):
#: the client rings it as it starts copying the packet in (a face call's 192 KiB: 15-50 µs);
#: longer, the client is held up (on this thread's core, or preempted) and a sleep costs less.
ANNOUNCED_LOOK_S = 100e-6

#: How long the serving thread may look for the next rung doorbell, and whether always.
SPIN_S, SPIN_FORCED = spin_from_env(os.environ.get("NNHAL_QUEUE_SPIN_US"))


@dataclass(eq=False)
class _Served:
    """One queue as the :class:`QueueServer` holds it."""

    queue: FastQueue
    handle: Handle
    refuse: Refuse
    quick: Callable[[int], bool]
    run: Callable[..., object]
    ended: Callable[[], None]
    #: The work its calls leave for after their answers (run by ``QueueServer._answer``).
    after: Afterwards
    #: How many of the queue's last packets in a row were slow (``QueueServer._answer``):
    #: a slow queue's packets go to a worker.
    slow: int = 0
    #: Whether its inbox is in the epoll set (out of it while a worker holds the queue).
    polled: bool = True
    #: Answers written on the serving thread whose client was not rung yet.
    unrung: bool = False
    #: The holding worker's look for the queue's next packet (``QueueServer._look_on``), made
    #: at its first: its policy and a poll set of the queue's inbox alone.
    watch: lookout.Lookout | None = None
    poller: select.poll | None = None
    #: When the holding worker stopped looking (a closed look or a miss) and handed the queue
    #: back: its lookout learns the gap to the queue's next packet from the next turn, whoever
    #: takes it (a look that stays closed is still taught, as the serving thread's is).
    since: float | None = None


class QueueServer:
    """The one thread that serves every queue handed to it (``serve``), each in order.

    A thread of its own waits on all their request doorbells at once (an epoll set,
    level-triggered: a queue answered on that thread stays in the set, so a packet costs no
    epoll call of its own; a queue a worker holds is out of it until handed back) and answers
    each ready queue's packets in turn. A quick packet (``quick(kind)``, unless each of the queue's last two
    packets took :data:`INLINE_MAX_NS` or longer while another queue is served) is answered on
    this thread, so that many
    busy queues cost no thread switch per packet and the server's threads do not contend
    for the GIL. Any other packet goes to a worker (``submit``), which then answers the
    rest of that queue's waiting packets — and those its client sends while the queue's own
    lookout has the worker look for them (``_look_on``: a client answered sends its next call
    at once, which then costs no hand-back and no wake-up of this thread and a worker) — and
    hands the queue back. A quick packet that
    turns out slow holds the other queues up by that one execution (by two for a queue's
    first slow ones), after which its queue's packets go to workers while other queues are
    served (a sole queue's stay on this thread: nobody waits behind them). While several queues are
    served, the answers written on this thread are rung once every queue one wait reported
    has had its turn: a client woken by a doorbell is often put on the waker's core, and
    ringing it at once would hand that core to it while the other queues' packets wait. Before
    it sleeps, the thread looks for the next rung doorbell while its
    :class:`~nnhal.core.lookout.Lookout` allows (``NNHAL_QUEUE_SPIN_US``) — woken by a
    client's early ring alone (``doorbell.EARLY``: it is writing a large packet), whatever its
    recent waits. The thread exists
    while a queue is served (started at the first, ending with the last). A queue ends
    once it is stopping (``FastQueue.stop``, the client's STOP, a protocol violation): it
    leaves the set and its ``ended`` is called, on whichever thread held it, after which
    nothing here touches it. Thread-safe."""

    def __init__(self, submit: Callable[[Callable[[], object]], object], name: str = "nnhal-queues") -> None:
        self._submit = submit
        self._name = name
        self._lock = threading.Lock()  # a leaf: guards the set, the epoll and the thread
        self._served: dict[int, _Served] = {}
        self._epoll: select.epoll | None = None
        self._wake: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        #: Whether the serving thread rings the clients after the batch (more than one queue
        #: is served). Only that thread reads or writes it.
        self._batched = False
        #: When the serving thread looks for the next doorbell before it sleeps (only it uses it).
        self._lookout = lookout.Lookout(SPIN_S, SPIN_FORCED)
        #: Makes a queue's lookout for the workers that hold it (``_look_on``).
        self._worker_lookout: Callable[[], lookout.Lookout] = partial(lookout.Lookout, SPIN_S, SPIN_FORCED)

    @property
    def queues(self) -> int:
        """Queues served now."""
        return len(self._served)

    def serve(
        self,
        queue: FastQueue,
        handle: Handle,
        refuse: Refuse,
        quick: Callable[[int], bool],
        run: Callable[..., object],
        ended: Callable[[], None],
        after: Afterwards | None = None,
    ) -> None:
        """Serve ``queue`` until it stops, then call ``ended()`` (once, on a serving thread).
        ``handle`` answers a packet and must not raise; ``run(fn, *args)`` runs the queue's
        work (in its context: ``contextvars.Context.run``). ``after``: where ``handle`` leaves
        the work of a packet that need not precede its answer (``executions.afterwards``),
        run once the answer is written — also when writing it failed — before anything else."""
        served = _Served(queue, handle, refuse, quick, run, ended, Afterwards() if after is None else after)
        with self._lock:
            if self._epoll is None:
                self._epoll = select.epoll()
                self._wake = nonblocking_pipe()
                self._epoll.register(self._wake[0], select.EPOLLIN)
            self._served[queue.inbox] = served
            self._epoll.register(queue.inbox, select.EPOLLIN)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, args=(self._epoll,), name=self._name, daemon=True)
                self._thread.start()

    def _loop(self, epoll: select.epoll) -> None:
        announced = False  # whether the last wait's doorbells were a client's early ring alone
        while True:
            with self._lock:
                if not self._served:  # the last queue ended: so does the thread
                    self._close_epoll()
                    return
            rings: list[_Served] = []
            # A sole queue's client is rung at once (nobody else's packets wait; its next packet,
            # should it come while this thread is still in the turn, is answered in that turn).
            self._batched = len(self._served) > 1
            for fd, _events in self._next_events(epoll, announced):
                served = self._served.get(fd)
                if served is None:  # the wake pipe
                    self._drain_wake()
                    continue
                # What woke it: read, or the inbox would stay readable. Only an early ring: the
                # client is writing its packet, whose ring the next wait looks for — no turn
                # first (the packet is not there before its ring): the client may share this core.
                announced = served.queue.take_rings()
                if announced:
                    continue
                self._turn(served, None)
                if served.unrung:
                    rings.append(served)
            for served in rings:
                served.unrung = False
                served.queue.ring()

    def _next_events(self, epoll: select.epoll, announced: bool = False) -> list[tuple[int, int]]:
        """The next doorbells rung: looked for without sleeping while the lookout allows
        (each look a non-blocking ``epoll_wait`` that lets other threads have the GIL, then
        the core yielded), then waited for. A client that sends its next call within the
        window finds this thread awake: no cross-core wake-up, which on a virtual machine
        costs more than the call's own work. ``announced``: a client rang early (it is
        writing a large packet, ``doorbell.EARLY``), so this thread, woken already, looks for
        its ring whatever the recent waits (``Lookout.window``) — the wake-up overlapped the
        client's copy. Every wait, looked or slept, teaches the lookout; an announced one is
        only charged to it (its gap says nothing of the client's pace)."""
        watch = self._lookout
        window = watch.window(announced)
        if announced and window > ANNOUNCED_LOOK_S:
            window = ANNOUNCED_LOOK_S
        monotonic = time.monotonic
        start = monotonic()
        if window > 0.0:
            events = _look(epoll.poll, start + window)
            if events:
                gap = monotonic() - start
                if announced:
                    watch.spend(gap)
                else:
                    watch.waited(gap, gap)
                return events
        looked = monotonic() - start
        events = epoll.poll()
        if announced:
            watch.spend(looked)
        else:
            watch.waited(monotonic() - start, looked)
        return events

    def _turn(self, served: _Served, handed: tuple[int, bytes | memoryview] | None) -> None:
        """One turn of ``served`` (``_answer``) on the serving thread (``handed`` None) or a
        worker, then — outside the queue's context, which the next turn enters, maybe on
        another thread — hand it to a worker (out of the epoll set meanwhile), put it back in
        the set (after a worker's turn) or end it."""
        try:
            state = served.run(self._answer, served, handed)
        except Exception:  # a bug: the queue ends, the others are served on
            log.exception("fast burst: serving a queue failed; ending it")
            served.queue.stop()
            state = _END
        if served.unrung and state is not _ARM:
            served.unrung = False
            served.queue.ring()
        if isinstance(state, tuple):  # for a worker, entering the context now that it was left
            self._poll(served, False)  # not polled while the worker holds it
            try:
                self._submit(partial(self._turn, served, state))
            except RuntimeError:  # no worker takes work (the server is stopping): answered here
                self._turn(served, state)
        elif state is _ARM:
            if not served.polled:
                self._poll(served, True)
        elif state is _END:
            self._end(served)

    def _poll(self, served: _Served, on: bool) -> None:
        """Put ``served``'s inbox in the epoll set or take it out (by the queue's holder)."""
        epoll = self._epoll
        if epoll is None:
            return
        # The flag first: once registered, the serving thread may take the queue at once (and
        # hand it to a worker, taking it out again) before this thread would have set it.
        served.polled = on
        try:
            if on:
                epoll.register(served.queue.inbox, select.EPOLLIN)
            else:
                epoll.unregister(served.queue.inbox)
        except (OSError, ValueError):  # the set was closed under a racing end: nothing left to do
            pass

    def _answer(self, served: _Served, handed: tuple[int, bytes | memoryview] | None) -> object:
        """Answer ``served``'s waiting packets — on a worker (``handed``: the packet it was
        given, answered first) all of them, on the serving thread the quick ones: ``_ARM``
        once none waits, ``_END`` once the queue is stopping, or the first packet that is not
        quick, for a worker."""
        queue, handle, refuse, after = served.queue, served.handle, served.refuse, served.after.run
        since = served.since
        if since is not None and served.watch is not None:  # a worker's look closed or missed (``_look_on``)
            served.since = None
            served.watch.waited(time.monotonic() - since, 0.0)
        clock = time.perf_counter_ns
        herald = HERALD
        # Decided once a turn (the thread's ``_batched`` changes between turns only): whether
        # its answers are rung after the batch, else at once — and then a call may ask to be
        # rung as soon as it is near (``doorbell.announce``: ``handle`` arms it).
        batched = handed is None and self._batched
        caller = None if batched else queue.ring
        packet = handed
        announced = False
        while True:
            if packet is None:
                packet = queue.next_packet(refuse)
                if packet is None:
                    if queue.stopping:
                        return _END
                    # A worker that holds the queue looks for its next packet before handing it
                    # back (``_look_on``): its client, just answered, often sends the next at once.
                    if handed is None or not self._look_on(served, announced):
                        return _ARM
                    announced = queue.take_rings()
                    continue
                # A slow queue's packets go to a worker only while another queue is served:
                # alone, nobody waits behind it, and the hop to a worker and back costs its
                # client more than the turn it frees.
                if handed is None and not (
                    (served.slow < _SLOW_PACKETS or len(self._served) < 2) and served.quick(packet[0])
                ):
                    return packet
            t0 = clock()
            herald.caller = caller
            try:
                queue.answer(*handle(*packet), refuse, not batched)
            finally:
                herald.caller = herald.ring = None
                # Answer first, account after: the packet's work left for after its answer
                # (its slot and charge given back, its leave) runs now, before this thread
                # takes the next packet, another queue's turn or a wait — so a slot or charge
                # is held a few microseconds longer, never unboundedly. A sole queue's client
                # was rung already and works meanwhile; a batched one is rung after the other
                # queues' turns, which must not wait behind what this packet still holds.
                after()
            if batched:
                served.unrung = True
            # Slow after two slow packets in a row: one preempted packet of a loaded machine
            # alone does not send a small model's queue to the workers.
            served.slow = served.slow + 1 if clock() - t0 >= INLINE_MAX_NS else 0
            packet = None
            announced = False  # an early ring announced the packet just answered

    def _look_on(self, served: _Served, announced: bool) -> bool:
        """On the worker that holds ``served``, its queue's ring empty: look for the queue's
        doorbell while the queue's own lookout allows (as the serving thread looks for the
        next of all doorbells, ``_next_events``; ``announced``: its client rang early, a
        packet is being written); whether it rang (its rings not taken yet). A client that
        sends its next call within the window is answered by this worker at once: no
        hand-back to the serving thread, no wake-up of that thread and of a worker again —
        two thread switches of every call that is not quick (not a compact call: a request
        naming shared memory, for one) while a core is spare. Otherwise the queue goes back
        to the serving thread's set, which sleeps meanwhile: the queue was out of its set.
        The lookout is told every wait, as the serving thread's: a hit at once; a miss or a
        look it kept closed at the queue's next turn (``since``), with the gap to that packet."""
        watch = served.watch
        if watch is None:
            watch = served.watch = self._worker_lookout()
        window = watch.window(announced)
        if window <= 0.0:
            served.since = time.monotonic()  # the gap to the next packet is told at its turn
            return False
        if announced and window > ANNOUNCED_LOOK_S:
            window = ANNOUNCED_LOOK_S
        poller = served.poller
        if poller is None:
            poller = served.poller = select.poll()
            poller.register(served.queue.inbox, select.POLLIN)
        monotonic = time.monotonic
        start = monotonic()
        rang = bool(_look(poller.poll, start + window))
        looked = monotonic() - start
        if announced:  # as ``_next_events``: an announced look is only charged
            watch.spend(looked)
        elif rang:
            watch.waited(looked, looked)
        else:  # a miss: charged now, the gap to the next packet told at its turn
            watch.spend(looked)
            served.since = start
        return rang

    def _end(self, served: _Served) -> None:
        fd = served.queue.inbox
        with self._lock:
            if self._served.pop(fd, None) is None:
                return
            if self._epoll is not None and served.polled:
                served.polled = False
                self._epoll.unregister(fd)
            if not self._served and self._wake is not None:
                try:
                    os.write(self._wake[1], b"\x00")  # the serving thread looks whether it should end
                except BlockingIOError:
                    pass
        served.ended()

    def _drain_wake(self) -> None:
        wake = self._wake
        if wake is not None:
            try:
                os.read(wake[0], 4096)
            except (BlockingIOError, OSError):
                pass

    def _close_epoll(self) -> None:
        """Under the lock: the thread ends; the next ``serve`` makes a new set and thread."""
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
        if self._wake is not None:
            for fd in self._wake:
                os.close(fd)
            self._wake = None
        self._thread = None

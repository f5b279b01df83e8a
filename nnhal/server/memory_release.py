"""Giving freed memory back to the operating system.

CPython and numpy allocate through the C library's ``malloc``. glibc keeps what a process
frees in its heaps and arenas for reuse, and after a large block is freed it raises its
mmap threshold, so the next large tensors come from the heap too: a server that held a
few hundred MiB for a while keeps that resident long after every byte was released (its
budget says 0). ``malloc_trim(0)`` returns the free pages of every arena to the kernel.

It is called through ``ctypes`` because nothing in the standard library exposes it, and
only on glibc (elsewhere, e.g. musl, the symbol is absent and this does nothing).

**When a trim runs.** A trim walks the arenas under their locks and first collects garbage
cycles (``_collect_and_trim``: a call ended by an exception may hold its messages in one),
so it never runs on the thread of a call. Once :data:`TRIM_AFTER_BYTES` were released since
the last trim, or a session closed (what it held outside the budget, e.g. its connection's
buffers, is freed uncounted), a :class:`Releaser` starts its trimmer thread, which trims
when no byte was released for :data:`QUIET_S` (the server went idle: what it freed goes back
then), and at the latest :data:`MAX_HOLD_S` after it started (under steady load: freed memory
is held that long at most). Back-to-back transfers thus reuse the same warm pages, and
nothing freed stays resident past the bound.

**Which blocks stay on the heaps.** The server sets glibc's allocator up at start
(:func:`configure_allocator`). Blocks of 4 MiB or more (:data:`MMAP_THRESHOLD`) are mapped on
their own and go back to the kernel as soon as they are freed, while smaller blocks (a
stream's 1 MiB chunks, gRPC's slices) stay on the heaps, reused from call to call and given
back by the trims. A threshold of 1 MiB mapped and faulted in every chunk afresh and cut large
transfers to about a third; one of 32 MiB (glibc's ceiling) left tensors and messages of a few
to 32 MiB on the heaps between the chunks, where freed holes too small for the next tensor kept
concurrent executions' memory resident far past what the budget charged. Fixing the mmap
threshold also fixes glibc's trim threshold (the free top of a heap that a ``free`` hands back
at once) at its default of 128 KiB, so it is set beside it (:data:`TRIM_THRESHOLD`): at
128 KiB every freed chunk of a large transfer went back to the kernel and the next transfer
faulted it in afresh. ``malloc_trim`` returns the free top of the main heap only, not of the
arenas glibc adds for threads, so the trim threshold is kept at the mmap threshold: the free
top a trim cannot reach stays below it per arena. The number of arenas is left to glibc.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Bytes released (budget uncharges, closed sessions) before a trim is worth its cost.
TRIM_AFTER_BYTES = 16 << 20
#: A trim runs once no byte was released for this long (the server went idle) ...
QUIET_S = 0.25
#: ... and at the latest this long after enough bytes were released (the bound on holding them).
MAX_HOLD_S = 1.0
#: The generations a trim under steady load collects (``gc.collect``'s argument): the young
#: and the middle one; the oldest waits for a trim of a quiet server.
YOUNG = 1


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    trim: Callable[[int], int] = fn
    return trim


_TRIM = _malloc_trim()

#: ``mallopt``'s parameters (glibc ``malloc.h``).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Blocks of at least this many bytes are mapped on their own and unmapped when freed: above a
#: stream's chunks (``wire_stream.CHUNK_BYTES``), which stay on the heaps (module docstring).
MMAP_THRESHOLD = 4 << 20
#: The free top of a heap that a ``free`` leaves in place for the next allocations (the trims
#: give the main heap's back; a thread arena's stays, so it is kept small).
TRIM_THRESHOLD = MMAP_THRESHOLD


def configure_allocator(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> bool:
    """Set glibc's allocator up for the process's life (module docstring): allocations of
    ``mmap_threshold`` bytes or more get a mapping of their own, freed at once (a fixed
    threshold: glibc no longer raises it after a large free, which kept the next large tensors
    and messages on the heaps); a ``free`` leaves up to ``trim_threshold`` bytes of free heap
    top in place, so back-to-back transfers reuse warm pages (the trims give them back). False
    where there is no ``mallopt`` (musl) or glibc refused a value."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = ((_M_MMAP_THRESHOLD, mmap_threshold), (_M_TRIM_THRESHOLD, trim_threshold))
    return all([bool(mallopt(param, value)) for param, value in settings])


class Releaser:
    """Counts released bytes and, once enough were, has its trimmer thread trim the C heap when
    the releases pause or the bound on holding them is reached (module docstring).

    Thread-safe. ``released`` never trims on its caller's thread: it adds to a counter, and
    once enough bytes are pending starts the trimmer thread (``nnhal-trim``, a daemon) unless it
    runs; the thread ends when nothing is left pending."""

    def __init__(
        self,
        after_bytes: int = TRIM_AFTER_BYTES,
        quiet_s: float = QUIET_S,
        max_hold_s: float = MAX_HOLD_S,
        trim: Callable[[bool], None] | None = None,
    ) -> None:
        """``trim`` replaces the collection and ``malloc_trim`` (a test's recorder; called with
        whether the collection is a full one: ``_collect_and_trim``)."""
        self.after_bytes = after_bytes
        self.quiet_s = quiet_s
        self.max_hold_s = max_hold_s
        self.trims = 0
        self._collect_and_trim = _collect_and_trim if trim is None else trim
        self._pending = 0
        #: When a byte was last released (monotonic seconds).
        self._last = 0.0
        #: Whether the trimmer thread runs (set and cleared under ``_lock``).
        self._armed = False
        self._lock = threading.Lock()
        #: Held while trimming: one trim at a time.
        self._trimming = threading.Lock()

    @property
    def trimming(self) -> bool:
        """Whether the trimmer thread runs (a trim is due)."""
        return self._armed

    def released(self, nbytes: int) -> None:
        """``nbytes`` were given back; a trim follows once enough were (never on this thread)."""
        # Racy by design: a lost add only delays a trim. The add comes before the check under
        # the lock, so the trimmer, which looks at the count under the lock before it ends,
        # either sees these bytes or is seen ended here.
        self._pending += nbytes
        if self._pending < self.after_bytes and not self._armed:
            return  # the time of a release is read only while a trim is due: not yet (most releases)
        self._last = time.monotonic()
        if self._pending < self.after_bytes or _TRIM is None:
            return
        with self._lock:
            if self._armed:
                return
            self._armed = True
        threading.Thread(target=self._trimmer, name="nnhal-trim", daemon=True).start()

    def session_closed(self, nbytes: int) -> None:
        """A session ended, giving back ``nbytes`` of its budget: a trim follows whatever
        ``nbytes`` (never on this thread), since what the session held outside the budget —
        its connection's buffers, the free heaps its calls left — is freed with it, uncounted."""
        self.released(max(nbytes, self.after_bytes))

    def trim_now(self) -> bool:
        """Trim at once, on this thread (a test); False where there is no ``malloc_trim``."""
        if _TRIM is None:
            return False
        self._trim()
        return True

    def _trimmer(self) -> None:
        """Wait for the releases to pause (or the bound), trim, and again while enough bytes
        were released meanwhile; then end."""
        try:
            while True:
                armed = time.monotonic()
                while (wait := min(self._last + self.quiet_s, armed + self.max_hold_s) - time.monotonic()) > 0:
                    time.sleep(wait)
                # Releases that paused (the server went quiet) get a full collection; those the
                # bound cut short (steady load: calls are waiting) only the young generations'.
                self._trim(time.monotonic() >= self._last + self.quiet_s)
                with self._lock:
                    if self._pending < self.after_bytes:
                        self._armed = False
                        return
        except Exception:  # a trim that failed must not stop the next ones
            log.exception("trimming the heap failed")
            with self._lock:
                self._armed = False

    def _trim(self, full: bool = True) -> None:
        with self._trimming:
            self._pending = 0
            self._collect_and_trim(full)
            self.trims += 1


def _collect_and_trim(full: bool = True) -> None:
    """Collect garbage cycles, then trim. A call ended by an exception (cancelled, aborted,
    refused) can leave its messages in a cycle — the exception's traceback holds the frames
    that hold them — which only the cyclic collector frees, and it runs by allocation counts,
    not bytes: an idle server would keep them. Not ``full``: the young generations only
    (:data:`YOUNG`), where a call that just ended left its cycles; a full collection walks
    every object the server tracks with the GIL held (20-30 ms for a server's ~50,000), a stall
    of every call in progress, so it waits for a quiet server."""
    gc.collect() if full else gc.collect(YOUNG)
    if _TRIM is not None:
        _TRIM(0)

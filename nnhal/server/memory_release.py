"""Giving freed memory back to the operating system.

CPython and numpy allocate through the C library's ``malloc``. glibc keeps what a process
frees in its heaps and arenas for reuse, and after a large block is freed it raises its
mmap threshold, so the next large tensors come from the heap too: a server that held a
few hundred MiB for a while keeps that resident long after every byte was released (its
budget says 0). ``malloc_trim(0)`` returns the free pages of every arena to the kernel.

It is called through ``ctypes`` because nothing in the standard library exposes it, and
only on glibc (elsewhere, e.g. musl, the symbol is absent and this does nothing). A trim
walks the arenas under their locks, so it is rate-limited: at most once per
:data:`MIN_INTERVAL_S`, once at least :data:`TRIM_AFTER_BYTES` were released since the last.
Each trim first collects garbage cycles (``_collect_and_trim``: a call ended by an exception
may hold its messages in one). The server also fixes the mmap threshold at start
(:func:`map_large_blocks`) at 4 MiB: larger messages and tensors are mapped on their own and
go back to the kernel as soon as they are freed, while smaller blocks (a stream's 1 MiB
chunks, gRPC's slices) stay on the heaps, reused from call to call and given back by the
trims. A threshold of 1 MiB mapped and faulted in every chunk afresh and cut large transfers
to about a third; one of 32 MiB (glibc's ceiling) left tensors and messages of a few to 32 MiB
on the heaps between the chunks, where freed holes too small for the next tensor kept
concurrent executions' memory resident far past what the budget charged.
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
#: The least time between two trims.
MIN_INTERVAL_S = 1.0


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

#: ``mallopt``'s parameter for the mmap threshold (glibc ``malloc.h``).
_M_MMAP_THRESHOLD = -3
#: Blocks of at least this many bytes are mapped on their own and unmapped when freed: above a
#: stream's chunks (``wire_stream.CHUNK_BYTES``), which stay on the heaps (module docstring).
MMAP_THRESHOLD = 4 << 20


def map_large_blocks(threshold: int = MMAP_THRESHOLD) -> bool:
    """Serve every allocation of ``threshold`` bytes or more from a mapping of its own (glibc),
    for the process's life: freed, it goes back to the kernel at once. Fixing the threshold also
    stops glibc from raising it after a large free, which would keep the next large tensors and
    messages on the heaps (where only a trim gives them back). False where there is no
    ``mallopt`` (musl)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (AttributeError, OSError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


class Releaser:
    """Counts released bytes and trims the C heap when enough were (module docstring).
    Thread-safe: ``released`` is a counter add on the common path, a trim is taken by one
    thread at a time (a non-blocking lock: another thread never waits for it)."""

    def __init__(self, after_bytes: int = TRIM_AFTER_BYTES, interval_s: float = MIN_INTERVAL_S) -> None:
        self.after_bytes = after_bytes
        self.interval_s = interval_s
        self.trims = 0
        self._pending = 0
        self._last = 0.0
        self._lock = threading.Lock()

    def released(self, nbytes: int) -> None:
        """``nbytes`` were given back; maybe trim (on this thread)."""
        self._pending += nbytes  # racy by design: a lost add only delays a trim
        if self._pending < self.after_bytes or _TRIM is None:
            return
        now = time.monotonic()
        if now - self._last < self.interval_s or not self._lock.acquire(blocking=False):
            return
        try:
            self._pending, self._last = 0, now
            _collect_and_trim()
            self.trims += 1
        finally:
            self._lock.release()

    def trim_now(self) -> bool:
        """Trim at once (a test, or a server going idle); False where there is no ``malloc_trim``."""
        if _TRIM is None:
            return False
        with self._lock:
            self._pending, self._last = 0, time.monotonic()
            _collect_and_trim()
            self.trims += 1
        return True


def _collect_and_trim() -> None:
    """Collect garbage cycles, then trim. A call ended by an exception (cancelled, aborted,
    refused) can leave its messages in a cycle — the exception's traceback holds the frames
    that hold them — which only the cyclic collector frees, and it runs by allocation counts,
    not bytes: an idle server would keep them."""
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)

"""Copies of large buffers shared with helper threads: one thread copying does not use the
memory bandwidth a second core adds.

A copy of many megabytes is bound by how many cache-line transfers one core keeps in flight,
not by the memory itself, so the same bytes copied from two cores at once take less time.
``copy`` splits a copy of at least :data:`THRESHOLD` bytes into chunks of :data:`CHUNK` bytes
that the calling thread and the idle helpers claim in turn (numpy releases the GIL while it
copies), while the machine has a core to spare (``nnhal.core.lookout.LOAD``): on a busy
machine a helper would take its core from other work, and one preempted in the middle of its
chunk would hold the copy up until it runs again. The caller never waits for a helper to
start: a helper the machine does not run soon claims nothing, and the caller copies every
chunk itself; it waits only for the chunks a helper is copying. Helpers are few (one fewer
than the CPUs this process may run on, at most :data:`MOST_HELPERS`), started when a large
copy finds fewer alive, and each ends once it has had nothing to do for :data:`IDLE_S`
seconds: no thread outlives the copies by more. Nothing is allocated: the copy holds no
memory of its own.
"""

from __future__ import annotations

import queue
import threading

import numpy as np

from nnhal.core.lookout import LOAD, allowed_cpus

__all__ = ["CHUNK", "IDLE_S", "MOST_HELPERS", "THRESHOLD", "copy", "helpers_alive"]

#: Copies of fewer bytes are one ``np.copyto`` on the calling thread (handing work over
#: costs a thread wake-up, tens of microseconds).
THRESHOLD = 8 << 20
#: What one thread claims at a time: the caller's last wait is for at most one chunk a helper
#: is copying (half a huge page: slices of huge-page-backed memory stay within one page).
CHUNK = 1 << 20
MOST_HELPERS = 3
#: A helper with nothing to do for this long ends.
IDLE_S = 1.0


class _Job:
    """One copy in chunks; any number of threads call ``work``; ``finished`` once every chunk
    was copied (each by exactly one thread)."""

    def __init__(self, dst: np.ndarray, src: np.ndarray) -> None:
        self._dst: np.ndarray | None = dst
        self._src: np.ndarray | None = src
        self._chunk = CHUNK
        self._chunks = -(-src.nbytes // CHUNK)
        self._next = 0
        self._left = self._chunks
        self._lock = threading.Lock()  # a leaf
        self.finished = threading.Event()
        self.error: BaseException | None = None

    def work(self) -> None:
        """Copy chunks until none is left to claim."""
        while True:
            with self._lock:
                k = self._next
                if k >= self._chunks or self._dst is None or self._src is None:
                    return
                self._next = k + 1
                dst, src = self._dst, self._src
            start, end = k * self._chunk, (k + 1) * self._chunk
            try:
                np.copyto(dst[start:end], src[start:end])
            except Exception as err:  # handed to the caller, which raises it
                self.error = err
            finally:
                del dst, src
                with self._lock:
                    self._left -= 1
                    if self._left == 0:
                        # A helper that takes this job late holds neither buffer (a mapping
                        # its caller unmaps next is not kept alive by it).
                        self._dst = self._src = None
                        self.finished.set()


class _Helpers:
    """The helper threads and the jobs handed to them. Thread-safe; its lock is a leaf.

    A job is handed only to a helper that waits for one (``_idle`` counts the waiting helpers
    no job was handed to yet) or to one started for it: nothing waits in the queue for a
    helper that is busy, so no job outlives its copy there."""

    def __init__(self, most: int) -> None:
        self.most = most
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._alive = 0
        self._idle = 0

    @property
    def alive(self) -> int:
        return self._alive

    def offer(self, job: _Job) -> None:
        """Let the waiting helpers join ``job``, and as many new ones as keep at most ``most`` alive."""
        with self._lock:
            wake, self._idle = self._idle, 0
            start = self.most - self._alive
            self._alive += start
        for _ in range(wake):
            self._jobs.put(job)
        for _ in range(start):
            threading.Thread(target=self._serve, args=(job,), name="nnhal-copy", daemon=True).start()

    def _serve(self, job: _Job) -> None:
        while True:
            job.work()
            del job
            with self._lock:
                self._idle += 1
            while True:
                try:
                    job = self._jobs.get(timeout=IDLE_S)
                    break
                except queue.Empty:
                    with self._lock:
                        if self._idle > 0:  # no job was handed to this helper meanwhile: it ends
                            self._idle -= 1
                            self._alive -= 1
                            return
                    # An offer counted this helper (its job is in the queue, or about to be): take it.


_HELPERS = _Helpers(min(MOST_HELPERS, allowed_cpus() - 1))


def copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for two one-dimensional ``uint8`` arrays of the same length that do
    not overlap; from :data:`THRESHOLD` bytes on, shared with the helper threads while the
    machine has a core to spare. Returns once every byte is copied (no helper touches either
    array afterwards); an error of any chunk is raised here."""
    if src.nbytes < THRESHOLD or _HELPERS.most <= 0 or not LOAD.spare():
        np.copyto(dst, src)
        return
    job = _Job(dst, src)
    _HELPERS.offer(job)
    job.work()
    # Only chunks a running helper claimed are left: each ends as soon as its copy does, so
    # this wait needs no bound of its own.
    job.finished.wait()
    if job.error is not None:
        raise job.error


def helpers_alive() -> int:
    """How many helper threads live now (a test's view)."""
    return _HELPERS.alive

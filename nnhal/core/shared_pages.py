"""Mappings of shared-memory pools, asking the kernel for huge pages where it gives them.

A pool of many megabytes copied through 4 KiB pages pays a TLB miss every 4 KiB that a
private numpy array (which numpy advises onto huge pages) does not: on the development
machine one copy of 64 MiB into a shared mapping took ~20 % longer than the same copy
between private arrays. Linux backs shared memory (memfds, /dev/shm files) with huge pages
only when `/sys/kernel/mm/transparent_hugepage/shmem_enabled` allows it: `always` or
`within_size` for every mapping, `advise` for mappings that ask with `MADV_HUGEPAGE`.
Every pool mapping of at least one huge page asks, so an operator who sets `advise` gets
them for nnhal's pools and nothing else; with `never` (a common default) the advice is a
no-op. Pages are allocated by whichever side touches them first, so both the client that
creates a pool and the server that maps it map it here.
"""

from __future__ import annotations

import mmap

__all__ = ["HUGE_PAGE_BYTES", "map_shared"]

#: The x86-64 and arm64 (4 KiB base pages) transparent huge page size.
HUGE_PAGE_BYTES = 2 << 20

_PROT = mmap.PROT_READ | mmap.PROT_WRITE
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)
# Linux 5.14: fault every page in writable, as MAP_POPULATE would, after the advice is set
# (MAP_POPULATE at mmap time would allocate the pages before the advice could apply).
_MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


def map_shared(fd: int, length: int, offset: int = 0, populate: bool = False) -> mmap.mmap:
    """A shared read-write mapping of ``length`` bytes of ``fd`` from ``offset`` (a multiple
    of ``mmap.ALLOCATIONGRANULARITY``), advised onto huge pages when it spans at least one.
    ``populate``: its pages faulted in now, in one pass of the kernel, instead of one fault
    per page at first touch. Raises OSError as ``mmap.mmap`` does."""
    advise = length >= HUGE_PAGE_BYTES and hasattr(mmap, "MADV_HUGEPAGE")
    flags = mmap.MAP_SHARED | (_POPULATE if populate and not advise else 0)
    mapping = mmap.mmap(fd, length, flags, _PROT, offset=offset)
    if advise:
        try:
            mapping.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass  # a kernel without transparent huge pages: 4 KiB pages, as without the advice
        if populate:
            try:
                mapping.madvise(_MADV_POPULATE_WRITE)
            except OSError:
                pass  # before Linux 5.14: the pages fault in at first touch instead
    return mapping

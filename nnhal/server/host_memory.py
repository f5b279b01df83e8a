"""How much memory this process may use: its cgroup's limit, else the host's physical memory.

The default of the server's total memory limit (``--memory-total auto``) follows it, so
that a server started without flags refuses work (RESOURCE_EXHAUSTED) before the kernel's
out-of-memory killer ends it.
"""

from __future__ import annotations

import os
from pathlib import Path

#: cgroup v2, then v1: the memory limit files of the process's own cgroup (as mounted in a container).
_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
#: A cgroup v1 "limit" at or above this means none (the kernel reports a page-rounded 2**63).
_UNLIMITED = 1 << 60
#: The share of it the budget may charge: the rest is the interpreter, gRPC's buffers,
#: decoded copies of messages in flight and the allocator's slack.
DEFAULT_SHARE = 0.75


def cgroup_limit(paths: tuple[Path, ...] = _CGROUP_LIMITS) -> int | None:
    """The memory limit of this process's cgroup in bytes (None: none, or no cgroup files)."""
    for path in paths:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return value if 0 < value < _UNLIMITED else None
    return None


def physical_memory() -> int | None:
    """The host's physical memory in bytes (None where ``sysconf`` cannot say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def usable_memory() -> int | None:
    """The memory this process may use: the smaller of its cgroup limit and the physical memory."""
    known = [n for n in (cgroup_limit(), physical_memory()) if n]
    return min(known) if known else None


def default_memory_total() -> int:
    """The server's default total limit: :data:`DEFAULT_SHARE` of ``usable_memory`` (0: no
    limit, where it cannot be known)."""
    usable = usable_memory()
    return int(usable * DEFAULT_SHARE) if usable else 0

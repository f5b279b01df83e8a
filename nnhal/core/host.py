"""Who may open whose memfd through ``/proc/<pid>/fd`` (``docs/shared-memory.md``).

A server opens a client's sealed memfd through ``/proc/<pid>/fd/<fd>``: that works only when
both run in the same PID namespace (the pid means the same process to both) and the kernel
lets the server inspect the client (the same user). The server tells a session its
``memfd_identity``; a client makes memfd regions by default only when it is its own.
"""

from __future__ import annotations

import os


def memfd_identity() -> str:
    """``"<PID namespace inode>:<uid>"`` of this process; "" where there is no /proc."""
    try:
        ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    return f"{ns}:{os.getuid()}"

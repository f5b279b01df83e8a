"""Default places on disk of the server's settings and the choices of its event loop, in a
module that imports nothing heavy: the command line reads them to build its flags' help
before it knows which command runs."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: tmpfs where the system has one (regions then live in memory, like ashmem).
DEFAULT_SHM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()

#: The key that seals compilation caches (created if missing).
DEFAULT_SECRET_FILE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nnhal" / "cache-secret"

#: The event loops a server may run on (``nnhal.server.rpc.event_loop.new_event_loop``).
EVENT_LOOPS = ("auto", "uvloop", "asyncio")

"""A server in a child process on loopback that announces its address in a port file.

The child binds port 0 (or a unix socket in our temporary directory) and writes
the bound address to ``port_file``; ``ChildServer`` waits for it, bounded in
time, and always stops the child (SIGCONT first, in case a test froze it, then
SIGTERM, then SIGKILL) and removes the directory. Used by ``LocalServer`` and by
the benchmarks' bare echo anchor.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: How long a child may take to announce its address. Generous: on a loaded machine (two
#: cores, many runnable processes) importing numpy and grpc alone can take tens of seconds; a
#: child that exits is reported at once whatever the bound.
START_TIMEOUT_S = 90.0


class ChildServer:
    """Start ``make_command(listen, port_file)`` and wait for its address.

    ``on_failure`` builds the exception raised when the child exits or stays silent."""

    def __init__(
        self,
        make_command: Callable[[str, Path], Sequence[str]],
        *,
        unix: bool = False,
        listen: str | None = None,
        start_timeout: float = START_TIMEOUT_S,
        log_file: Path | None = None,
        prefix: str = "nnhal-",
        on_failure: Callable[[str], Exception] = RuntimeError,
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix=prefix)
        tmp = Path(self._tmp.name)
        self.port_file = tmp / "port"
        # ``listen`` fixes the address (e.g. to restart a server on the same unix socket).
        if listen is None:
            listen = f"unix:{tmp / 'server.sock'}" if unix else "127.0.0.1:0"
        self.log_path = log_file or tmp / "server.log"
        self._log = open(self.log_path, "ab")
        self._on_failure = on_failure
        self.proc = subprocess.Popen(
            list(make_command(listen, self.port_file)),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            self.address = self._wait_address(start_timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_address(self, timeout: float) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise self._on_failure(f"the server exited with {self.proc.returncode}; its log:\n{self.log()}")
            if self.port_file.exists():
                text = self.port_file.read_text().strip()
                if text:
                    return text.splitlines()[0]
            time.sleep(0.02)
        raise self._on_failure(f"the server did not start within {timeout} s; its log:\n{self.log()}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the child (idempotent) and remove its directory."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self._log.close()
        self._tmp.cleanup()

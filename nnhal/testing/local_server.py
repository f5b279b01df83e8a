"""Start an nnhal server as a child process on loopback (``--start``, tests, benchmarks).

The child binds port 0 (or a unix socket) and writes its address to a port
file; we wait for that file, bounded in time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nnhal.core.errors import DeadObject


class LocalServer:
    """``with LocalServer() as srv: Device.connect(srv.address)``."""

    def __init__(
        self,
        *args: str,
        unix: bool = False,
        listen: str | None = None,
        start_timeout: float = 30.0,
        log_file: Path | None = None,
    ) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="nnhal-")
        tmp = Path(self._tmp.name)
        self.port_file = tmp / "port"
        # ``listen`` fixes the address (e.g. to restart a server on the same unix socket).
        if listen is None:
            listen = f"unix:{tmp / 'nnhal.sock'}" if unix else "127.0.0.1:0"
        self.log_path = log_file or tmp / "server.log"
        self._log = open(self.log_path, "ab")
        cmd = [sys.executable, "-m", "nnhal", "serve", "--listen", listen, "--port-file", str(self.port_file), *args]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.address = self._wait_address(start_timeout)

    def _wait_address(self, timeout: float) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise DeadObject(f"the server exited with {self.proc.returncode}; see {self.log_path}:\n{self.log()}")
            if self.port_file.exists():
                text = self.port_file.read_text().strip()
                if text:
                    return text.splitlines()[0]
            time.sleep(0.02)
        self.kill()
        raise DeadObject(f"the server did not start within {timeout} s; see {self.log_path}")

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

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

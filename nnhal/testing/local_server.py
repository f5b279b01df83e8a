"""Start an nnhal server as a child process on loopback (``--start``, tests, benchmarks)."""

from __future__ import annotations

import sys
from pathlib import Path

from nnhal.core.errors import DeadObject
from nnhal.testing.child import START_TIMEOUT_S, ChildServer


class LocalServer(ChildServer):
    """``with LocalServer() as srv: Device.connect(srv.address)``; extra ``args`` go to ``nnhal serve``.

    A server that exits or does not announce its address within ``start_timeout`` is DeadObject."""

    def __init__(
        self,
        *args: str,
        unix: bool = False,
        listen: str | None = None,
        start_timeout: float = START_TIMEOUT_S,
        log_file: Path | None = None,
    ) -> None:
        def command(address: str, port_file: Path) -> list[str]:
            return [sys.executable, "-m", "nnhal", "serve", "--listen", address, "--port-file", str(port_file), *args]

        super().__init__(
            command,
            unix=unix,
            listen=listen,
            start_timeout=start_timeout,
            log_file=log_file,
            on_failure=DeadObject,
        )

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

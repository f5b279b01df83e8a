"""The port file: the bound gRPC addresses, one a line, and its companions.

With a ``port_file`` the bound metrics address is written to the file next to it named
``<port_file>.metrics`` and the health-only listener's to ``<port_file>.health`` (one line
each), so the port file itself keeps one gRPC address per line. Each is written whole
(a reader never sees half of one) and removed when the server has stopped.
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def write_port_files(
    port_file: Path, addresses: list[str], metrics_address: str | None, health_address: str | None
) -> None:
    """Write the port file (``addresses``) and its companions for the listeners that are bound."""
    if metrics_address is not None:
        _write_atomically(port_file.with_name(port_file.name + ".metrics"), metrics_address + "\n")
    if health_address is not None:
        _write_atomically(port_file.with_name(port_file.name + ".health"), health_address + "\n")
    _write_atomically(port_file, "\n".join(addresses) + "\n")


def remove_port_files(port_file: Path | None) -> None:
    """Remove the port file and its ``.metrics`` / ``.health`` companions: once the server has
    stopped they name addresses nothing listens on."""
    if port_file is None:
        return
    for path in (
        port_file,
        port_file.with_name(port_file.name + ".metrics"),
        port_file.with_name(port_file.name + ".health"),
    ):
        try:
            path.unlink(missing_ok=True)
        except OSError as err:  # a folder or permissions changed meanwhile: the exit goes on
            log.warning("could not remove %s: %s", path, err.strerror or err)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)

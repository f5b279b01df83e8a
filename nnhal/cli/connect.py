"""Connecting a client command (info, run, conformance --target) to a server.

``connect`` waits at most ``timeout`` seconds; when nothing answers it raises UsageError
"no nnhal server answered at ADDR within T s" and nothing else is said: a server that
never answered did not "die". (The client's death monitor logs a death when the session
attempt is given up; that record is dropped while connecting — see ``_NeverConnected``.)
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from nnhal.cli.usage import UsageError
from nnhal.client.device import Device
from nnhal.core.errors import DeadObject

DEFAULT_TIMEOUT = 3.0
_DEATH_LOGGER = "nnhal.client.death"


class _NeverConnected(logging.Filter):
    """Drops the death monitor's records while the first connection is being made."""

    def filter(self, record: logging.LogRecord) -> bool:
        return False


@contextlib.contextmanager
def connect(address: str, client_name: str, timeout: float = DEFAULT_TIMEOUT) -> Iterator[Device]:
    """A Device connected to ``address``, closed on exit; UsageError if no server answers."""
    logger = logging.getLogger(_DEATH_LOGGER)
    quiet = _NeverConnected()
    logger.addFilter(quiet)
    try:
        device = Device.connect(address, client_name=client_name, timeout=timeout)
    except DeadObject:
        raise UsageError(
            f"no nnhal server answered at {address} within {timeout:g} s; start one (nnhal serve --listen "
            f"{address}) or give --timeout more seconds"
        ) from None
    finally:
        logger.removeFilter(quiet)
    with device:
        yield device

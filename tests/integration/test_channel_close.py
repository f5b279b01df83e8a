"""Closing a client never races gRPC's connectivity poller (a flake seen under load:
the poller thread raised 'Cannot monitor channel state: Channel closed!')."""

from __future__ import annotations

import threading
import time

import pytest

from nnhal.client.device import Device
from nnhal.testing import LocalServer

pytestmark = pytest.mark.integration


def test_connect_close_cycles_leave_no_poller_behind(server: LocalServer) -> None:
    errors: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)  # type: ignore[assignment]
    try:
        for _ in range(20):
            with Device.connect(server.address, timeout=10) as dev:
                assert dev.name  # the session is open; the poller is running
        end = time.monotonic() + 5.0
        while time.monotonic() < end and any(t.name == "nnhal-channel-close" for t in threading.enumerate()):
            time.sleep(0.02)
        assert not [t for t in threading.enumerate() if t.name == "nnhal-channel-close"]
        time.sleep(0.5)  # one more poller round after the last close
    finally:
        threading.excepthook = previous
    assert errors == []

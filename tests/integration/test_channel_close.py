"""Closing a client never races gRPC's connectivity poller (a flake seen under load:
the poller thread raised 'Cannot monitor channel state: Channel closed!'); the asyncio
client's close leaves no task, thread or loop error behind."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from nnhal.client import aio
from nnhal.client.device import Device
from nnhal.testing import LocalServer

pytestmark = pytest.mark.integration


def test_connect_close_cycles_leave_no_poller_behind(server: LocalServer) -> None:
    errors: list[BaseException | None] = []
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


def test_aio_connect_close_cycles_leave_nothing_behind(server: LocalServer) -> None:
    errors: list[dict[str, Any]] = []
    threads_before = {t.ident for t in threading.enumerate()}

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
        for _ in range(20):
            async with aio.Device.connect(server.address, timeout=10) as dev:
                assert dev.name  # the session is open; its watchers are running
        await asyncio.sleep(0.5)  # a late callback of a closed channel would land here
        assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []

    asyncio.run(main())  # each connect is bounded (timeout=10), the test by pytest-timeout
    assert errors == []
    assert not [t for t in threading.enumerate() if t.ident not in threads_before and not t.daemon]

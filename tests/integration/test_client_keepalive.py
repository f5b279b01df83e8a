"""Server keepalive (DESIGN.md §12): the session of a frozen (SIGSTOP) client ends, and its
objects are released, within 10 s — the server pings every client every 2 s and drops a
connection whose ping goes unanswered for 2 s. The frozen client is a sync or an asyncio
(``nnhal.client.aio``) one."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from nnhal.client.device import Device
from nnhal.testing import LocalServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

#: The documented bound for a frozen client's session to end.
FROZEN_CLIENT_BOUND_S = 10.0

_CLIENT = {
    "sync": textwrap.dedent(
        """
        import sys, time
        from nnhal.client.device import Device
        from tests.conftest import add_model
        dev = Device.connect(sys.argv[1], client_name="frozen")
        models = [dev.prepare_model_sync(add_model()) for _ in range(2)]
        print("ready", flush=True)
        time.sleep(120)
        """
    ),
    "aio": textwrap.dedent(
        """
        import asyncio, sys
        from nnhal.client import aio
        from tests.conftest import add_model
        async def main():
            dev = await aio.Device.connect(sys.argv[1], client_name="frozen")
            models = [await dev.prepare_model(add_model()) for _ in range(2)]
            print("ready", flush=True)
            await asyncio.sleep(120)
        asyncio.run(main())
        """
    ),
}


@pytest.mark.parametrize("kind", ["sync", "aio"])
@pytest.mark.parametrize("idle_s", [0.0, 5.0], ids=["frozen-at-once", "frozen-after-idling"])
def test_a_frozen_clients_session_ends_within_the_bound(idle_s: float, kind: str) -> None:
    with LocalServer() as srv, Device.connect(srv.address, client_name="observer") as observer:
        client = subprocess.Popen(
            [sys.executable, "-c", _CLIENT[kind], srv.address],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert client.stdout is not None
            assert client.stdout.readline().strip() == "ready"
            assert observer.stats()["sessions"] == 2 and observer.stats()["prepared_models"] == 2
            # Idling first: the server's keepalive must not have given up on a silent session stream.
            time.sleep(idle_s)
            client.send_signal(signal.SIGSTOP)
            t0 = time.monotonic()
            stats = observer.stats()
            while (stats["sessions"], stats["prepared_models"]) != (1, 0):
                assert time.monotonic() - t0 < FROZEN_CLIENT_BOUND_S, f"still held: {stats}"
                time.sleep(0.1)
                stats = observer.stats()
        finally:
            client.kill()
            client.wait(10)
            if client.stdout is not None:
                client.stdout.close()

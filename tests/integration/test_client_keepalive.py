"""Server keepalive (DESIGN.md §12): the session of a frozen (SIGSTOP) client ends, and its
objects are released, within 10 s — the server pings every client every 2 s and drops a
connection whose ping goes unanswered for 2 s. The frozen client is a sync or an asyncio
(``nnhal.client.aio``) one."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from nnhal.client.device import Device
from nnhal.testing import LocalServer
from tests.conftest import holding_client

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

#: The documented bound for a frozen client's session to end.
FROZEN_CLIENT_BOUND_S = 10.0


@pytest.mark.parametrize("kind", ["sync", "aio"])
@pytest.mark.parametrize("idle_s", [0.0, 5.0], ids=["frozen-at-once", "frozen-after-idling"])
def test_a_frozen_clients_session_ends_within_the_bound(idle_s: float, kind: str) -> None:
    with LocalServer() as srv, Device.connect(srv.address, client_name="observer") as observer:
        client = subprocess.Popen(
            holding_client(kind, srv.address, "frozen", 2, 120),
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

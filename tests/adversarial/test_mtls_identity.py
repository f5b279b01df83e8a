"""With mTLS the verified identity is the client (issue #24): an attacker opening many sessions
and connections under one certificate holds no more long-lived calls than one client may,
and a victim of another certificate connects, prepares and executes meanwhile.

Certificates are made at test time (``tests.integration.test_tls``'s CA and client-a /
client-b); the server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from nnhal.client.device import Device
from nnhal.core.enums import ErrorStatus
from nnhal.proto import service_pb2 as spb
from nnhal.testing.local_server import LocalServer
from tests.adversarial.conftest import chaos, prepared_small, victim_runs
from tests.integration.test_tls import Pki, pki  # noqa: F401  # the module's certificates

pytestmark = pytest.mark.integration

#: The server-wide cap on long-lived calls; its last 1/8 is kept for clients below their share.
CAP = 16
PER_CLIENT = 6


@pytest.mark.timeout(180)
def test_one_identity_with_many_sessions_takes_one_clients_share(pki: Pki) -> None:  # noqa: F811
    sessions, bursts = chaos(4, 12), PER_CLIENT
    args = (*pki.mtls_args(), "--max-long-calls", str(CAP), "--max-bursts-per-session", str(PER_CLIENT))
    stop = threading.Event()

    def idle() -> Iterator[spb.BurstRequest]:
        stop.wait(120)
        yield from ()

    with LocalServer(*args) as srv:
        devices = [Device.connect(srv.address, client_name="mallory", tls=pki.client(pki.a)) for _ in range(sessions)]
        calls: list[Any] = []
        readers = ThreadPoolExecutor(sessions * bursts + 4)
        try:
            for dev in devices:
                calls += [
                    dev.remote.stubs.prepared_model.configureExecutionBurst(idle(), timeout=120) for _ in range(bursts)
                ]
            firsts: list[Future[Any]] = [readers.submit(next, call) for call in calls]
            # The attacker's identity is one client: past its own cap its bursts are refused,
            # however many sessions and connections it opened.
            refused = len(calls) - PER_CLIENT
            end = time.monotonic() + 60  # bounds the wait; asserted below by count, not time
            while sum(f.done() for f in firsts) < refused and time.monotonic() < end:
                time.sleep(0.05)
            done = [f.result() for f in firsts if f.done()]
            assert len(done) >= refused
            for first in done:
                assert first.result.status == ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
                assert "this client already has" in first.result.message
            held = devices[0].stats()["long_calls"]
            assert held == PER_CLIENT
            victim = Device.connect(srv.address, client_name="victim", tls=pki.client(pki.b))
            with victim, prepared_small(victim) as pm:
                statuses = victim_runs(pm, chaos(20, 200))
        finally:
            stop.set()
            for call in calls:
                call.cancel()
            readers.shutdown(wait=True)
            for dev in devices:
                dev.close()
    print(f"identity with {sessions} sessions held {held} long-lived calls; victim {len(statuses)} NONE")
    assert set(statuses) == {ErrorStatus.NONE}, statuses

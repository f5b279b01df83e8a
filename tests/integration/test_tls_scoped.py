"""Under mTLS: getStats shows a client the counts of its own identity, and the plaintext
health-only listener (``--health-listen``) answers probes that cannot speak TLS — also
during a drain — and nothing else. Certificates are made at test time (test_tls's PKI)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from nnhal.client.device import Device
from nnhal.core.enums import ErrorStatus
from nnhal.proto import service_pb2 as spb, service_pb2_grpc as sgrpc
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, ones
from tests.integration.test_tls import Pki, pki  # noqa: F401  (the module-scoped PKI fixture)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WAIT_S = 20.0


@pytest.fixture(scope="module")
def mtls_and_unix(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, str]]:  # noqa: F811
    sock = f"unix:{tmp_path_factory.mktemp('sock') / 's.sock'}"
    with LocalServer(*pki.mtls_args(), "--listen", sock) as srv:
        yield srv, sock


def _raw_stats(dev: Device) -> spb.StatsResponse:
    reply: spb.StatsResponse = dev.remote.stubs.device.getStats(spb.DeviceRequest(), timeout=10)
    return reply


def test_get_stats_shows_a_client_its_own_identity(pki: Pki, mtls_and_unix: tuple[LocalServer, str]) -> None:  # noqa: F811
    srv, sock = mtls_and_unix
    with (
        Device.connect(srv.address, tls=pki.client(pki.a)) as a,
        Device.connect(srv.address, tls=pki.client(pki.a)) as a2,
        Device.connect(srv.address, tls=pki.client(pki.b)) as b,
        a.prepare_model_sync(add_model()) as pm_a,
        a2.prepare_model_sync(add_model()) as pm_a2,
    ):
        del pm_a, pm_a2
        mine, theirs = _raw_stats(a), _raw_stats(b)
        assert (mine.identity, mine.sessions, mine.prepared_models) == ("client-a", 2, 2)
        assert (theirs.identity, theirs.sessions, theirs.prepared_models, theirs.bytes_in_use) == ("client-b", 1, 0, 0)
        assert a.stats()["prepared_models"] == 2 and b.stats()["sessions"] == 1  # the client API too
        with Device.connect(sock) as local:  # no certificate on the unix socket: server-wide, as before
            every = _raw_stats(local)
            assert (every.identity, every.sessions, every.prepared_models) == ("", 4, 2)


def _health_address(srv: LocalServer) -> str:
    path = Path(str(srv.port_file) + ".health")
    return path.read_text().strip()


def _check(channel: grpc.Channel) -> str:
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def test_the_health_only_listener_answers_plaintext_probes_also_while_draining(pki: Pki) -> None:  # noqa: F811
    x = ones()
    with LocalServer(
        *pki.mtls_args(), "--health-listen", "127.0.0.1:0", "--drain-seconds", "10", "--enable-fault-injection"
    ) as srv:
        channel = grpc.insecure_channel(_health_address(srv))
        try:
            assert _check(channel) == "SERVING"
            with pytest.raises(grpc.RpcError) as err:  # no HAL service on it
                sgrpc.DeviceStub(channel).getStatus(spb.DeviceRequest(), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
            with Device.connect(srv.address, tls=pki.client(pki.a)) as dev, dev.prepare_model_sync(add_model()) as pm:
                dev.set_faults(execute_delay_ms=1500)
                cb = pm.execute_async([x, x])
                end = time.monotonic() + WAIT_S
                while dev.stats()["queue_depth"] < 1 and time.monotonic() < end:
                    time.sleep(0.02)
                srv.signal(signal.SIGTERM)
                end = time.monotonic() + WAIT_S
                status = _check(channel)
                while status != "NOT_SERVING" and time.monotonic() < end:
                    time.sleep(0.02)
                    status = _check(channel)
                assert status == "NOT_SERVING"
                assert cb.wait(WAIT_S) and cb.status == ErrorStatus.NONE
            assert srv.proc.wait(WAIT_S) == 0
        finally:
            channel.close()

"""TLS and mTLS end to end: certificates made at test time, servers on 127.0.0.1 only.

A CA signs the server's certificate (SAN IP:127.0.0.1, DNS:localhost) and two client
certificates (CN client-a, client-b); an unknown client signs its own. The server's
client CA is the same CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nnhal.client.device import Device, TlsConfig
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import ErrorStatus, OperandType as T, OperationType as O
from nnhal.core.errors import DeadObject, ResourceExhaustedTransient
from nnhal.core.types import Model
from nnhal.proto import service_pb2 as spb
from nnhal.server.driver import ClientQuotas
from nnhal.server.rpc import listeners, serve
from nnhal.server.rpc.identity import load_server_tls
from nnhal.server.rpc.server_options import ServerOptions
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model

pytestmark = pytest.mark.integration

#: Refused clients wait this long for a session (the handshake never completes, so any
#: bound shows the refusal; a short one keeps the suite quick).
REFUSED_TIMEOUT = 1.0


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> tuple[Path, Path]:
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return path.with_suffix(".crt"), path.with_suffix(".key")


def _cert(
    cn: str,
    issuer: tuple[ec.EllipticCurvePrivateKey, x509.Name] | None,
    *,
    ca: bool = False,
    san: list[x509.GeneralName] | None = None,
    client: bool = False,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    signer, issuer_name = issuer if issuer is not None else (key, _name(cn))
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    if not ca:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    return key, builder.sign(signer, hashes.SHA256())


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: tuple[Path, Path]
    a: tuple[Path, Path]
    b: tuple[Path, Path]
    stranger: tuple[Path, Path]

    def client(self, pair: tuple[Path, Path]) -> TlsConfig:
        return TlsConfig(ca=self.ca, cert=pair[0], key=pair[1])

    def mtls_args(self) -> tuple[str, ...]:
        return ("--tls-cert", str(self.server[0]), "--tls-key", str(self.server[1]), "--tls-client-ca", str(self.ca))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca_key, ca_cert = _cert("nnhal test CA", None, ca=True)
    ca_path = _write(d / "ca", ca_key, ca_cert)[0]
    issuer = (ca_key, ca_cert.subject)
    san = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
    server = _write(d / "server", *_cert("nnhal-server", issuer, san=san))
    a = _write(d / "client-a", *_cert("client-a", issuer, client=True))
    b = _write(d / "client-b", *_cert("client-b", issuer, client=True))
    stranger = _write(d / "stranger", *_cert("client-a", None, client=True))  # claims a's name, self-signed
    return Pki(ca_path, server, a, b, stranger)


@pytest.fixture(scope="module")
def mtls_server(pki: Pki) -> Iterator[LocalServer]:
    with LocalServer(*pki.mtls_args()) as srv:
        yield srv


def _run_add(dev: Device) -> None:
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    with dev.prepare_model_sync(add_model()) as pm:
        np.testing.assert_array_equal(pm.execute([a, a]).outputs[0], a + a)


def _wait_for_log(srv: LocalServer, text: str, timeout: float = 10.0) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        log = srv.log()
        if text in log:
            return log
        time.sleep(0.05)
    raise AssertionError(f"{text!r} not in the server log:\n{srv.log()}")


def test_mtls_client_runs_a_model_and_is_named_by_its_certificate(pki: Pki, mtls_server: LocalServer) -> None:
    with Device.connect(mtls_server.address, client_name="mallory", tls=pki.client(pki.a)) as dev:
        _run_add(dev)
    _wait_for_log(mtls_server, "opened by 'client-a'")
    assert "opened by 'mallory'" not in mtls_server.log()
    assert "(mTLS)" in mtls_server.log()


@pytest.mark.parametrize("who", ["plaintext", "stranger", "no client certificate"])
def test_clients_without_a_certificate_of_the_ca_are_refused(pki: Pki, mtls_server: LocalServer, who: str) -> None:
    tls = {
        "plaintext": False,
        "stranger": pki.client(pki.stranger),
        "no client certificate": TlsConfig(ca=pki.ca),
    }[who]
    start = time.monotonic()
    with pytest.raises(DeadObject):
        Device.connect(mtls_server.address, tls=tls, timeout=REFUSED_TIMEOUT)  # type: ignore[arg-type]
    assert time.monotonic() - start < REFUSED_TIMEOUT + 10  # bounded: never a hang


def test_clients_of_different_certificates_cannot_use_each_others_objects(pki: Pki, mtls_server: LocalServer) -> None:
    with (
        Device.connect(mtls_server.address, tls=pki.client(pki.a)) as a,
        Device.connect(mtls_server.address, tls=pki.client(pki.b)) as b,
    ):
        pm = a.prepare_model_sync(add_model())
        req = spb.ExecuteRequest(session=b.remote.session_id, prepared_model=pm.handle)
        result = b.remote.stubs.prepared_model.executeSynchronously_1_3(req, timeout=5)
        assert result.status == ErrorStatus.INVALID_ARGUMENT
        bogus = spb.ExecuteRequest(session=b.remote.session_id, prepared_model="0" * 32)
        assert b.remote.stubs.prepared_model.executeSynchronously_1_3(bogus, timeout=5).message == result.message
        # The owner still uses it.
        x = np.ones((2, 4), np.float32)
        np.testing.assert_array_equal(pm.execute([x, x]).outputs[0], x + x)
        pm.release()


def _model_with_constant(nbytes: int) -> Model:
    b = ModelBuilder()
    n = nbytes // 4
    x = b.input(T.TENSOR_FLOAT32, [n])
    c = b.constant(np.zeros(n, np.float32))
    return b.outputs(b.op(O.ADD, [x, c, b.int32(0)], T.TENSOR_FLOAT32, [n])).finish()


def test_the_memory_quota_belongs_to_the_certificate_not_the_session(pki: Pki) -> None:
    with (
        LocalServer(*pki.mtls_args(), "--memory-per-client", "100000") as srv,
        Device.connect(srv.address, tls=pki.client(pki.a)) as a1,
        Device.connect(srv.address, tls=pki.client(pki.a)) as a2,
    ):
        first = a1.prepare_model_sync(_model_with_constant(60_000))
        with pytest.raises(ResourceExhaustedTransient, match="client-a"):
            a2.prepare_model_sync(_model_with_constant(60_000))  # same certificate: one quota
        with Device.connect(srv.address, tls=pki.client(pki.b)) as b:
            b.prepare_model_sync(_model_with_constant(60_000)).release()  # another client: its own quota
        first.release()
        a2.prepare_model_sync(_model_with_constant(60_000)).release()  # given back: fits again


def test_server_only_tls_with_a_ca_verifying_client(pki: Pki) -> None:
    args = ("--tls-cert", str(pki.server[0]), "--tls-key", str(pki.server[1]))
    with LocalServer(*args) as srv:
        with Device.connect(srv.address, tls=TlsConfig(ca=pki.ca)) as dev:
            _run_add(dev)
        # The certificate also names "localhost": a server name override is checked against it.
        with Device.connect(srv.address, tls=TlsConfig(ca=pki.ca, server_name="localhost")) as dev:
            assert dev.capabilities().operand_performance
        with pytest.raises(DeadObject):
            Device.connect(srv.address, tls=False, timeout=REFUSED_TIMEOUT)
        with pytest.raises(DeadObject):  # a name the certificate does not carry
            Device.connect(srv.address, tls=TlsConfig(ca=pki.ca, server_name="elsewhere"), timeout=REFUSED_TIMEOUT)


def test_client_tls_from_the_environment(pki: Pki, mtls_server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NNHAL_TLS_CA", str(pki.ca))
    monkeypatch.setenv("NNHAL_TLS_CERT", str(pki.b[0]))
    monkeypatch.setenv("NNHAL_TLS_KEY", str(pki.b[1]))
    with Device.connect(mtls_server.address) as dev:
        _run_add(dev)
    _wait_for_log(mtls_server, "opened by 'client-b'")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nnhal", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def test_cli_client_flags_and_the_healthcheck(pki: Pki, mtls_server: LocalServer) -> None:
    tls = ["--tls-ca", str(pki.ca), "--tls-cert", str(pki.a[0]), "--tls-key", str(pki.a[1])]
    info = _cli("info", mtls_server.address, *tls)
    assert info.returncode == 0, info.stderr
    assert "nnhal-cpu" in info.stdout
    refused = _cli("info", mtls_server.address, "--timeout", "1")
    assert refused.returncode == 2
    assert refused.stderr.startswith("nnhal: error: no nnhal server answered")
    missing = _cli("info", mtls_server.address, "--tls-ca", str(pki.ca.with_name("nope.pem")))
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "nope.pem" in missing.stderr, missing.stderr

    env = {"NNHAL_TLS_CA": str(pki.ca), "NNHAL_TLS_CERT": str(pki.a[0]), "NNHAL_TLS_KEY": str(pki.a[1])}
    probe = [sys.executable, "-m", "nnhal.tools.healthcheck", mtls_server.address]
    healthy = subprocess.run(probe, capture_output=True, text=True, timeout=30, env={**os.environ, **env})
    assert healthy.returncode == 0, healthy.stderr
    assert healthy.stdout.strip() == "serving"
    plain = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    assert plain.returncode == 1


@pytest.mark.parametrize(
    "case",
    ["missing cert", "not PEM", "key of another certificate", "key without cert", "client CA not PEM"],
)
def test_serve_rejects_bad_tls_files(pki: Pki, tmp_path: Path, case: str) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cert, key = str(pki.server[0]), str(pki.server[1])
    args = {
        "missing cert": ["--tls-cert", str(tmp_path / "none.crt"), "--tls-key", key],
        "not PEM": ["--tls-cert", str(junk), "--tls-key", key],
        "key of another certificate": ["--tls-cert", cert, "--tls-key", str(pki.a[1])],
        "key without cert": ["--tls-key", key],
        "client CA not PEM": ["--tls-cert", cert, "--tls-key", key, "--tls-client-ca", str(junk)],
    }[case]
    done = _cli("serve", "--listen", "127.0.0.1:0", *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nnhal: error: "), done.stderr
    assert "Traceback" not in done.stderr


def test_serve_tls_settings_from_the_environment_and_print_config(pki: Pki) -> None:
    env = {"NNHAL_SERVE_TLS_CERT": str(pki.server[0]), "NNHAL_SERVE_TLS_KEY": str(pki.server[1])}
    done = _cli("serve", "--print-config", env=env)
    assert done.returncode == 0, done.stderr
    assert f'tls_cert = "{pki.server[0]}"' in done.stdout
    assert "env NNHAL_SERVE_TLS_CERT" in done.stdout


@pytest.mark.parametrize("tls", [False, True])
def test_plaintext_on_a_reachable_address_warns(
    pki: Pki, tls: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Only loopback is ever bound in tests: the address is made to look reachable instead.
    monkeypatch.setattr(listeners, "is_loopback_host", lambda host: False)
    server_tls = load_server_tls(*pki.server) if tls else None
    with caplog.at_level(logging.WARNING, logger=listeners.__name__):
        server = serve.Server(ServerOptions(listen=["127.0.0.1:0"], tls=server_tls))
        server.stop(0)
    warned = [r.getMessage() for r in caplog.records if "PLAINTEXT" in r.getMessage()]
    assert bool(warned) != tls, warned


def test_loopback_hosts() -> None:
    assert all(listeners.is_loopback_host(h) for h in ("127.0.0.1", "127.1.2.3", "localhost", "[::1]", "::1"))
    assert not any(listeners.is_loopback_host(h) for h in ("0.0.0.0", "[::]", "10.0.0.1", "example.com"))


def test_client_quotas_share_the_limit_and_give_back_per_session() -> None:
    q = ClientQuotas(per_client=100)
    q.open_client_session("s1", "x509:a")
    q.open_client_session("s2", "x509:a")
    q.open_client_session("s3", None)  # no identity: its own quota
    q.charge("s1", 60)
    with pytest.raises(ResourceExhaustedTransient):
        q.charge("s2", 60)
    q.charge("s3", 60)
    assert q.close_session("s1") == 60  # only s1's bytes go back
    q.charge("s2", 60)
    with pytest.raises(ResourceExhaustedTransient):
        q.charge("s2", 60)
    q.uncharge("s2", 60)
    q.charge("s2", 100)
    assert q.close_session("s2") == 100 and q.close_session("s3") == 60 and q.total == 0
    q.open_client_session("s4", "x509:a")  # the identity's account starts afresh
    q.charge("s4", 100)

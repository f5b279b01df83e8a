"""The client transport's pure parts (``nnhal.client.remote.transport``): the TLS settings
from the environment and their file errors (INVALID_ARGUMENT, said in one line), address
forms, and request ids. The failure table and the deadline arithmetic are in
``tests/client/test_remote.py``; TLS against real servers in ``tests/integration/test_tls.py``."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest

from nnhal.client.remote.transport import (
    TlsConfig,
    new_request_id,
    open_channel,
    request_id_of,
    tag_request_id,
    target_of,
)
from nnhal.core.errors import DeadObject, InvalidArgument

# Not a real certificate: the client only checks the file is PEM before grpc parses it.
PEM = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"


def test_tls_from_the_environment() -> None:
    assert TlsConfig.from_env({}) is None
    assert TlsConfig.from_env({"NNHAL_TLS_CA": "  ", "NNHAL_TLS_SERVER_NAME": "nnhal"}) is None  # no files: no TLS
    assert TlsConfig.from_env({"NNHAL_TLS_CA": " /etc/ca.pem "}) == TlsConfig(ca="/etc/ca.pem")
    env = {"NNHAL_TLS_CERT": "c.pem", "NNHAL_TLS_KEY": "k.pem", "NNHAL_TLS_SERVER_NAME": "nnhal.local"}
    tls = TlsConfig.from_env(env)
    assert tls is not None and tls == TlsConfig(None, "c.pem", "k.pem", "nnhal.local")
    assert tls.options() == [("grpc.ssl_target_name_override", "nnhal.local")]
    assert TlsConfig().options() == []


def test_a_certificate_needs_its_key_and_the_files_must_be_readable_pem(tmp_path: Path) -> None:
    pem, junk = tmp_path / "ca.pem", tmp_path / "junk.pem"
    pem.write_bytes(PEM)
    junk.write_bytes(b"not a certificate")
    with pytest.raises(InvalidArgument, match="a client certificate needs its key"):
        TlsConfig(cert=pem).credentials()
    with pytest.raises(InvalidArgument, match="needs its key and a key its certificate"):
        TlsConfig(key=pem).credentials()
    with pytest.raises(InvalidArgument, match=r"TLS CA file .*missing.pem: cannot read it \(No such file"):
        TlsConfig(ca=tmp_path / "missing.pem").credentials()
    with pytest.raises(InvalidArgument, match=r"TLS CA file .*junk\.pem: not a PEM file"):
        TlsConfig(ca=junk).credentials()
    with pytest.raises(InvalidArgument, match=r"TLS key file .*junk\.pem: not a PEM file"):
        TlsConfig(cert=pem, key=junk).credentials()
    assert isinstance(TlsConfig(ca=pem).credentials(), grpc.ChannelCredentials)


def test_a_unix_socket_is_plaintext_even_with_tls(tmp_path: Path) -> None:
    # No credentials are built for a unix socket, so even an unreadable CA is no error there.
    channel = open_channel(f"unix:{tmp_path / 's.sock'}", [], TlsConfig(ca=tmp_path / "missing.pem"))
    channel.close()
    with pytest.raises(InvalidArgument, match="cannot read it"):
        open_channel("127.0.0.1:1", [], TlsConfig(ca=tmp_path / "missing.pem"))


def test_address_forms() -> None:
    assert target_of("127.0.0.1:50051") == "127.0.0.1:50051"
    assert target_of("unix:/tmp/s.sock") == "unix:/tmp/s.sock"
    assert target_of("unix:///tmp/s.sock") == "unix:/tmp/s.sock"


def test_request_ids_are_unique_across_threads() -> None:
    with ThreadPoolExecutor(4) as pool:
        ids = list(pool.map(lambda _: new_request_id(), range(4000)))
    assert len(set(ids)) == 4000
    prefix, _, counter = ids[0].rpartition("-")
    assert len(prefix) == 8 and int(counter, 16) > 0 and all(i.startswith(prefix + "-") for i in ids)


def test_request_ids_are_unique_and_an_error_keeps_its_first() -> None:
    ids = {new_request_id() for _ in range(1000)}
    assert len(ids) == 1000 and all(i.isascii() and i.isprintable() for i in ids)
    err = DeadObject("gone")
    assert request_id_of(err) is None and request_id_of(ValueError("x")) is None
    assert tag_request_id(err, "") is err and request_id_of(err) is None
    assert request_id_of(tag_request_id(err, "first")) == "first"
    assert request_id_of(tag_request_id(err, "second")) == "first"

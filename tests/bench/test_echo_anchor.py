"""The IPC benchmarks' anchor: a bare gRPC echo server in its own process.

It binds 127.0.0.1 port 0 or a unix socket, writes its address to a port file,
answers unary and bidi calls on raw bytes with the reply size the request asks
for, imports nothing of nnhal, and stops on SIGTERM. Every wait is bounded.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from nnhal.bench.echo_anchor import EchoClient, EchoServer
from nnhal.bench.echo_server import frame, reply_to

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def _check_echoes(address: str) -> None:
    with EchoClient(address) as client:
        client.wait_ready(10)
        assert client.unary(b"hello", timeout=10) == b"hello"  # shorter than the header: as is
        same = frame(64, 64)
        assert client.unary(same, timeout=10) == same
        assert len(client.unary(frame(209, 70), timeout=10)) == 70
        longer = client.unary(frame(16, 40), timeout=10)
        assert longer[:16] == frame(16, 40) and longer[16:] == bytes(24)
        with client.ping_pong(timeout=30) as stream:
            for size in (8, 100, 173):
                assert len(stream.ping(frame(size, 72))) == 72
            assert stream.ping(b"ping") == b"ping"
        payload = bytes(range(256)) * 10
        assert client.chunks(payload, 100, timeout=10) == payload  # 26 messages each way, in order
        assert client.chunks(b"", 100, timeout=10) == b""


def test_reply_sizes_follow_the_header() -> None:
    assert reply_to(b"") == b""
    request = frame(32, 32)
    assert reply_to(request) is request  # the very bytes, no copy
    assert reply_to(frame(32, 10)) == frame(32, 10)[:10]
    assert reply_to(frame(8, 12)) == frame(8, 12) + bytes(4)


def test_tcp_port_zero_echoes_and_stops() -> None:
    srv = EchoServer(unix=False)
    try:
        host, port = srv.address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        _check_echoes(srv.address)
    finally:
        srv.stop()
    assert srv.proc.returncode is not None


@pytest.mark.parametrize("unix", [False, True])
def test_the_grpc_aio_echo_answers_alike_and_stops(unix: bool) -> None:
    srv = EchoServer(unix=unix, aio=True)
    try:
        _check_echoes(srv.address)
    finally:
        srv.stop()
    assert srv.proc.returncode == 0  # SIGTERM stops it cleanly


def test_unix_socket_in_tmp_path(tmp_path: Path) -> None:
    sock, port_file = tmp_path / "echo.sock", tmp_path / "port"
    cmd = [sys.executable, "-m", "nnhal.bench.echo_server", "--listen", f"unix:{sock}", "--port-file", str(port_file)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    try:
        end = time.monotonic() + 30
        while not port_file.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.02)
        assert port_file.read_text().strip() == f"unix:{sock}"
        _check_echoes(f"unix:{sock}")
        proc.terminate()
        assert proc.wait(10) == 0  # SIGTERM stops it cleanly
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_echo_server_imports_nothing_of_nnhal() -> None:
    code = "import sys, nnhal.bench.echo_server; print(sorted(m for m in sys.modules if m.startswith('nnhal')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.strip() == "['nnhal', 'nnhal.bench', 'nnhal.bench.echo_server']"

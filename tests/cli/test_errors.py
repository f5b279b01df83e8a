"""Every bad input to ``nnhal`` is one line ``nnhal: error: ...`` on stderr, exit status 2,
no traceback, and no server started (each case must end well within its timeout)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nnhal import __version__

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "conformance" / "vectors"


def nnhal(*argv: str, env: dict[str, str] | None = None, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NNHAL_")}
    return subprocess.run(
        [sys.executable, "-m", "nnhal", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**clean, **(env or {})},
    )


def assert_usage_error(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    lines = done.stderr.splitlines()
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr
    assert len(lines) == 1 and lines[0].startswith("nnhal: error: "), done.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


SERVE = ("serve", "--cache-secret-file", "none")

#: (arguments, environment, words the error line must contain)
CASES: list[tuple[tuple[str, ...], dict[str, str], tuple[str, ...]]] = [
    ((*SERVE, "--listen", "127.0.0.1"), {}, ("'127.0.0.1'", "port is missing")),
    ((*SERVE, "--listen", "127.0.0.1:99999"), {}, ("0 to 65535",)),
    ((*SERVE, "--listen", "[::1"), {}, ("[IPv6]:port",)),
    ((*SERVE, "--listen", "::1:5"), {}, ("brackets",)),
    ((*SERVE, "--listen", "[nothost]:5"), {}, ("not an IPv6 address",)),
    ((*SERVE, "--listen", "unix:/nonexistent-nnhal-dir/x.sock"), {}, ("/nonexistent-nnhal-dir", "does not exist")),
    ((*SERVE, "--max-threads", "0"), {}, ("--max-threads", ">= 1")),
    ((*SERVE, "--max-sessions", "0"), {}, ("--max-sessions", ">= 1")),
    ((*SERVE, "--slots", "-1"), {}, ("--slots", ">= 1")),
    ((*SERVE, "--slots", "two"), {}, ("--slots", "whole number")),
    ((*SERVE, "--queue-depth", "-1"), {}, ("--queue-depth", ">= 0")),
    ((*SERVE, "--memory-total", "-5"), {}, ("--memory-total", "0 means unlimited")),
    ((*SERVE, "--memory-per-client", "-1"), {}, ("--memory-per-client", "0 means unlimited")),
    ((*SERVE, "--drain-seconds", "-1"), {}, ("--drain-seconds", ">= 0")),
    ((*SERVE, "--drain-seconds", "nan"), {}, ("--drain-seconds",)),
    ((*SERVE, "--metrics-listen", "127.0.0.1"), {}, ("--metrics-listen", "host:port or [IPv6]:port (the port")),
    ((*SERVE, "--metrics-listen", "unix:/tmp/m.sock"), {}, ("--metrics-listen", "HTTP on TCP")),
    ((*SERVE, "--log-format", "xml"), {}, ("text, json",)),
    ((*SERVE, "--feature-level", "2.0"), {}, ("1.0, 1.1, 1.2, 1.3",)),
    ((*SERVE, "--shm-dir", "/nonexistent-nnhal-dir"), {}, ("--shm-dir", "'none' to disable")),
    ((*SERVE, "--port-file", "/nonexistent-nnhal-dir/p"), {}, ("--port-file", "does not exist")),
    ((*SERVE, "--name", ""), {}, ("--name", "empty")),
    ((*SERVE, "--no-such-flag"), {}, ("unrecognized arguments",)),
    (SERVE, {"NNHAL_SLOTS": "-1"}, ("NNHAL_SLOTS=-1: ", ">= 1")),
    (SERVE, {"NNHAL_LISTEN": "127.0.0.1:1,127.0.0.1"}, ("NNHAL_LISTEN=", "port is missing")),
    (SERVE, {"NNHAL_ENABLE_FAULT_INJECTION": "maybe"}, ("NNHAL_ENABLE_FAULT_INJECTION=maybe", "true or false")),
    ((*SERVE, "--config", "/nonexistent-nnhal-dir/c.toml"), {}, ("--config", "no such file")),
    (SERVE, {"NNHAL_CONFIG": "/nonexistent-nnhal-dir/c.toml"}, ("no such file",)),
    (("info", "127.0.0.1"), {}, ("port is missing",)),
    (("info", "127.0.0.1:1", "--timeout", "0.5"), {}, ("no nnhal server answered at 127.0.0.1:1 within 0.5 s",)),
    (("info", "127.0.0.1:1", "--timeout", "-1"), {}, ("--timeout",)),
    (("conformance", "/nonexistent-nnhal-dir", "--start"), {}, ("no vector file or folder",)),
    (("conformance", str(VECTORS), "--start", "-k", "nomatch"), {}, ("-k 'nomatch' matches none",)),
    (("conformance", str(VECTORS), "--start", "--mode", "bogus"), {}, ("unknown --mode bogus", "sync")),
    (("conformance", str(VECTORS), "--start", "--jobs", "0"), {}, ("--jobs",)),
    (("conformance", str(VECTORS)), {}, ("--target", "--start")),
    (("conformance", str(VECTORS), "--start", "--report", "/nonexistent-nnhal-dir/r.json"), {}, ("--report",)),
    (("bench", "no.such"), {}, ("unknown benchmark", "no.such")),
    (("bench", "--json", "/nonexistent-nnhal-dir/b.json"), {}, ("--json", "does not exist")),
    (("frobnicate",), {}, ("invalid choice",)),
    ((), {}, ("required",)),
]


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("argv", "env", "needles"), CASES, ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_bad_input_is_one_line_and_exit_2(argv: tuple[str, ...], env: dict[str, str], needles: tuple[str, ...]) -> None:
    assert_usage_error(nnhal(*argv, env=env), *needles)


@pytest.mark.timeout(90)
def test_port_in_use_is_refused_before_serving(busy_port: int) -> None:
    line = assert_usage_error(nnhal(*SERVE, "--listen", f"127.0.0.1:{busy_port}"), "already in use")
    assert str(busy_port) in line


@pytest.mark.timeout(90)
def test_metrics_port_in_use_is_refused_before_serving(busy_port: int) -> None:
    done = nnhal(*SERVE, "--listen", "127.0.0.1:0", "--metrics-listen", f"127.0.0.1:{busy_port}")
    assert_usage_error(done, "--metrics-listen", "already in use")


@pytest.mark.timeout(90)
def test_unix_socket_path_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert_usage_error(nnhal(*SERVE, "--listen", f"unix:{tmp_path / 'f'}"), "not a socket")


@pytest.mark.timeout(90)
def test_bad_config_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    for text, needle in [
        ("[serve\n", "not valid TOML"),
        ("slots = 3\n", "outside any table"),
        ("[other]\nx = 1\n", "no [serve] table"),
        ("[serve]\nslotz = 3\n", "unknown key 'slotz'"),
        ("[serve]\nslots = -1\n", "[serve] slots = -1: must be a whole number >= 1"),
        ("[serve]\nqueue-depth = 1.5\n", "queue-depth = 1.5"),
        ("[serve]\nlisten = [1, 2]\n", "list of strings"),
        ("[serve]\nenable_fault_injection = 1\n", "true or false"),
    ]:
        bad.write_text(text)
        assert_usage_error(nnhal(*SERVE, "--config", str(bad)), str(bad), needle)


@pytest.mark.timeout(90)
def test_no_server_answers_within_the_default_timeout_and_no_death_is_claimed() -> None:
    start = time.monotonic()
    done = nnhal("info", "127.0.0.1:1")
    line = assert_usage_error(done, "no nnhal server answered at 127.0.0.1:1 within 3 s", "--timeout")
    assert "died" not in line and time.monotonic() - start < 60


def test_version() -> None:
    done = nnhal("--version")
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, f"nnhal {__version__}", "")

"""A server that survives garbage and mistakes (issue #23), across processes: undecodable
requests cost one log line each at most (rate-limited, no traceback); a failed call's request
id is on its log line; a second server never takes over a live unix socket, and a stale one
is replaced."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.core.enums import ErrorStatus
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.testing import LocalServer
from tests.conftest import add_model

pytestmark = [pytest.mark.timeout(120), pytest.mark.integration]


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def test_undecodable_requests_are_a_few_log_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with LocalServer("--log-format", "json", log_file=log) as srv:
        before = len(_lines(log))
        with grpc.insecure_channel(srv.address) as channel:
            unary = channel.unary_unary("/nnhal.v1.PreparedModel/executeSynchronously_1_3")
            stream = channel.unary_stream("/nnhal.v1.Device/prepareModel_1_3")
            for i in range(200):
                with pytest.raises(grpc.RpcError):
                    if i % 2:
                        unary(b"\xff\x0a" * (i % 50 + 1), timeout=10)
                    else:
                        list(stream(b"\xff\x0a" * (i % 50 + 1), timeout=10))
        with Device.connect(srv.address) as dev:
            assert dev.capabilities().operand_performance  # still serving
        time.sleep(0.2)
        grown = _lines(log)[before:]
    garbage = [line for line in grown if "could not be decoded" in line]
    assert 1 <= len(garbage) <= 25, grown
    assert not any("Traceback" in line for line in grown), grown
    assert all(json.loads(line)["level"] == "WARNING" for line in garbage)


def test_a_failed_calls_request_id_is_in_the_json_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    with LocalServer("--log-format", "json", log_file=log) as srv, Device.connect(srv.address) as dev:
        with dev.prepare_model_sync(add_model()) as pm:
            data = np.ones(8, np.float32).tobytes()
            short = Request(
                (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 0, 64))),
                (RequestArgument(location=DataLocation(1, 0, 32)),),
                (InlinePool(data, 32), InlinePool(b"", 32)),
            )
            outcome = pm.execute_request(short)
            assert outcome.status == ErrorStatus.INVALID_ARGUMENT
            rid = dev.remote.last_request_id
        assert rid
        end = time.monotonic() + 10
        while not any(rid in line for line in _lines(log)) and time.monotonic() < end:
            time.sleep(0.05)
        records = [json.loads(line) for line in _lines(log) if rid in line]
    assert any(
        r["level"] == "INFO" and r["status"] == "INVALID_ARGUMENT" and r["request_id"] == rid for r in records
    ), records


def _serve(listen: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nnhal", "serve", "--listen", listen, "--port-file", str(tmp_path / "second.port")],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_live_unix_socket_is_refused_and_a_stale_one_replaced(tmp_path: Path) -> None:
    listen = f"unix:{tmp_path / 'nnhal.sock'}"
    with LocalServer(listen=listen) as first:
        second = _serve(listen, tmp_path)
        assert second.returncode == 2, second.stderr
        err = second.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("nnhal: error: ") and "is in use" in err[0], err
        with Device.connect(first.address) as dev:
            assert dev.capabilities().operand_performance  # the first keeps serving
        os.kill(first.pid, signal.SIGKILL)  # leaves its socket file behind
        first.proc.wait(10)
    assert (tmp_path / "nnhal.sock").is_socket()
    with LocalServer(listen=listen) as third, Device.connect(third.address) as dev:
        assert dev.capabilities().operand_performance

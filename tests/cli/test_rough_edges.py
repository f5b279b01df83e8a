"""The command-line rough edges of issue 31: each bad input is one ``nnhal: error:`` line on
stderr, exit status 2, with nothing printed by a library (gRPC, numpy, LiteRT) around it."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from nnhal.cli.main import build_parser
from nnhal.client.death import DeathMonitor

from .test_errors import ROOT, SERVE, VECTORS, assert_usage_error, nnhal

MODEL = ROOT / "nnhal" / "models" / "tflite" / "face_detection_front.tflite"


def _all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found.extend(_all_parsers(child))
    return found


def test_url_address_says_to_drop_the_scheme() -> None:
    assert_usage_error(nnhal("info", "http://127.0.0.1:50051"), "without a URL scheme", "127.0.0.1:50051")


def test_unix_socket_that_cannot_be_created_is_our_line_only() -> None:
    assert_usage_error(nnhal(*SERVE, "--listen", "unix:/proc/x.sock"), "cannot create a socket at /proc/x.sock")


def test_every_parser_rejects_abbreviations() -> None:
    parsers = _all_parsers(build_parser())
    assert len(parsers) > 9
    assert all(not p.allow_abbrev for p in parsers), [p.prog for p in parsers if p.allow_abbrev]


def test_abbreviated_flag_is_refused() -> None:
    assert_usage_error(nnhal(*SERVE, "--slot", "3"), "unrecognized arguments: --slot 3")


@pytest.mark.parametrize("argv", [("--bogus",), ("-v", "--bogus=1"), ("--bogus", "serve")])
def test_unknown_top_level_option_is_named(argv: tuple[str, ...]) -> None:
    line = assert_usage_error(nnhal(*argv), "unrecognized arguments: --bogus")
    assert "required" not in line


def test_missing_command_still_says_so() -> None:
    assert_usage_error(nnhal(), "the following arguments are required: COMMAND")


def test_unwritable_save_outputs_is_refused_before_the_model_is_loaded(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = nnhal("run", "--start", str(MODEL), "--save-outputs", str(blocker / "out"))
    assert_usage_error(done, "--save-outputs", "cannot write")
    assert done.stdout == ""  # nothing imported, prepared or executed


def test_text_file_as_input_is_named_as_not_npy(tmp_path: Path) -> None:
    text = tmp_path / "in.txt"
    text.write_text("1 2 3\n")
    line = assert_usage_error(
        nnhal("run", "--start", str(MODEL), "--input", str(text)), "not a .npy file", "numpy.save"
    )
    assert "pickle" not in line


def test_npy_input_still_loads(tmp_path: Path) -> None:
    wrong = tmp_path / "in.npy"
    np.save(wrong, np.zeros((2, 2), np.float32))
    assert_usage_error(nnhal("run", "--start", str(MODEL), "--input", str(wrong)), "shape [2, 2]")


def test_compare_prints_nothing_from_litert_on_stderr() -> None:
    pytest.importorskip("ai_edge_litert")
    done = nnhal("run", "--start", str(MODEL), "--compare", "--repeat", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "XNNPACK" not in done.stderr and "INFO:" not in done.stderr, done.stderr


def test_failed_aio_connect_prints_nothing_of_its_own() -> None:
    code = (
        "import asyncio\n"
        "from nnhal.client import aio\n"
        "async def main():\n"
        "    try:\n"
        "        await aio.Device.connect('127.0.0.1:1', timeout=1)\n"
        "    except Exception as err:\n"
        "        print(type(err).__name__)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "DeadObject", "")


def test_gone_server_with_no_waiters_logs_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    channel = grpc.insecure_channel("127.0.0.1:1")
    monitor = DeathMonitor(channel, "nnhal server at 127.0.0.1:1")
    try:
        with caplog.at_level(logging.DEBUG, logger="nnhal"):
            monitor.declare_dead("no answer")
        assert monitor.dead
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    finally:
        # close_channel waits for grpc's connectivity poller: a bare close() under it raises in that thread
        monitor.stop_and_close()


def _serve(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    port_file = tmp_path / "port"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NNHAL_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "nnhal", *SERVE, "--listen", "127.0.0.1:0", "--port-file", str(port_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=clean,
    )
    end = time.monotonic() + 60
    while not port_file.exists() and time.monotonic() < end and proc.poll() is None:
        time.sleep(0.1)
    assert port_file.exists(), "the server did not write its port file"
    return proc, port_file


def test_info_limit_rows_are_sorted(tmp_path: Path) -> None:
    proc, port_file = _serve(tmp_path)
    try:
        done = nnhal("info", port_file.read_text().split()[0])
        assert done.returncode == 0, done.stderr
        keys = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("limit: ")]
        assert len(keys) > 1 and keys == sorted(keys), keys
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def test_port_file_is_removed_when_the_server_exits(tmp_path: Path) -> None:
    proc, port_file = _serve(tmp_path)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert not port_file.exists()


@pytest.mark.timeout(180)
def test_interrupted_conformance_says_how_far_it_got() -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NNHAL_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "nnhal", "conformance", str(VECTORS), "--start", "--mode", "sync"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=clean,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()  # the first progress line: cases are running
        assert first.startswith("conformance ["), first
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    lines = err.splitlines()
    assert proc.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    assert lines[-1].startswith("nnhal: interrupted after "), lines[-1:]
    assert "passed" in lines[-1] and "failed" in lines[-1] and "skipped" in lines[-1]

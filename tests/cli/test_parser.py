"""The command line's surface (DESIGN §11): every command and flag parses as documented,
and each command is run by the module the dispatch table names."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from nnhal.cli import build_parser
from nnhal.cli.main import COMMANDS


def test_serve_flags() -> None:
    args = build_parser().parse_args(
        ["serve", "--listen", "127.0.0.1:0", "--listen", "unix:/tmp/x.sock", "--port-file", "p", "--feature-level",
         "1.2", "--slots", "3", "--queue-depth", "5", "--memory-per-client", "7", "--memory-total", "9",
         "--shm-dir", "none", "--enable-fault-injection"]
    )  # fmt: skip
    assert args.command == "serve"
    assert args.listen == ["127.0.0.1:0", "unix:/tmp/x.sock"] and args.port_file == "p"
    assert (args.feature_level, args.slots, args.queue_depth) == ("1.2", 3, 5)
    assert (args.memory_per_client, args.memory_total, args.shm_dir) == (7, 9, "none")
    assert args.enable_fault_injection


def test_info_run_demo_default_address() -> None:
    parser = build_parser()
    assert parser.parse_args(["info"]).address == "127.0.0.1:50051"
    for command in ("run", "demo"):
        args = parser.parse_args([command, "unix:/tmp/s", "--start"])
        assert (args.command, args.address, args.start) == (command, "unix:/tmp/s", True)


def test_conformance_needs_exactly_one_target() -> None:
    parser = build_parser()
    args = parser.parse_args(["conformance", "a", "b", "--start", "--report", "r.json", "-k", "add", "--mode", "sync"])
    assert args.paths == [Path("a"), Path("b")] and args.start and args.report == Path("r.json")
    assert (args.pattern, args.mode) == ("add", ["sync"])
    assert parser.parse_args(["conformance", "a", "--target", "127.0.0.1:1"]).target == "127.0.0.1:1"
    for argv in (["conformance", "a"], ["conformance", "a", "--start", "--target", "x:1"]):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(argv)
        assert exit_info.value.code == 2


def test_bench_flags() -> None:
    args = build_parser().parse_args(["bench", "ipc.sync_small", "qos.high_under_low", "--quick", "--json", "o.json"])
    assert args.names == ["ipc.sync_small", "qos.high_under_low"] and args.quick and args.json == Path("o.json")
    assert build_parser().parse_args(["bench"]).names == []


def test_every_command_has_a_runner() -> None:
    assert set(COMMANDS) == {"serve", "info", "run", "demo", "import", "conformance", "report", "bench", "replay"}
    with pytest.raises(SystemExit):
        build_parser().parse_args(["no-such-command"])
    for module in set(COMMANDS.values()):
        assert callable(importlib.import_module(module).run), module


@pytest.mark.parametrize("argv", [["serve", "--port-f", "p"], ["run", "--star"]])
def test_abbreviated_flags_are_rejected(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("nnhal: error:") and err.count("\n") == 1 and "Traceback" not in err


def test_url_address_says_no_scheme(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["info", "http://127.0.0.1:50051"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "without a URL scheme (e.g. 127.0.0.1:50051)" in err and err.count("\n") == 1

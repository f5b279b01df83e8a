"""``nnhal serve`` settings: flags > NNHAL_* environment > --config file > defaults, shown by
``--print-config`` (TOML, source of each value as a comment, usable as a --config file)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from nnhal.cli import build_parser, config
from nnhal.cli.usage import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def resolve(argv: list[str], environ: dict[str, str] | None = None) -> config.Resolved:
    return config.resolve(build_parser().parse_args(["serve", *argv]), environ or {})


def test_every_setting_has_a_flag_and_an_env_name() -> None:
    args = build_parser().parse_args(["serve"])
    for s in config.SETTINGS:
        assert hasattr(args, s.key) and getattr(args, s.key) is None, s.key
        # Serve-side TLS files are NNHAL_SERVE_TLS_*: NNHAL_TLS_* belong to the client (a test
        # or tool that starts a server and connects to it reads both from one environment).
        serve_only = "SERVE_" if s.key.startswith("tls_") else ""
        assert s.env == "NNHAL_" + serve_only + s.flag[2:].replace("-", "_").upper()


def test_defaults_when_nothing_is_given() -> None:
    r = resolve([])
    assert set(r.sources.values()) == {"default"}
    assert r["listen"] == ["127.0.0.1:50051"] and r["slots"] == 2 and r["drain_seconds"] == 10.0
    assert r["metrics_listen"] == "" and r["log_format"] == "text"


def test_precedence_flags_over_env_over_file_over_defaults(tmp_path: Path) -> None:
    cfg = tmp_path / "nnhal.toml"
    cfg.write_text(
        '[serve]\nslots = 3\nqueue-depth = 5\nmemory_total = 7\nlisten = ["127.0.0.1:7001"]\n'
        "enable_fault_injection = true\n"
    )
    env = {"NNHAL_QUEUE_DEPTH": "6", "NNHAL_MEMORY_TOTAL": "8", "NNHAL_LISTEN": "127.0.0.1:7002, 127.0.0.1:7003"}
    r = resolve(["--config", str(cfg), "--memory-total", "9", "--no-enable-fault-injection"], env)
    assert (r["slots"], r.sources["slots"]) == (3, f"file {cfg}")
    assert (r["queue_depth"], r.sources["queue_depth"]) == (6, "env NNHAL_QUEUE_DEPTH")
    assert (r["memory_total"], r.sources["memory_total"]) == (9, "flag --memory-total")
    assert r["listen"] == ["127.0.0.1:7002", "127.0.0.1:7003"] and r.sources["listen"] == "env NNHAL_LISTEN"
    fault = (r["enable_fault_injection"], r.sources["enable_fault_injection"])
    assert fault == (False, "flag --enable-fault-injection")
    assert (r["max_sessions"], r.sources["max_sessions"]) == (1024, "default")
    assert resolve(["--listen", "127.0.0.1:1"], env)["listen"] == ["127.0.0.1:1"]


def test_config_file_from_the_environment(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[serve]\nslots = 4\n[other]\nignored = 1\n")
    assert resolve([], {"NNHAL_CONFIG": str(cfg)})["slots"] == 4


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        ([], {"NNHAL_SLOTS": "-1"}, "NNHAL_SLOTS=-1: must be a whole number >= 1"),
        ([], {"NNHAL_LISTEN": " , "}, "NNHAL_LISTEN= , : give at least one value"),
        ([], {"NNHAL_SERVE_TLS_CERT": "server.crt"}, "(env NNHAL_SERVE_TLS_CERT) needs --tls-key"),
        (["--slots", "1"], {"NNHAL_DRAIN_SECONDS": "soon"}, "NNHAL_DRAIN_SECONDS=soon"),
    ],
)
def test_bad_values_name_their_source(argv: list[str], env: dict[str, str], needle: str) -> None:
    with pytest.raises(UsageError) as err:
        resolve(argv, env)
    assert needle in str(err.value)


def _print_config(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NNHAL_")}
    return subprocess.run(
        [sys.executable, "-m", "nnhal", "serve", *argv, "--print-config"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**clean, **env},
    )


@pytest.mark.timeout(120)
def test_print_config_shows_sources_and_round_trips(tmp_path: Path) -> None:
    cfg = tmp_path / "in.toml"
    cfg.write_text('[serve]\nname = "from-file"\nslots = 3\nqueue_depth = 4\nlog_format = "json"\n')
    done = _print_config("--config", str(cfg), "--slots", "5", env={"NNHAL_QUEUE_DEPTH": "6"})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "[serve]" and len(lines) == 1 + len(config.SETTINGS)
    by_key = {line.split(" = ", 1)[0]: line for line in lines[1:]}
    assert by_key["slots"].startswith("slots = 5 ") and by_key["slots"].endswith("# flag --slots")
    assert by_key["queue_depth"].endswith("# env NNHAL_QUEUE_DEPTH")
    assert by_key["name"].startswith('name = "from-file"') and by_key["name"].endswith(f"# file {cfg}")
    assert by_key["max_sessions"].endswith("# default")
    printed = tomllib.loads(done.stdout)["serve"]
    assert (printed["slots"], printed["queue_depth"], printed["log_format"]) == (5, 6, "json")
    # The printed settings, fed back as the only source, give the same values.
    out = tmp_path / "out.toml"
    out.write_text(done.stdout)
    again = _print_config("--config", str(out), env={})
    assert again.returncode == 0 and tomllib.loads(again.stdout)["serve"] == printed

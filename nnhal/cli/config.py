"""The settings of ``nnhal serve`` and where each value comes from (DESIGN §12).

One table (``SETTINGS``) names every serve option once; from it come the flags, the
``NNHAL_*`` environment variables (``--queue-depth`` <-> ``NNHAL_QUEUE_DEPTH``; a list such
as ``--listen`` is comma-separated there), the keys of the ``[serve]`` table of a
``--config`` TOML file (``queue_depth`` or ``queue-depth``) and ``--print-config``.

Precedence: flags > environment > file > defaults. Every value, whatever its source, goes
through the same check; a bad one is a UsageError naming its source
(``NNHAL_SLOTS=-1: must be a whole number >= 1, got '-1'``). An empty string is "off"
for the options that can be off (``port_file``, ``metrics_listen``, ``health_listen``, ``tls_*``); TOML has
no null.

The TLS settings' variables are ``NNHAL_SERVE_TLS_CERT``, ``NNHAL_SERVE_TLS_KEY`` and
``NNHAL_SERVE_TLS_CLIENT_CA``, not ``NNHAL_TLS_*``: those name the *client's* CA,
certificate and key (``nnhal.client.remote.transport.TlsConfig``), and a host may run both.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nnhal.cli import setting_checks as checks
from nnhal.cli.usage import (
    UsageError,
    for_argparse,
    positive_int,
    seconds,
    server_address,
    size,
    whole,
)
from nnhal.server.defaults import DEFAULT_SECRET_FILE, DEFAULT_SHM_DIR, EVENT_LOOPS
from nnhal.server.devices import DeviceSpec, parse_device

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENV_PREFIX = "NNHAL_"


@dataclass(frozen=True)
class Setting:
    """One serve option. ``check`` turns text (a flag, a variable, a file value) into the
    value or raises ValueError saying what is allowed."""

    key: str
    check: Callable[[str], Any]
    default: Any
    help: str
    metavar: str = ""
    repeatable: bool = False
    switch: bool = False
    #: The environment variable when it is not NNHAL_<KEY> (a name the client uses too).
    env_name: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    @property
    def env(self) -> str:
        return self.env_name or ENV_PREFIX + self.key.upper()


def device_specs(r: Resolved) -> list[DeviceSpec]:
    """The ``--device`` specs, names unique (UsageError naming the source otherwise)."""
    specs = [parse_device(text) for text in r["device"]]
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise UsageError(f"--device ({r.sources['device']}): the name {spec.name!r} is given twice; use NAME=KIND")
        seen.add(spec.name)
    return specs


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "listen", server_address, ["127.0.0.1:50051"], "host:port, [IPv6]:port or unix:PATH; repeatable", "ADDR", True
    ),
    Setting("port_file", checks.port_file, "", "write the bound address(es) here once listening", "FILE"),
    Setting("name", checks.name, "nnhal-cpu", "device name (of the one CPU device when no --device is given)", "NAME"),
    Setting(
        "device",
        checks.device,
        [],
        "a hosted device: KIND or NAME=KIND, KIND cpu, ort or litert (KIND:strict: no CPU fallback inside); "
        "repeatable, the first is the default "
        "(default: one cpu device named --name)",
        "[NAME=]KIND",
        True,
    ),
    Setting("ort_threads", positive_int, 1, "threads of each ort and litert device (>= 1)", "N"),
    Setting(
        "feature_level",
        checks.feature_level,
        checks.DEFAULT_FEATURE_LEVEL,
        "NN HAL served: HIDL 1.0, 1.1, 1.2, 1.3, or AIDL V1-V4 as feature level 5, 6, 7, 8 (aidl-v1..aidl-v4)",
        "V",
    ),
    Setting("slots", positive_int, 2, "executions running at once (>= 1)", "N"),
    Setting(
        "compute_threads",
        positive_int,
        1,
        "threads one numpy kernel may use (BLAS); the slots already run executions side by side",
        "N",
    ),
    Setting("queue_depth", lambda t: whole(t, 0), 64, "executions that may wait beyond the slots (0: none wait)", "N"),
    Setting(
        "memory_per_client",
        lambda t: size(t, 0, "unlimited"),
        0,
        "bytes per client, e.g. 256MiB (0 = unlimited)",
        "BYTES",
    ),
    Setting(
        "memory_total",
        lambda t: "auto" if t == "auto" else size(t, 0, "unlimited or auto"),
        "auto",
        "bytes in total, e.g. 1GiB (0 = unlimited; auto: 3/4 of what this process may use, its cgroup limit "
        "or else the physical memory)",
        "BYTES",
    ),
    Setting("max_sessions", positive_int, 1024, "sessions open at once (>= 1; ~45 KiB of memory each)", "N"),
    Setting(
        "max_sessions_per_peer",
        positive_int,
        64,
        "sessions open at once per verified identity (mTLS) or remote host; same-host peers are not capped",
        "N",
    ),
    Setting(
        "max_threads",
        positive_int,
        256,
        "worker threads for calls that do work (sessions and idle bursts hold none)",
        "N",
    ),
    Setting("max_bursts_per_session", positive_int, 16, "open execution bursts per client (>= 1)", "N"),
    Setting("max_fence_waits_per_session", positive_int, 16, "waiting getExecutionInfo calls per client", "N"),
    Setting("max_preparations_per_session", positive_int, 16, "preparations in progress per client (>= 1)", "N"),
    Setting(
        "max_long_calls",
        lambda t: whole(t, 0, "derived"),
        0,
        "bursts and fence waits of all clients together (0: derived from the threads)",
        "N",
    ),
    Setting(
        "shm_dir",
        checks.shm_dir,
        DEFAULT_SHM_DIR,
        "folder of shared-memory regions clients may name ('none' disables)",
        "DIR",
    ),
    Setting("shm_prefix", checks.name, "nnhal-", "required prefix of shared-memory region names", "PREFIX"),
    Setting("shm_allow_remote", checks.switch, False, "accept shared pools from non-local peers", switch=True),
    Setting("fast_path", checks.switch, True, "offer same-host clients bursts over shared memory", switch=True),
    Setting(
        "event_loop",
        checks.choice(*EVENT_LOOPS),
        "auto",
        "the event loop serving gRPC: uvloop (fewer Python calls per RPC), asyncio, or auto (uvloop where installed)",
        "KIND",
    ),
    Setting(
        "cache_secret_file",
        checks.cache_secret_file,
        str(DEFAULT_SECRET_FILE),
        "key that seals compilation caches, created if missing ('none': a per-process key)",
        "FILE",
    ),
    Setting(
        "record",
        checks.record_dir,
        "",
        "record every session's HAL calls (models and data included) into DIR, one file per session",
        "DIR",
    ),
    Setting("enable_fault_injection", checks.switch, False, "honour test-only setFaults", switch=True),
    Setting(
        "fault_seed",
        checks.fault_seed,
        "",
        "with --enable-fault-injection: also fault calls made in a client's fault scope, each decided by "
        "(seed, scope, method, call ordinal) alone, so a run replays exactly",
        "S",
    ),
    Setting("fault_rate", checks.fault_rate, 0.1, "share of scoped calls a --fault-seed schedule faults (0 .. 1)", "P"),
    Setting(
        "example_extension", checks.switch, False, "offer the example vendor extension com.example.nnhal", switch=True
    ),
    Setting(
        "max_execution_seconds",
        seconds,
        0.0,
        "executions without a client deadline end after this (MISSED_DEADLINE_PERSISTENT; 0 = never)",
        "S",
    ),
    Setting("drain_seconds", seconds, 10.0, "on SIGTERM/SIGINT, time in-flight work gets to finish", "S"),
    Setting("metrics_listen", checks.metrics_address, "", "serve Prometheus metrics here (default: off)", "ADDR"),
    Setting(
        "health_listen",
        checks.health_address,
        "",
        "also serve grpc.health.v1 only, in plaintext, here (probes that cannot speak TLS; default: off)",
        "ADDR",
    ),
    Setting(
        "log_format", checks.choice(*checks.LOG_FORMATS), "text", "text, or json: one JSON object per line", "FORMAT"
    ),
    Setting(
        "tls_cert",
        checks.tls_file,
        "",
        "PEM certificate chain: every TCP listener serves TLS (unix sockets stay plaintext)",
        "FILE",
        env_name=ENV_PREFIX + "SERVE_TLS_CERT",
    ),
    Setting(
        "tls_key", checks.tls_file, "", "PEM private key of --tls-cert", "FILE", env_name=ENV_PREFIX + "SERVE_TLS_KEY"
    ),
    Setting(
        "tls_client_ca",
        checks.tls_file,
        "",
        "PEM CA: require client certificates it signed (mTLS); the certificate's CN/SAN is the client",
        "FILE",
        env_name=ENV_PREFIX + "SERVE_TLS_CLIENT_CA",
    ),
)
BY_KEY = {s.key: s for s in SETTINGS}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The serve flags, ``--config`` and ``--print-config``. Flags default to None so that
    ``resolve`` can tell a given flag from an absent one."""
    for s in SETTINGS:
        shown = "" if s.switch else f" (default: {_render(s.default)}; env {s.env})"
        if s.switch:
            parser.add_argument(
                s.flag, action=argparse.BooleanOptionalAction, default=None, help=f"{s.help} (env {s.env})"
            )
        else:
            parser.add_argument(
                s.flag,
                type=for_argparse(s.check),
                default=None,
                action="append" if s.repeatable else "store",
                metavar=s.metavar or None,
                help=s.help + shown,
            )
    parser.add_argument("--config", metavar="FILE", help=f"TOML file with a [serve] table (env {ENV_PREFIX}CONFIG)")
    parser.add_argument("--print-config", action="store_true", help="print the effective settings and exit")


@dataclass(frozen=True)
class Resolved:
    """The effective value of every setting and where it came from."""

    values: dict[str, Any]
    sources: dict[str, str]

    def __getitem__(self, key: str) -> Any:
        return self.values[key]


def _checked(setting: Setting, text: str, source: str) -> Any:
    try:
        return setting.check(text)
    except ValueError as err:
        raise UsageError(f"{source}: {err}") from None


def _from_env(setting: Setting, environ: Mapping[str, str]) -> Any:
    raw = environ[setting.env]
    source = f"{setting.env}={raw}"
    if setting.repeatable:
        items = [part.strip() for part in raw.split(",") if part.strip()]
        if not items:
            raise UsageError(f"{source}: give at least one value (comma-separated)")
        return [_checked(setting, item, source) for item in items]
    return _checked(setting, raw, source)


def _needs_items(setting: Setting) -> bool:
    return bool(setting.default)


def _file_text(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    return None


def _from_file(setting: Setting, value: object, source: str) -> Any:
    if setting.repeatable:
        items = value if isinstance(value, list) else [value]
        # An empty list is the default of lists that may be empty (--device: one CPU device).
        if (not items and _needs_items(setting)) or not all(isinstance(item, str) for item in items):
            raise UsageError(f"{source}: give a string or a non-empty list of strings")
        return [_checked(setting, str(item), source) for item in items]
    if setting.switch and not isinstance(value, bool):
        raise UsageError(f"{source}: must be true or false")
    text = _file_text(value)
    if text is None:
        raise UsageError(f"{source}: must be a single value, not a {type(value).__name__}")
    return _checked(setting, text, source)


def load_file(path: Path) -> dict[str, tuple[object, str]]:
    """The ``[serve]`` table of ``path``: key (underscored) -> (value, source for messages)."""
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"--config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"--config {path}: cannot read it ({err})") from None
    except tomllib.TOMLDecodeError as err:
        raise UsageError(f"--config {path}: not valid TOML ({err})") from None
    stray = [k for k, v in data.items() if not isinstance(v, dict)]
    if stray:
        raise UsageError(f"{path}: {stray[0]!r} is outside any table; put serve options under [serve]")
    table = data.get("serve")
    if table is None:
        raise UsageError(f"{path}: no [serve] table; put serve options under [serve]")
    found: dict[str, tuple[object, str]] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        if key not in BY_KEY:
            raise UsageError(f"{path}: [serve] has an unknown key {raw_key!r}; known keys: {', '.join(BY_KEY)}")
        found[key] = (value, f"{path}: [serve] {raw_key} = {json.dumps(value, default=str)}")
    return found


def resolve(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> Resolved:
    """Every setting's value: flags > environment > file > defaults, each checked."""
    config_path = args.config if args.config is not None else environ.get(ENV_PREFIX + "CONFIG") or None
    in_file = load_file(Path(config_path)) if config_path else {}
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for s in SETTINGS:
        given = getattr(args, s.key, None)
        if given is not None:
            values[s.key], sources[s.key] = given, f"flag {s.flag}"
        elif s.env in environ:
            values[s.key], sources[s.key] = _from_env(s, environ), f"env {s.env}"
        elif s.key in in_file:
            value, source = in_file[s.key]
            values[s.key], sources[s.key] = _from_file(s, value, source), f"file {config_path}"
        else:
            values[s.key], sources[s.key] = s.default, "default"
    resolved = Resolved(values, sources)
    _check_together(resolved)
    return resolved


def _check_together(r: Resolved) -> None:
    device_specs(r)
    if bool(r["tls_cert"]) != bool(r["tls_key"]):
        given, missing = ("tls_cert", "tls_key") if r["tls_cert"] else ("tls_key", "tls_cert")
        raise UsageError(
            f"{BY_KEY[given].flag} ({r.sources[given]}) needs {BY_KEY[missing].flag} too: TLS takes a certificate "
            "and its key"
        )
    if r["tls_client_ca"] and not r["tls_cert"]:
        raise UsageError(
            f"--tls-client-ca ({r.sources['tls_client_ca']}) needs --tls-cert and --tls-key: client certificates "
            "are verified only over TLS"
        )


def _render(value: object) -> str:
    """A TOML value: strings as basic strings (JSON escapes are valid TOML), lists inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_render(v) for v in value) + "]"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))


def render(resolved: Resolved) -> str:
    """``--print-config``: a ``[serve]`` table, one ``key = value  # source`` per line;
    usable as a ``--config`` file as it is."""
    width = max(len(s.key) + 3 + len(_render(resolved[s.key])) for s in SETTINGS)
    lines = ["[serve]"]
    for s in SETTINGS:
        line = f"{s.key} = {_render(resolved[s.key])}"
        lines.append(f"{line.ljust(width)}  # {resolved.sources[s.key]}")
    return "\n".join(lines)

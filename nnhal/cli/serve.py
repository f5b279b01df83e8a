"""``nnhal serve``: run a driver hosting its devices (one CPU device by default) until SIGTERM / SIGINT.

Settings are resolved (flags > ``NNHAL_*`` > ``--config`` > defaults, see ``cli.config``) and
checked before anything starts; ``--print-config`` prints them and exits 0. A listen
address that cannot be bound (a port in use) is a UsageError before the server is built.
Options the server does not know yet (``drain_seconds``, ``metrics_listen``) are passed
only when ``ServerOptions`` has the field, and otherwise logged as ignored.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nnhal.cli import config, setting_checks
from nnhal.cli.logs import configure
from nnhal.cli.usage import UsageError, check_bindable

if TYPE_CHECKING:
    from nnhal.server.rpc.identity import ServerTls
    from nnhal.server.rpc.server_options import ServerOptions

log = logging.getLogger(__name__)

#: ``--feature-level`` text -> the level served (the table lives with the setting).


#: Settings that map to a ServerOptions field of the same name, passed when the field exists
#: (with the value the server expects: None for "off").
OPTIONAL_FIELDS: dict[str, Callable[[Any], Any]] = {
    "drain_seconds": lambda v: v,
    "metrics_listen": lambda v: v or None,
    "health_listen": lambda v: v or None,
    "fast_path": lambda v: v,
    "event_loop": lambda v: v,
    "record": lambda v: Path(v) if v else None,
}


def _fault_seed(r: config.Resolved) -> int | None:
    seed: int | str = r["fault_seed"]  # "": none
    if seed == "":
        return None
    if not r["enable_fault_injection"]:
        raise UsageError("--fault-seed makes a seeded fault schedule: it needs --enable-fault-injection")
    return int(seed)


def _cache_secret(setting: str) -> bytes:
    from nnhal.server.cache import load_secret

    try:
        return load_secret(None if setting == "none" else Path(setting))
    except OSError as err:
        raise UsageError(
            f"--cache-secret-file {setting}: cannot read or create it ({err.strerror or err}); "
            "choose a writable path or 'none' for a per-process key"
        ) from None


def _tls(r: config.Resolved) -> ServerTls | None:
    """The server's TLS material, read and checked (UsageError naming the bad file)."""
    if not r["tls_cert"]:
        return None
    from nnhal.server.rpc.identity import load_server_tls

    try:
        return load_server_tls(
            Path(r["tls_cert"]), Path(r["tls_key"]), Path(r["tls_client_ca"]) if r["tls_client_ca"] else None
        )
    except ValueError as err:
        raise UsageError(f"{err}; give PEM files (--tls-cert, --tls-key, --tls-client-ca)") from None


def server_options(r: config.Resolved) -> ServerOptions:
    """The ServerOptions for resolved settings (the cache secret is read or created here)."""
    from nnhal.server.driver import DeviceConfig
    from nnhal.server.executor import example_extension
    from nnhal.server.host_memory import default_memory_total
    from nnhal.server.rpc.server_options import ServerOptions
    from nnhal.server.shared_regions import SharedMemoryPolicy

    shm = None
    if r["shm_dir"] != "none":
        shm = SharedMemoryPolicy(Path(r["shm_dir"]).resolve(), r["shm_prefix"], r["shm_allow_remote"])
    device = DeviceConfig(
        name=r["name"],
        feature_level=setting_checks.FEATURE_LEVELS[r["feature_level"]],
        shared_memory=shm,
        slots=r["slots"],
        queue_depth=r["queue_depth"],
        memory_per_client=r["memory_per_client"],
        memory_total=default_memory_total() if r["memory_total"] == "auto" else r["memory_total"],
        max_sessions=r["max_sessions"],
        max_sessions_per_peer=r["max_sessions_per_peer"],
        max_bursts_per_session=r["max_bursts_per_session"],
        max_fence_waits_per_session=r["max_fence_waits_per_session"],
        max_preparations_per_session=r["max_preparations_per_session"],
        max_long_calls=r["max_long_calls"],
        max_execution_seconds=r["max_execution_seconds"],
        fault_injection=r["enable_fault_injection"],
        fault_seed=_fault_seed(r),
        fault_rate=r["fault_rate"],
        extensions=(example_extension.NAME,) if r["example_extension"] else (),
        cache_secret=_cache_secret(r["cache_secret_file"]),
    )
    known = {f.name for f in dataclasses.fields(ServerOptions)}
    extra: dict[str, Any] = {}
    for key, convert in OPTIONAL_FIELDS.items():
        if key in known:
            extra[key] = convert(r[key])
        elif r.sources[key] != "default":
            log.warning("%s is not supported by this server yet; ignored", config.BY_KEY[key].flag)
    return ServerOptions(
        listen=list(r["listen"]),
        port_file=Path(r["port_file"]) if r["port_file"] else None,
        max_threads=r["max_threads"],
        device=device,
        tls=_tls(r),
        devices=config.device_specs(r),
        ort_threads=r["ort_threads"],
        **extra,
    )


def run(args: argparse.Namespace) -> int:
    resolved = config.resolve(args)
    if args.print_config:
        print(config.render(resolved))
        return 0
    configure(logging.INFO, resolved["log_format"])
    for addr in resolved["listen"]:
        check_bindable(addr)
    if resolved["metrics_listen"]:
        check_bindable(resolved["metrics_listen"], "--metrics-listen")
    if resolved["health_listen"]:
        check_bindable(resolved["health_listen"], "--health-listen")
    # The server's modules (numpy, gRPC, the executor) load only now: settings refused above,
    # and --print-config, answer without that start-up cost.
    from threadpoolctl import threadpool_limits

    from nnhal.server import log_limits
    from nnhal.server.rpc.request_id import install_log_filter
    from nnhal.server.rpc.serve import run_forever

    # numpy's BLAS starts one thread per core for each matmul; with several slots running at
    # once that oversubscribes the cores (a 64x96x96 matmul went from 0.18 ms to 15 ms on a
    # loaded 2-core machine). The limit holds for the life of the process.
    threadpool_limits(limits=resolved["compute_threads"])
    install_log_filter()  # the request id on every log line of a call
    log_limits.install()  # garbage in one line, repeated warnings rate-limited
    options = server_options(resolved)
    try:
        run_forever(options)
    except (RuntimeError, OSError) as err:
        # Binding happens as the server is built (a port taken since check_bindable);
        # gRPC says only "Failed to bind to address ...".
        raise UsageError(f"cannot start serving: {err}") from None
    return 0

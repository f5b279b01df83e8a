"""The ``nnhal`` command line (DESIGN §11): serve, info, run, conformance, bench.

The CLI is the one place that may start the server (``serve``) and use the
client in the same program; the library packages never import each other.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from nnhal.core.errors import HalError
from nnhal.server.cache import DEFAULT_SECRET_FILE
from nnhal.server.memory import DEFAULT_SHM_DIR


def _serve(args: argparse.Namespace) -> int:
    from nnhal.core.enums import HalVersion
    from nnhal.server.cache import load_secret
    from nnhal.server.driver import DeviceConfig
    from nnhal.server.memory import SharedMemoryPolicy
    from nnhal.server.rpc.serve import ServerOptions, run_forever

    level = {"1.0": HalVersion.V1_0, "1.1": HalVersion.V1_1, "1.2": HalVersion.V1_2, "1.3": HalVersion.V1_3}
    shm = None
    if args.shm_dir != "none":
        shm_dir = Path(args.shm_dir)
        if not shm_dir.is_dir():
            print(f"nnhal serve: shared-memory directory {shm_dir} does not exist (use --shm-dir none to disable)")
            return 2
        shm = SharedMemoryPolicy(shm_dir.resolve(), args.shm_prefix, args.shm_allow_remote)
    device = DeviceConfig(
        name=args.name,
        feature_level=level[args.feature_level],
        shared_memory=shm,
        slots=args.slots,
        queue_depth=args.queue_depth,
        memory_per_client=args.memory_per_client,
        memory_total=args.memory_total,
        max_sessions=args.max_sessions,
        fault_injection=args.enable_fault_injection,
        cache_secret=load_secret(None if args.cache_secret_file == "none" else Path(args.cache_secret_file)),
    )
    options = ServerOptions(
        listen=args.listen or ["127.0.0.1:50051"],
        port_file=Path(args.port_file) if args.port_file else None,
        max_threads=args.max_threads,
        device=device,
    )
    run_forever(options)
    return 0


def _info(args: argparse.Namespace) -> int:
    from nnhal.cli.table import print_table
    from nnhal.client.device import Device

    with Device.connect(args.address, client_name="nnhal-info") as dev:
        caps = dev.capabilities()
        n_model, n_data = dev.number_of_cache_files_needed()
        rows = [
            ["name", dev.name],
            ["version", dev.version_string()],
            ["type", dev.type().name],
            ["feature level", f"NN HAL {dev.feature_level // 10}.{dev.feature_level % 10}"],
            ["status", dev.status().name],
            ["extensions", ", ".join(e.name for e in dev.supported_extensions()) or "none"],
            ["cache files", f"{n_model} model, {n_data} data"],
            ["operand types with performance", str(len(caps.operand_performance))],
            ["relaxed fp32->fp16 perf", f"{caps.relaxed_float32_to_float16_performance_tensor.exec_time:g}"],
        ]
        for key, value in dev.limits().items():
            rows.append([f"limit: {key}", "unlimited" if value == 0 else str(value)])
        print_table(["property", "value"], rows)
    return 0


def _run(args: argparse.Namespace) -> int:
    from nnhal.cli.demo import run_demo

    return run_demo(args.address, start=args.start)


def _conformance(args: argparse.Namespace) -> int:
    from nnhal.cli.conformance import run_cli

    return run_cli(args)


def _bench(args: argparse.Namespace) -> int:
    from nnhal.cli.bench import run_cli

    return run_cli(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nnhal", description="The Android NN HAL as a gRPC service.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("serve", help="run a driver hosting the CPU device")
    s.add_argument(
        "--listen", action="append", metavar="ADDR", help="host:port or unix:PATH (repeatable); default 127.0.0.1:50051"
    )
    s.add_argument("--port-file", help="write the bound address(es) here once listening")
    s.add_argument("--name", default="nnhal-cpu", help="device name")
    s.add_argument("--feature-level", choices=["1.0", "1.1", "1.2", "1.3"], default="1.3")
    s.add_argument("--slots", type=int, default=2, help="executions running at once")
    s.add_argument("--queue-depth", type=int, default=64, help="executions that may wait beyond the slots")
    s.add_argument("--memory-per-client", type=int, default=0, help="bytes per client (0 = unlimited)")
    s.add_argument("--memory-total", type=int, default=0, help="bytes in total (0 = unlimited)")
    s.add_argument("--max-sessions", type=int, default=128)
    s.add_argument("--max-threads", type=int, default=256, help="gRPC worker threads (each session holds one)")
    s.add_argument(
        "--shm-dir",
        default=DEFAULT_SHM_DIR,
        help="directory of the shared-memory regions same-host clients may name ('none' disables them)",
    )
    s.add_argument("--shm-prefix", default="nnhal-", help="required prefix of shared-memory region names")
    s.add_argument("--shm-allow-remote", action="store_true", help="accept shared pools from non-local peers")
    s.add_argument(
        "--cache-secret-file",
        default=str(DEFAULT_SECRET_FILE),
        help="key that seals compilation caches, created if missing ('none': a per-process key)",
    )
    s.add_argument("--enable-fault-injection", action="store_true", help="honour test-only setFaults (delays)")
    s.set_defaults(func=_serve)

    i = sub.add_parser("info", help="show the device table of a server")
    i.add_argument("address", nargs="?", default="127.0.0.1:50051")
    i.set_defaults(func=_info)

    r = sub.add_parser("run", help="run the demo model through a server")
    r.add_argument("address", nargs="?", default="127.0.0.1:50051")
    r.add_argument("--start", action="store_true", help="start a local server for the run")
    r.set_defaults(func=_run)
    d = sub.add_parser("demo", help="alias of run")
    d.add_argument("address", nargs="?", default="127.0.0.1:50051")
    d.add_argument("--start", action="store_true", help="start a local server for the run")
    d.set_defaults(func=_run)

    c = sub.add_parser("conformance", help="run NNAPI test vectors against a server")
    c.add_argument("paths", nargs="+", type=Path, help="vector files or folders")
    target = c.add_mutually_exclusive_group(required=True)
    target.add_argument("--target", metavar="ADDR", help="address of a running server")
    target.add_argument("--start", action="store_true", help="start a local server for the run")
    c.add_argument("--report", type=Path, help="write a JSON report here")
    c.add_argument("-k", dest="pattern", default=None, help="only cases whose name matches (glob or substring)")
    c.add_argument("--mode", action="append", help="limit to these modes (repeatable)")
    c.add_argument("--jobs", type=int, default=2, help="cases run concurrently")
    c.set_defaults(func=_conformance)

    b = sub.add_parser("bench", help="benchmarks: our path against its anchor, in one run")
    b.add_argument("names", nargs="*", help="benchmark names (default: all)")
    b.add_argument("--quick", action="store_true", help="fewer iterations")
    b.add_argument("--json", type=Path, help="write results here")
    b.set_defaults(func=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.command == "serve" else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args))
    except HalError as err:
        print(f"nnhal: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

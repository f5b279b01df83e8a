"""The ``nnhal`` command line (DESIGN §11): serve, info, run, conformance, bench.

The CLI is the one place that may start the server (``serve``) and use the
client in the same program; the library packages never import each other.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from nnhal.core.errors import HalError
from nnhal.server.cache import DEFAULT_SECRET_FILE
from nnhal.server.memory import DEFAULT_SHM_DIR

#: The module that runs each command (its ``run(args) -> int``), imported only when that
#: command runs, so that no command starts by loading the others' dependencies.
COMMANDS = {
    "serve": "nnhal.cli.serve",
    "info": "nnhal.cli.info",
    "run": "nnhal.cli.demo",
    "demo": "nnhal.cli.demo",
    "conformance": "nnhal.cli.conformance",
    "bench": "nnhal.cli.bench",
}


def _run_command(args: argparse.Namespace) -> int:
    run: Callable[[argparse.Namespace], int] = importlib.import_module(COMMANDS[args.command]).run
    return int(run(args))


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

    i = sub.add_parser("info", help="show the device table of a server")
    i.add_argument("address", nargs="?", default="127.0.0.1:50051")

    r = sub.add_parser("run", help="run the demo model through a server")
    r.add_argument("address", nargs="?", default="127.0.0.1:50051")
    r.add_argument("--start", action="store_true", help="start a local server for the run")
    d = sub.add_parser("demo", help="alias of run")
    d.add_argument("address", nargs="?", default="127.0.0.1:50051")
    d.add_argument("--start", action="store_true", help="start a local server for the run")

    c = sub.add_parser("conformance", help="run NNAPI test vectors against a server")
    c.add_argument("paths", nargs="+", type=Path, help="vector files or folders")
    target = c.add_mutually_exclusive_group(required=True)
    target.add_argument("--target", metavar="ADDR", help="address of a running server")
    target.add_argument("--start", action="store_true", help="start a local server for the run")
    c.add_argument("--report", type=Path, help="write a JSON report here")
    c.add_argument("-k", dest="pattern", default=None, help="only cases whose name matches (glob or substring)")
    c.add_argument("--mode", action="append", help="limit to these modes (repeatable)")
    c.add_argument("--jobs", type=int, default=2, help="cases run concurrently")

    b = sub.add_parser("bench", help="benchmarks: our path against its anchor, in one run")
    b.add_argument("names", nargs="*", help="benchmark names (default: all)")
    b.add_argument("--quick", action="store_true", help="fewer iterations")
    b.add_argument("--json", type=Path, help="write results here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose or args.command == "serve" else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return _run_command(args)
    except HalError as err:
        print(f"nnhal: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The ``nnhal`` command line (DESIGN §11): serve, info, run, import, conformance, bench.

The CLI is the one place that may start the server (``serve``) and use the
client in the same program; the library packages never import each other.

Failing well: bad input of any command is one line ``nnhal: error: ...`` on stderr and
exit status 2 (``usage.UsageError``, argparse's errors through ``usage.Parser``, and a
HalError a command lets through); output to a closed pipe (``nnhal info | head -1``)
ends quietly with status 141, as a process ended by SIGPIPE.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nnhal import __version__
from nnhal.cli import config, setting_checks
from nnhal.cli.connect import DEFAULT_TIMEOUT, add_tls_arguments
from nnhal.cli.logs import configure
from nnhal.cli.usage import (
    Parser,
    UsageError,
    client_address,
    for_argparse,
    output_file,
    positive_int,
    report,
    seconds,
)
from nnhal.core import telemetry
from nnhal.core.errors import HalError

#: The module that runs each command (its ``run(args) -> int``), imported only when that
#: command runs, so that no command starts by loading the others' dependencies.
COMMANDS = {
    "serve": "nnhal.cli.serve",
    "info": "nnhal.cli.info",
    "run": "nnhal.cli.model_run",
    "import": "nnhal.cli.model_import",
    "demo": "nnhal.cli.demo",
    "conformance": "nnhal.cli.conformance",
    "report": "nnhal.cli.report",
    "bench": "nnhal.cli.bench",
    "replay": "nnhal.cli.replay",
}

#: 128 + SIGPIPE: what a shell reports for a writer whose reader went away.
EXIT_CLOSED_PIPE = 141

DEFAULT_ADDRESS = "127.0.0.1:50051"


def _run_command(args: argparse.Namespace) -> int:
    run: Callable[[argparse.Namespace], int] = importlib.import_module(COMMANDS[args.command]).run
    return int(run(args))


def _client_arguments(parser: argparse.ArgumentParser, address: bool = True) -> None:
    if address:
        parser.add_argument("address", nargs="?", default=DEFAULT_ADDRESS, type=for_argparse(client_address))
    parser.add_argument(
        "--timeout",
        type=for_argparse(lambda t: seconds(t, 0.1)),
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds to wait for the server to answer (default {DEFAULT_TIMEOUT:g})",
    )
    add_tls_arguments(parser)


def _run_arguments(sub: Any) -> None:
    r = sub.add_parser(
        "run",
        help="run a model (.tflite or .nnhal) through a server; without MODEL, the demo",
        description="ADDR and MODEL are both optional: a lone word naming a model file is the model.",
    )
    r.add_argument("address", nargs="?", default=DEFAULT_ADDRESS, metavar="ADDR", help=f"default {DEFAULT_ADDRESS}")
    r.add_argument("model", nargs="?", metavar="MODEL", help="a .tflite file or a saved .nnhal model")
    r.set_defaults(default_address=DEFAULT_ADDRESS)
    _client_arguments(r, address=False)
    r.add_argument("--start", action="store_true", help="start a local server for the run")
    r.add_argument("--input", type=Path, nargs="+", action="extend", metavar="FILE.npy", help="inputs in model order")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    r.add_argument("--save-outputs", type=Path, metavar="DIR", help="write DIR/<output name>.npy")
    r.add_argument(
        "--device", metavar="SPEC", help="the device to run on (with --start: a spec it hosts, e.g. litert, ort:strict)"
    )
    r.add_argument(
        "--partition",
        metavar="SPECS",
        help="partition across these devices as the NNAPI runtime would, e.g. ort:strict,cpu (cpu: the fallback)",
    )
    r.add_argument("--compare", action="store_true", help="also run LiteRT on the same inputs and compare")
    r.add_argument(
        "--trace",
        type=for_argparse(output_file),
        metavar="FILE",
        help="write the execution's timeline (Chrome/Perfetto trace-event JSON) to FILE",
    )
    r.add_argument("--repeat", type=for_argparse(positive_int), default=5, help="timed runs for --compare (median)")


def _replay_arguments(sub: Any) -> None:
    r = sub.add_parser(
        "replay",
        help="replay a recording (nnhal serve --record) against a server and list the differences",
        description="Exit status 0 iff the replayed answers match the recorded ones.",
    )
    r.add_argument("file", type=Path, metavar="FILE", help="a recording (.nnrec)")
    r.add_argument("address", nargs="?", default=DEFAULT_ADDRESS, metavar="ADDR", type=for_argparse(client_address))
    _client_arguments(r, address=False)
    r.add_argument("--start", action="store_true", help="start a local server for the replay")
    r.add_argument("--device", metavar="NAME", help="replay on this device (with --start: a server of this kind)")
    r.add_argument(
        "--feature-level",
        type=for_argparse(setting_checks.feature_level),
        metavar="LEVEL",
        help="with --start: the level the started server serves (1.0 .. 1.3, 5 .. 8)",
    )
    r.add_argument("--timing", action="store_true", help="also compare recorded and replayed latencies")
    r.add_argument("--partial", action="store_true", help="replay a recording that lacks its end frame")


def _report_arguments(sub: Any) -> None:
    r = sub.add_parser("report", help="work with conformance reports (merge the shards of a run)")
    rsub = r.add_subparsers(dest="report_command", required=True, metavar="ACTION")
    m = rsub.add_parser(
        "merge",
        help="merge the JSON reports of a sharded conformance run: one report, its tables, exit 1 on a failure",
    )
    m.add_argument("reports", nargs="+", type=Path, metavar="REPORT", help="the shards' --report files")
    m.add_argument("--report", type=for_argparse(output_file), help="write the merged JSON report here")
    m.add_argument("--junit", type=for_argparse(output_file), metavar="FILE", help="write it as JUnit XML too")
    m.add_argument(
        "--expect",
        type=for_argparse(positive_int),
        metavar="N",
        help="refuse fewer than N reports (the shard count: a shard without a report fails the merge)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="nnhal", description="The Android NN HAL as a gRPC service.")
    parser.add_argument("--version", action="version", version=f"nnhal {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser(
        "serve",
        help="run a driver hosting its devices (one CPU device by default)",
        description="Settings come from flags, then NNHAL_* environment variables, then --config, then defaults.",
    )
    config.add_arguments(s)

    i = sub.add_parser("info", help="show the device table of a server (every device it hosts)")
    _client_arguments(i)

    _run_arguments(sub)
    d = sub.add_parser("demo", help="run the demo model through a server")
    _client_arguments(d)
    d.add_argument("--start", action="store_true", help="start a local server for the run")

    m = sub.add_parser("import", help="import a .tflite model and save the NNAPI model (.nnhal)")
    m.add_argument("model", type=Path, help="the .tflite file")
    m.add_argument("-o", "--output", type=for_argparse(output_file), required=True, help="the .nnhal file to write")

    c = sub.add_parser("conformance", help="run NNAPI test vectors against a server")
    c.add_argument("paths", nargs="+", type=Path, help="vector files or folders")
    target = c.add_mutually_exclusive_group(required=True)
    target.add_argument("--target", metavar="ADDR", type=for_argparse(client_address), help="a running server")
    target.add_argument("--start", action="store_true", help="start a local server for the run")
    _client_arguments(c, address=False)
    c.add_argument("--report", type=for_argparse(output_file), help="write a JSON report here")
    c.add_argument("--junit", type=for_argparse(output_file), metavar="FILE", help="also write a JUnit XML report")
    c.add_argument(
        "--shard",
        metavar="I/N",
        help="run shard I of N (0 .. N-1) of the case runs, balanced by expected cost; N alone takes I from "
        "$JOB_COMPLETION_INDEX (a Kubernetes Indexed Job's pod index). `nnhal report merge` joins the reports",
    )
    c.add_argument("-k", dest="pattern", default=None, help="only cases whose name matches (glob or substring)")
    c.add_argument("--mode", action="append", help="limit to these modes (repeatable)")
    c.add_argument("--jobs", type=for_argparse(positive_int), default=2, help="cases run concurrently")
    c.add_argument(
        "--device",
        metavar="NAME",
        help="run on this device of the server (with --start: a server hosting only this kind, cpu or ort)",
    )
    c.add_argument(
        "--partition",
        metavar="NAMES",
        help="sync mode through the client's partitioner over these devices, e.g. ort,cpu (cpu is the fallback; "
        "with --start: a server hosting these kinds)",
    )
    c.add_argument(
        "--feature-level",
        type=for_argparse(setting_checks.feature_level),
        metavar="LEVEL",
        help="with --start: the level the started server serves (1.0 .. 1.3, 5 .. 8; default 8)",
    )

    _replay_arguments(sub)
    _report_arguments(sub)

    b = sub.add_parser("bench", help="benchmarks: our path against its anchor, in one run")
    b.add_argument("names", nargs="*", help="benchmark names (default: all)")
    b.add_argument("--quick", action="store_true", help="fewer iterations")
    b.add_argument("--json", type=for_argparse(output_file), help="write results here")
    return parser


def _quiet_closed_pipe() -> int:
    # Later writes (and the interpreter's final flush) go nowhere instead of raising again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_CLOSED_PIPE


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        configure(logging.INFO if args.verbose or args.command == "serve" else logging.WARNING)
        if args.command != "serve" and telemetry.configure("nnhal-client"):
            with telemetry.span(f"nnhal {args.command}"):  # one trace for the command's calls
                status = _run_command(args)
        else:
            status = _run_command(args)
        sys.stdout.flush()
        return status
    except (UsageError, HalError) as err:
        return report(str(err))
    except BrokenPipeError:
        return _quiet_closed_pipe()
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

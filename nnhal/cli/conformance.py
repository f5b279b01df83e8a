"""``nnhal conformance``: vector bundles against a server, a progress bar, per-operation
and per-mode tables, why results were skipped (a mode the device's level lacks, an
operation it does not support), and as the last line exactly ``N passed, M failed, K skipped``.
``--feature-level`` sets the level of the server ``--start`` starts. ``--shard I/N`` runs one
shard of the case runs (``nnhal.conformance.shards``; ``N`` alone takes I from
``$JOB_COMPLETION_INDEX``), ``--junit FILE`` writes the report as JUnit XML too; each case
runs in its own fault scope (``nnhal.client.faults.fault_scope``), for seeded servers.

Refused before any server starts (UsageError, exit 2): an unknown ``--mode``, a bad ``--shard``, a path that
is neither a vector file nor a folder holding some, a file that is not a vector bundle,
and a ``-k`` pattern that matches no case (a run of nothing must not pass a CI job)."""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nnhal.cli.connect import connect, tls_of
from nnhal.cli.info import placement_line
from nnhal.cli.table import Progress, print_table
from nnhal.cli.usage import UsageError
from nnhal.client.device import Device
from nnhal.client.faults import fault_scope
from nnhal.client.partition import Partitioner
from nnhal.conformance import shards, validation
from nnhal.conformance.junit import write_junit
from nnhal.conformance.partitioned import run_case_partitioned
from nnhal.conformance.runner import ALL_MODES, MODES, Result, run_case
from nnhal.conformance.vectors import TestCase, discover, load_file
from nnhal.core.errors import HalError
from nnhal.server.devices import KINDS, parse_device
from nnhal.testing.local_server import LocalServer

#: Keepalive of the run's connection: thousands of cases on a busy machine must not read a
#: 1 s scheduling stall as a frozen server (a server that exits is still seen at once).
_KEEPALIVE_MS = 20_000
#: Skip reasons listed in the summary (the most frequent first).
_REASONS_SHOWN = 12


@contextlib.contextmanager
def _target(args: argparse.Namespace) -> Iterator[str]:
    if args.start:
        kinds = _partition_specs(args) or ([args.device] if args.device else [])
        for kind in kinds:
            try:
                parse_device(kind)
            except ValueError as err:
                raise UsageError(f"--start with {kind}: give device kinds ({', '.join(KINDS)}): {err}") from None
        level = getattr(args, "feature_level", None)
        flags = [arg for kind in kinds for arg in ("--device", kind)]
        with LocalServer(*flags, *(("--feature-level", level) if level else ())) as srv:
            yield srv.address
    else:
        yield args.target


def _partition_specs(args: argparse.Namespace) -> list[str]:
    return [n.strip() for n in (args.partition or "").split(",") if n.strip()]


def _device_name(spec: str) -> str:
    """The device a spec names (``ort:strict`` is the device ``ort``)."""
    try:
        return parse_device(spec).name
    except ValueError:
        return spec  # a device of a running server, named as it is there


def _partition_names(args: argparse.Namespace) -> list[str]:
    return [_device_name(n) for n in _partition_specs(args)]


@contextlib.contextmanager
def _partitioner(args: argparse.Namespace, address: str) -> Iterator[Partitioner]:
    """The partitioner over the ``--partition`` devices; the one named ``cpu`` is the fallback."""
    with contextlib.ExitStack() as stack:
        devices = [
            stack.enter_context(connect(address, "nnhal-conformance", args.timeout, tls_of(args), name))
            for name in _partition_names(args)
        ]
        fallback = next((d for d in devices if d.name == "cpu"), None)
        yield Partitioner(devices, fallback=fallback)


@contextlib.contextmanager
def _device(args: argparse.Namespace) -> Iterator[Device]:
    with (
        _target(args) as address,
        connect(
            address,
            "nnhal-conformance",
            args.timeout,
            tls_of(args),
            _device_name(args.device) if args.device else args.device,
            _KEEPALIVE_MS,
        ) as dev,
    ):
        yield dev


def _main_ops(case: TestCase) -> str:
    ops = sorted({op.name for op in case.operation_types})
    return ops[0] if len(ops) == 1 else "+".join(ops)


def _files(paths: list[Path]) -> list[Path]:
    for p in paths:
        if not p.exists():
            raise UsageError(f"no vector file or folder at {p}; give .json.gz vector files or folders holding them")
    files = discover(paths)
    if not files:
        raise UsageError(f"no vector files (*.json.gz) in {', '.join(map(str, paths))}")
    return files


def _load(path: Path) -> list[TestCase]:
    try:
        return list(load_file(path))
    except (OSError, ValueError, EOFError, KeyError, TypeError) as err:
        raise UsageError(f"{path}: not a readable vector bundle ({type(err).__name__}: {err})") from None


def _shard(args: argparse.Namespace) -> shards.Shard | None:
    text = getattr(args, "shard", None)
    if text is None:
        return None
    try:
        return shards.parse_shard(text, os.environ)
    except ValueError as err:
        raise UsageError(str(err)) from None


def run(args: argparse.Namespace) -> int:
    modes = tuple(args.mode) if args.mode else MODES
    unknown = [m for m in modes if m not in ALL_MODES]
    if unknown:
        raise UsageError(f"unknown --mode {', '.join(unknown)}; choose from {', '.join(ALL_MODES)}")
    if getattr(args, "feature_level", None) and not args.start:
        raise UsageError("--feature-level sets the level of the server --start starts; a --target serves its own")
    shard = _shard(args)
    files = _files(args.paths)
    pattern = args.pattern
    if pattern and not any(c in pattern for c in "*?["):
        pattern = f"*{pattern}*"
    cases: list[TestCase] = []
    total = 0
    for f in files:
        loaded = _load(f)
        total += len(loaded)
        cases.extend(c for c in loaded if not pattern or fnmatch.fnmatch(c.name, pattern))
    if not cases:
        raise UsageError(
            f"-k {args.pattern!r} matches none of the {total} cases in {len(files)} file(s); check the name "
            "(a substring, or a glob with * ? [])"
        )
    if shard is not None:
        cases = shards.select(cases, shard, modes)
    report: dict[str, dict[str, str]] = {}
    counts: Counter[str] = Counter()
    per_op: dict[str, Counter[str]] = defaultdict(Counter)
    per_mode: dict[str, Counter[str]] = defaultdict(Counter)
    lock = threading.Lock()
    progress = Progress(len(cases), "conformance")
    start = time.monotonic()
    ran_on: Counter[str] = Counter()
    partitioned = bool(_partition_names(args))
    with _device(args) as dev, _partitioner(args, dev.address) if partitioned else contextlib.nullcontext() as part:

        def one(case: TestCase) -> None:
            try:
                # A server with --fault-seed decides the case's faults by this scope alone.
                with fault_scope(shards.scope_label(case, modes)):
                    if part is not None:
                        results = {"sync": run_case_partitioned(part, case, ran_on)}
                    else:
                        results = run_case(dev, case, modes)
            except Exception as err:  # a runner bug must not hide the other cases
                results = {"sync": Result("failed", f"runner error: {err!r}")}
            with lock:
                failed = False
                for mode, res in results.items():
                    report[f"{case.name}/{mode}"] = {"status": res.status, "detail": res.detail}
                    counts[res.status] += 1
                    per_op[_main_ops(case)][res.status] += 1
                    per_mode[mode][res.status] += 1
                    failed |= res.status == "failed"
                progress.step(failed)

        # Ctrl-C sets a flag instead of raising: a KeyboardInterrupt raised inside a lock's wait
        # can leave that lock broken and turn the exit into a traceback.
        interrupted = threading.Event()
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, lambda _signum, _frame: interrupted.set()) if main else None
        pool = ThreadPoolExecutor(max(1, args.jobs))
        try:
            pending = [pool.submit(one, case) for case in cases]
            while not interrupted.wait(0.2):
                if all(fut.done() for fut in pending):
                    break
            if interrupted.is_set():
                # Cases not started are dropped; the ones running end within their own timeouts.
                pool.shutdown(wait=True, cancel_futures=True)
                with lock:
                    finished = len({name.rsplit("/", 1)[0] for name in report})
                    sys.stderr.write(
                        f"nnhal: interrupted after {finished} of {len(cases)} cases: {counts['passed']} passed, "
                        f"{counts['failed']} failed, {counts['skipped']} skipped\n"
                    )
                return 130
            for fut in pending:
                fut.result()  # a bug outside the case's own guard is not swallowed
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            if main:
                signal.signal(signal.SIGINT, previous)
        try:
            placed = placement_line(dev.stats())
        except HalError:  # a server without getStats counts for this client
            placed = ""
    elapsed = time.monotonic() - start
    rows = [
        [op, c["passed"], c["failed"], c["skipped"]]
        for op, c in sorted(per_op.items(), key=lambda kv: (-kv[1]["failed"], kv[0]))
    ]
    print_table(["operation(s)", "passed", "failed", "skipped"], rows)
    print()
    print_table(
        ["mode", "passed", "failed", "skipped"],
        [[m, c["passed"], c["failed"], c["skipped"]] for m, c in sorted(per_mode.items())],
    )
    reasons = Counter(v["detail"] for v in report.values() if v["status"] == "skipped")
    if reasons:
        print()
        top = reasons.most_common(_REASONS_SHOWN)
        rest = sum(reasons.values()) - sum(n for _, n in top)
        print_table(["skipped because", "results"], [*top, *([["(other reasons)", rest]] if rest else [])])
    mutations = validation.COUNTS.snapshot()
    if mutations:
        print()
        rows = [[family, n] for family, n in sorted(mutations.items())]
        print_table(["validation family", "mutations"], [*rows, ["total", sum(mutations.values())]])
    failures = [(k, v["detail"]) for k, v in sorted(report.items()) if v["status"] == "failed"]
    if failures:
        print(f"\nfirst failures (of {len(failures)}):")
        for name, detail in failures[:20]:
            print(f"  {name}: {detail}")
    if partitioned:
        print("\noperations run per device (passed cases): " + ", ".join(f"{k} {v}" for k, v in sorted(ran_on.items())))
    if placed:
        print(f"\noperations placed on {dev.name} (every preparation): {placed}")
    where = f" (shard {shard})" if shard is not None else ""
    print(f"\n{len(cases)} cases from {len(files)} files in {elapsed:.1f} s{where}")
    if args.report:
        args.report.write_text(json.dumps(report, indent=1, sort_keys=True))
    if getattr(args, "junit", None):
        props = {"paths": " ".join(map(str, args.paths)), "modes": ",".join(modes)}
        write_junit(
            args.junit, report, seconds=elapsed, properties=props | ({"shard": str(shard)} if shard is not None else {})
        )
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0

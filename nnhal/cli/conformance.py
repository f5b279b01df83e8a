"""``nnhal conformance``: vector bundles against a server, a progress bar, per-operation
and per-mode tables, and as the last line exactly ``N passed, M failed, K skipped``."""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from nnhal.cli.table import Progress, print_table
from nnhal.client.device import Device
from nnhal.conformance.runner import MODES, Result, run_case
from nnhal.conformance.vectors import TestCase, discover, load_file
from nnhal.testing.local_server import LocalServer


@contextlib.contextmanager
def _target(args: argparse.Namespace) -> Iterator[str]:
    if args.start:
        with LocalServer() as srv:
            yield srv.address
    else:
        yield args.target


def _main_ops(case: TestCase) -> str:
    ops = sorted({op.name for op in case.operation_types})
    return ops[0] if len(ops) == 1 else "+".join(ops)


def run(args: argparse.Namespace) -> int:
    files = discover(args.paths)
    pattern = args.pattern
    if pattern and not any(c in pattern for c in "*?["):
        pattern = f"*{pattern}*"
    modes = tuple(args.mode) if args.mode else MODES
    unknown = set(modes) - set(MODES)
    if unknown:
        print(f"nnhal conformance: unknown mode(s) {sorted(unknown)}; choose from {', '.join(MODES)}", file=sys.stderr)
        return 2
    cases: list[TestCase] = []
    for f in files:
        cases.extend(c for c in load_file(f) if not pattern or fnmatch.fnmatch(c.name, pattern))
    report: dict[str, dict[str, str]] = {}
    counts: Counter[str] = Counter()
    per_op: dict[str, Counter[str]] = defaultdict(Counter)
    per_mode: dict[str, Counter[str]] = defaultdict(Counter)
    lock = threading.Lock()
    progress = Progress(len(cases), "conformance")
    start = time.monotonic()
    with _target(args) as address, Device.connect(address, client_name="nnhal-conformance") as dev:

        def one(case: TestCase) -> None:
            try:
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

        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            list(pool.map(one, cases))
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
    failures = [(k, v["detail"]) for k, v in sorted(report.items()) if v["status"] == "failed"]
    if failures:
        print(f"\nfirst failures (of {len(failures)}):")
        for name, detail in failures[:20]:
            print(f"  {name}: {detail}")
    print(f"\n{len(cases)} cases from {len(files)} files in {elapsed:.1f} s")
    if args.report:
        args.report.write_text(json.dumps(report, indent=1, sort_keys=True))
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0

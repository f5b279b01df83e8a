"""``nnhal report merge REPORT…``: the JSON reports of a sharded conformance run as one.

Prints a table per report (its case runs by status), a table per mode, the first failures,
and as the last line exactly ``N passed, M failed, K skipped``, like ``nnhal conformance``;
exit status 0 iff M is 0. ``--report`` / ``--junit`` write the merged report as JSON / JUnit
XML. ``--expect N`` refuses fewer than N reports (a shard that wrote none must fail the
matrix, not shrink it).

Refused (UsageError, exit 2): a missing or unreadable report, one that is not a
conformance report, reports that are not disjoint, fewer reports than ``--expect``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter, defaultdict
from pathlib import Path

from nnhal.cli.table import print_table
from nnhal.cli.usage import UsageError
from nnhal.conformance.junit import split_key, write_junit
from nnhal.conformance.merge import Report, ReportError, counts, load_report, merge

#: Failures listed under the tables (the rest are in the report).
_FAILURES_SHOWN = 20


def _merge(args: argparse.Namespace) -> int:
    paths: list[Path] = args.reports
    if args.expect is not None and len(paths) < args.expect:
        raise UsageError(f"{len(paths)} report(s) given, --expect {args.expect}: a shard wrote no report")
    start = time.monotonic()
    try:
        loaded = [(p, load_report(p)) for p in paths]
        merged = merge(loaded)
    except ReportError as err:
        raise UsageError(str(err)) from None
    print_table(
        ["report", "runs", "passed", "failed", "skipped"],
        [[str(p), len(r), *(counts(r)[s] for s in ("passed", "failed", "skipped"))] for p, r in loaded],
    )
    print()
    per_mode: dict[str, Counter[str]] = defaultdict(Counter)
    for key, entry in merged.items():
        per_mode[split_key(key)[1]][entry["status"]] += 1
    print_table(
        ["mode", "passed", "failed", "skipped"],
        [[m, c["passed"], c["failed"], c["skipped"]] for m, c in sorted(per_mode.items())],
    )
    _print_failures(merged)
    if args.report:
        args.report.write_text(json.dumps(merged, indent=1, sort_keys=True))
    if args.junit:
        write_junit(
            args.junit,
            merged,
            seconds=time.monotonic() - start,
            properties={"reports": " ".join(map(str, paths))},
        )
    total = counts(merged)
    print(f"\n{len(merged)} case runs from {len(paths)} report(s)")
    print(f"{total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
    return 1 if total["failed"] else 0


def _print_failures(report: Report) -> None:
    failures = [(k, v["detail"]) for k, v in report.items() if v["status"] == "failed"]
    if failures:
        print(f"\nfirst failures (of {len(failures)}):")
        for name, detail in failures[:_FAILURES_SHOWN]:
            print(f"  {name}: {detail}")


def run(args: argparse.Namespace) -> int:
    if args.report_command == "merge":
        return _merge(args)
    raise UsageError(f"unknown report command {args.report_command!r}")

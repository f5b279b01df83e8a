"""``nnhal bench [NAME...] [--quick] [--json FILE]``: run benchmarks with a progress bar,
print the table, write the JSON (DESIGN §11). Exit status 2 for an unknown name."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from nnhal.bench.common import BenchResult
from nnhal.bench.registry import benchmarks
from nnhal.cli.table import Progress, print_table
from nnhal.cli.usage import UsageError


def run(args: argparse.Namespace) -> int:
    registry = benchmarks()
    names = args.names or sorted(registry)
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise UsageError(f"unknown benchmark(s) {', '.join(unknown)}; available: {', '.join(sorted(registry))}")
    results: dict[str, BenchResult] = {}
    progress = Progress(len(names), "bench")
    for name in names:
        results.update(registry[name](args.quick))
        progress.step()
    print_table(
        ["benchmark", "ours", "anchor", "ratio", "unit", "goal", "detail"],
        [
            [n, f"{r.value:.3g}", f"{r.anchor:.3g}", f"{r.ratio:.2f}", r.unit, r.goal, r.detail]
            for n, r in results.items()
        ],
    )
    if args.json:
        args.json.write_text(json.dumps({n: asdict(r) for n, r in results.items()}, indent=1))
    return 0

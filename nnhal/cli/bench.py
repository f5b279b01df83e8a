"""``nnhal bench``: run benchmarks, print the table, write the JSON (DESIGN §11)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from nnhal.bench.suite import REGISTRY, BenchResult
from nnhal.cli.table import Progress, print_table


def run_cli(args: argparse.Namespace) -> int:
    names = args.names or sorted(REGISTRY)
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        print(f"nnhal bench: unknown benchmark(s) {unknown}; available: {', '.join(sorted(REGISTRY))}", file=sys.stderr)
        return 2
    results: dict[str, BenchResult] = {}
    progress = Progress(len(names), "bench")
    for name in names:
        results.update(REGISTRY[name](args.quick))
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

"""Run conformance vectors in-process against the executor (no gRPC).

For kernel development and the fast unit suite::

    python -m nnhal.server.executor.selftest conformance/vectors -k conv2d [-v]

Modes: ``normal`` (outputs as the vector declares them) and ``dynamic`` (the
outputs' dims all zero, resolved at execution). ``expect_failure`` cases pass
when validation, preparation or execution fails.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import nnhal.server.executor.ops  # noqa: F401  (registers every operation)
from nnhal.conformance.compare import compare_case
from nnhal.conformance.vectors import TestCase, input_array, iter_cases, with_unspecified_outputs
from nnhal.core.errors import HalError
from nnhal.core.types import InlinePool
from nnhal.server.executor.graph import ExecutionControl, PreparedGraph
from nnhal.server.executor.registry import registered
from nnhal.server.executor.validate import validate_full


@dataclass
class Outcome:
    status: str  # passed | failed | skipped
    detail: str = ""


def run_case(case: TestCase, mode: str = "normal", loop_timeout_ns: int | None = None) -> Outcome:
    missing = [op.name for op in case.operation_types if op not in registered()]
    if missing:
        return Outcome("skipped", f"operation not implemented: {', '.join(sorted(missing))}")
    if mode == "dynamic":
        if case.expect_failure or case.has_control_flow_or_rank:
            return Outcome("skipped", "not eligible for the dynamic-output-shape mode")
        case = with_unspecified_outputs(case)
    pools = [p.data for p in case.model.pools if isinstance(p, InlinePool)]
    try:
        validate_full(case.model, pools)
        graph = PreparedGraph(case.model, pools)
        inputs = [input_array(case, k) for k in range(len(case.inputs))]
        control = ExecutionControl()
        if loop_timeout_ns is not None:
            control.loop_timeout_ns = loop_timeout_ns
        outputs = graph.run(inputs, control)
    except HalError as err:
        if case.expect_failure:
            return Outcome("passed", f"failed as expected: {err}")
        return Outcome("failed", str(err))
    except Exception as err:  # a kernel bug: report it with its origin
        if case.expect_failure:
            return Outcome("failed", f"crashed instead of a HAL error: {err!r}")
        tb = traceback.extract_tb(err.__traceback__)[-1]
        return Outcome("failed", f"{type(err).__name__}: {err} at {Path(tb.filename).name}:{tb.lineno}")
    if case.expect_failure:
        return Outcome("failed", "expected a failure, execution succeeded")
    for k, (exp, out) in enumerate(zip(case.outputs, outputs)):
        if tuple(out.shape) != exp.dimensions:
            return Outcome("failed", f"output {k} has shape {list(out.shape)}, expected {list(exp.dimensions)}")
    actual = [np.ascontiguousarray(o).tobytes() for o in outputs]
    mismatch = compare_case(case, list(case.inputs), actual)
    return Outcome("failed", mismatch) if mismatch else Outcome("passed")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("-k", dest="pattern", default="*", help="glob on case names (substring if no wildcard)")
    parser.add_argument("-m", "--mode", action="append", choices=["normal", "dynamic"], default=None)
    parser.add_argument("-v", "--verbose", action="store_true", help="print every failure")
    args = parser.parse_args(argv)
    pattern = args.pattern if any(c in args.pattern for c in "*?[") else f"*{args.pattern}*"
    modes = args.mode or ["normal", "dynamic"]
    counts: Counter[str] = Counter()
    per_op: dict[str, Counter[str]] = {}
    for case in iter_cases(args.paths):
        if not fnmatch.fnmatch(case.name, pattern):
            continue
        for mode in modes:
            out = run_case(case, mode, 1_000_000 if "infinite" in case.name else None)
            counts[out.status] += 1
            key = ",".join(sorted(op.name for op in case.operation_types))
            per_op.setdefault(key, Counter())[out.status] += 1
            if out.status == "failed" and args.verbose:
                print(f"FAIL {case.name}/{mode}: {out.detail}")
    for key, c in sorted(per_op.items()):
        if c["failed"]:
            print(f"{key:60s} passed {c['passed']:5d} failed {c['failed']:5d} skipped {c['skipped']:5d}")
    print(f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""The long fuzz campaign behind ``make fuzz``: ``python -m tests.fuzz.campaign``.

Runs the harness's mutations over every conformance seed until
NNHAL_FUZZ_EXAMPLES examples (default 100000) or NNHAL_FUZZ_SECONDS seconds
(default 600) are spent, in rounds of fresh random examples. Every exception
other than a proper HalError is a crash; an example that takes longer than
10 s is a hang. Prints the count of models tried, their outcomes, crashes
(grouped by where they were raised, with one example each), hangs and peak
RSS; exits 1 when there was a crash or a hang.
"""

from __future__ import annotations

import os
import resource
import sys
import time
import traceback
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis.errors import HypothesisException

from tests.fuzz.harness import Case, examples_from_env, exercise, mutated, seeds

HANG_SECONDS = 10.0
ROUND = 500


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    total = examples_from_env(100_000)
    budget = float(os.environ.get("NNHAL_FUZZ_SECONDS", "600"))
    cases = seeds(1)
    print(f"fuzz: {len(cases)} seed models, up to {total} examples or {budget:g} s", flush=True)
    outcomes: Counter[str] = Counter()
    crashes: dict[str, tuple[int, str]] = {}
    hangs: list[str] = []
    slowest = 0.0
    #: Examples that raised the peak RSS by more than 32 MiB: what the memory limit missed.
    jumps: list[str] = []
    start = time.monotonic()
    tried = 0

    def body(example: tuple[Case, list[bytearray]]) -> None:
        nonlocal tried, slowest
        case, pools = example
        tried += 1
        t0 = time.monotonic()
        rss0 = _peak_mib()
        outcome = "crash"
        try:
            outcome = exercise(case, pools)
            outcomes[outcome] += 1
        except Exception as err:
            frame = traceback.extract_tb(err.__traceback__)[-1]
            key = f"{type(err).__name__} at {frame.filename}:{frame.lineno}"
            count, first = crashes.get(key, (0, ""))
            crashes[key] = (count + 1, first or f"{case.name}: {err!r}"[:500])
            outcomes["crash"] += 1
        elapsed = time.monotonic() - t0
        if _peak_mib() - rss0 > 32:
            ops = sorted({op.type.name for op in case.model.main.operations})
            jumps.append(f"{case.name} ({', '.join(ops)}): +{_peak_mib() - rss0:.0f} MiB, {outcome}")
        slowest = max(slowest, elapsed)
        if elapsed > HANG_SECONDS:
            hangs.append(f"{case.name}: {elapsed:.1f} s")

    rounds = 0
    while tried < total and time.monotonic() - start < budget:
        rounds += 1
        run: Any = settings(
            max_examples=min(ROUND, total - tried),
            deadline=None,
            database=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
        )(given(mutated(cases))(body))
        try:
            run()
        except HypothesisException as err:  # e.g. a round that could not generate enough
            print(f"fuzz: round {rounds}: {err!r}", flush=True)
        if rounds % 10 == 0:
            print(f"fuzz: {tried} examples, {time.monotonic() - start:.0f} s, {dict(outcomes)}", flush=True)

    peak_mib = _peak_mib()
    print(f"fuzz: models and requests tried: {tried} in {time.monotonic() - start:.0f} s")
    print(f"fuzz: outcomes: {dict(outcomes)}")
    print(f"fuzz: crashes: {sum(c for c, _ in crashes.values())} ({len(crashes)} distinct)")
    for key, (count, first) in sorted(crashes.items(), key=lambda kv: -kv[1][0]):
        print(f"  {count:6d}  {key}\n          {first}")
    print(f"fuzz: hangs (> {HANG_SECONDS:g} s): {len(hangs)}; slowest example {slowest:.2f} s")
    for h in hangs[:20]:
        print(f"  {h}")
    print(f"fuzz: peak RSS {peak_mib:.0f} MiB; examples that raised it by > 32 MiB: {len(jumps)}")
    for j in jumps[:20]:
        print(f"  {j}")
    return 1 if crashes or hangs else 0


if __name__ == "__main__":
    sys.exit(main())

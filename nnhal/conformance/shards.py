"""Split a conformance run into N shards (``nnhal conformance … --shard I/N``).

A shard is a set of *cases*; each case's runs (one per mode, or its single ``level`` /
expected-failure run) stay together in the shard of their case, because the modes of
a case share one preparation and the runner decides at run time which of them apply.
So shards are disjoint in case runs and together hold every run of the whole set.

The split depends only on the case list (the vector paths and ``-k``, in the order they
load) and the modes asked for — never on the server, the clock or ``--jobs`` — so every
shard of a matrix computes the same assignment on its own. It balances the expected
cost (:func:`expected_cost`): the longest-processing-time rule, each case in decreasing
cost (name, then position, breaking ties) to the shard with the least cost so far (the
lowest index breaking ties). Costs are integers, so the arithmetic is exact everywhere.

``--shard N`` alone takes I from :data:`INDEX_VARIABLE`, which a Kubernetes Indexed Job
sets in each of its pods (0 .. completions-1).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nnhal.conformance.vectors import TestCase
from nnhal.core.types import InlinePool

#: The variable naming this pod's index in a Kubernetes Indexed Job (``--shard N`` reads it).
INDEX_VARIABLE = "JOB_COMPLETION_INDEX"
#: Expected cost of one mode's run besides its data, in bytes' worth of data: on the
#: reference CPU device a case's few round trips (support query, prepare, execute) take
#: about as long as moving and computing over some tens of KiB of tensors.
_RUN_COST = 32_768
#: Expected cost per operation and per operand (validation, graph walks), in bytes' worth.
_NODE_COST = 1024
_SHARD = re.compile(r"(\d+)(?:/(\d+))?")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0 <= index < count)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str, environ: Mapping[str, str]) -> Shard:
    """``I/N``, or ``N`` with I from :data:`INDEX_VARIABLE` in ``environ``; ValueError
    (one line, saying what is wrong) otherwise."""
    m = _SHARD.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"--shard {text!r}: give I/N (shard I of N, I from 0 to N-1) or N (I from ${INDEX_VARIABLE})")
    if m[2] is None:
        count = int(m[1])
        raw = environ.get(INDEX_VARIABLE)
        if raw is None:
            raise ValueError(f"--shard {text}: names only N, and ${INDEX_VARIABLE} is not set; give I/N")
        if not raw.strip().isdigit():
            raise ValueError(f"${INDEX_VARIABLE}={raw!r} is not a shard index (0 .. N-1)")
        index = int(raw)
    else:
        index, count = int(m[1]), int(m[2])
    if count < 1:
        raise ValueError(f"--shard {text}: N must be at least 1")
    if index >= count:
        raise ValueError(f"--shard {text}: shard index {index} is not below the shard count {count} (0 .. {count - 1})")
    return Shard(index, count)


def expected_cost(case: TestCase, modes: Sequence[str]) -> int:
    """The expected cost of ``case``'s runs in ``modes``: per run a fixed part, its data
    (constants, inputs, expected outputs) and its graph's size. An expected-failure case
    runs once whatever the modes."""
    model = case.model
    graphs = (model.main, *model.referenced)
    data = len(model.operand_values) + sum(len(p.data) for p in model.pools if isinstance(p, InlinePool))
    data += sum(len(x or b"") for x in case.inputs) + sum(len(o.data) for o in case.outputs)
    nodes = sum(len(g.operations) + len(g.operands) for g in graphs)
    runs = 1 if case.expect_failure else max(1, len(modes))
    return runs * (_RUN_COST + data + _NODE_COST * nodes)


def assign(cases: Sequence[TestCase], count: int, modes: Sequence[str]) -> list[int]:
    """The shard of each of ``cases`` (module docstring: longest processing time first)."""
    if count < 1:
        raise ValueError("the shard count must be at least 1")
    costs = [expected_cost(c, modes) for c in cases]
    order = sorted(range(len(cases)), key=lambda i: (-costs[i], cases[i].name, i))
    loads = [(0, k) for k in range(count)]  # a heap of (cost so far, shard)
    shard_of = [0] * len(cases)
    for i in order:
        load, k = heapq.heappop(loads)
        shard_of[i] = k
        heapq.heappush(loads, (load + costs[i], k))
    return shard_of


def scope_label(case: TestCase, modes: Sequence[str]) -> str:
    """The fault scope of ``case``'s runs in ``modes`` (``nnhal.client.faults.fault_scope``):
    ``<case name>/<modes joined by +>``. The runner runs a case's modes one after another
    on one thread, so a seeded server's decisions for the case depend on the seed, the
    case, the modes and each call's ordinal — not on the shard or ``--jobs``."""
    return f"{case.name}/{'+'.join(modes)}"


def select(cases: Sequence[TestCase], shard: Shard, modes: Sequence[str]) -> list[TestCase]:
    """The cases of ``shard``, in their original order."""
    shard_of = assign(cases, shard.count, modes)
    return [c for c, k in zip(cases, shard_of, strict=True) if k == shard.index]

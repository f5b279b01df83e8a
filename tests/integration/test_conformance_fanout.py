"""A conformance matrix fanned out on one machine, as an Indexed Job runs it on many: N shard
processes (``--shard I/N``), each against its own server, at once; ``nnhal report merge``
of their reports equals the report of the single run, and each shard's JUnit XML reads
back (junitparser) with one testcase per case run of that shard.

A small vector folder (a few bundles of the public V1_0 set, ~30 cases in two modes) keeps
it to seconds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import junitparser
import pytest

from nnhal.testing.local_server import LocalServer

ROOT = Path(__file__).resolve().parents[2]
V1_0 = ROOT / "conformance" / "vectors" / "V1_0"
SHARDS = 3
#: Bundles with expected outputs of a few kinds of operation (float, quant8, several cases each).
BUNDLES = (
    "add.json.gz",
    "add_quant8.json.gz",
    "avg_pool_float_1.json.gz",
    "conv_float.json.gz",
    "relu_float_2.json.gz",
)
MODES = ("--mode", "sync", "--mode", "async")

pytestmark = pytest.mark.integration


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("NNHAL_") and k != "JOB_COMPLETION_INDEX"}


def _nnhal(*argv: str) -> list[str]:
    return [sys.executable, "-m", "nnhal", *argv]


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:  # the test failed before it ended: leave no process behind
        proc.kill()
        proc.wait(timeout=30)


@pytest.mark.timeout(240)  # seven processes on a small machine
def test_shards_against_their_own_servers_merge_to_the_single_run(tmp_path: Path) -> None:
    vectors = tmp_path / "vectors"
    vectors.mkdir()
    for name in BUNDLES:
        shutil.copy(V1_0 / name, vectors / name)
    with ExitStack() as stack:
        servers = [stack.enter_context(LocalServer()) for _ in range(SHARDS)]
        runs: dict[str, tuple[str, ...]] = {
            f"r{i}": ("--target", srv.address, "--shard", f"{i}/{SHARDS}", "--junit", str(tmp_path / f"r{i}.xml"))
            for i, srv in enumerate(servers)
        }
        runs["whole"] = ("--target", servers[0].address)  # at the same time, beside shard 0
        procs = {
            name: subprocess.Popen(
                _nnhal("conformance", str(vectors), *MODES, *args, "--report", str(tmp_path / f"{name}.json")),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_env(),
            )
            for name, args in runs.items()
        }
        for p in procs.values():
            stack.callback(_end, p)
        outs = {name: p.communicate(timeout=90) for name, p in procs.items()}
        for name, p in procs.items():
            assert p.returncode == 0, (name, outs[name][0][-2000:] + outs[name][1][-2000:])
    merged = subprocess.run(
        _nnhal("report", "merge", *(str(tmp_path / f"r{i}.json") for i in range(SHARDS)),
               "--expect", str(SHARDS), "--report", str(tmp_path / "merged.json")),
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert merged.returncode == 0, merged.stdout + merged.stderr
    reports = [json.loads((tmp_path / f"r{i}.json").read_text()) for i in range(SHARDS)]
    single = json.loads((tmp_path / "whole.json").read_text())
    keys = [set(r) for r in reports]
    assert all(k for k in keys), "every shard ran something"
    assert sum(map(len, keys)) == len(set().union(*keys)) == len(single)  # disjoint, whole
    assert json.loads((tmp_path / "merged.json").read_text()) == single
    last = merged.stdout.splitlines()[-1]
    assert last == outs["whole"][0].splitlines()[-1]
    for i, report in enumerate(reports):
        suite = next(iter(junitparser.JUnitXml.fromfile(str(tmp_path / f"r{i}.xml"))))
        assert suite.tests == len(report)
        assert {f"{c.name}/{c.classname.rsplit('.', 1)[1]}" for c in suite} == set(report)
        properties = suite.properties()  # type: ignore[no-untyped-call]  # junitparser leaves it unannotated
        assert {p.name: p.value for p in properties}["shard"] == f"{i}/{SHARDS}"
    sizes = ", ".join(str(len(k)) for k in keys)
    print(f"\nfan-out: {SHARDS} shards ({sizes} case runs) merged: {last}; single run: {len(single)} case runs")

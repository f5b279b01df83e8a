"""Sharded conformance without a server: ``--shard`` parsing, the split (disjoint, whole,
balanced, deterministic), JUnit XML read back by an independent parser (junitparser, as a
CI system reads it), merging reports, and ``nnhal report merge`` on the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import junitparser
import pytest

from nnhal.cli.main import main
from nnhal.conformance import shards
from nnhal.conformance.junit import write_junit
from nnhal.conformance.merge import ReportError, load_report, merge
from nnhal.conformance.shards import Shard, parse_shard
from nnhal.conformance.vectors import TestCase, iter_cases

ROOT = Path(__file__).resolve().parents[1]
V1_0 = ROOT / "conformance" / "vectors" / "V1_0"


@pytest.fixture(scope="module")
def cases() -> list[TestCase]:
    return list(iter_cases([V1_0]))


@pytest.mark.parametrize(
    ("text", "env", "shard"),
    [
        ("0/3", {}, Shard(0, 3)),
        ("2/3", {}, Shard(2, 3)),
        ("0/1", {}, Shard(0, 1)),
        ("4", {"JOB_COMPLETION_INDEX": "3"}, Shard(3, 4)),
    ],
)
def test_parse_shard(text: str, env: dict[str, str], shard: Shard) -> None:
    assert parse_shard(text, env) == shard


@pytest.mark.parametrize(
    ("text", "env", "needle"),
    [
        ("3/3", {}, "not below the shard count 3"),
        ("0/0", {}, "at least 1"),
        ("-1/3", {}, "give I/N"),
        ("a/b", {}, "give I/N"),
        ("1/2/3", {}, "give I/N"),
        ("4", {}, "JOB_COMPLETION_INDEX is not set"),
        ("4", {"JOB_COMPLETION_INDEX": "4"}, "not below the shard count 4"),
        ("4", {"JOB_COMPLETION_INDEX": "x"}, "is not a shard index"),
    ],
)
def test_parse_shard_refuses(text: str, env: dict[str, str], needle: str) -> None:
    with pytest.raises(ValueError, match=needle.replace("$", r"\$")):
        parse_shard(text, env)


@pytest.mark.parametrize("count", [1, 2, 3, 5, 7])
def test_shards_are_disjoint_and_together_the_whole_run(cases: list[TestCase], count: int) -> None:
    modes = ("sync",)
    picked = [shards.select(cases, Shard(i, count), modes) for i in range(count)]
    names = [[c.name for c in p] for p in picked]
    flat = [n for p in names for n in p]
    assert len(flat) == len(set(flat)) == len(cases)
    assert sorted(flat) == sorted(c.name for c in cases)
    # Each shard keeps the run's order.
    order = {c.name: i for i, c in enumerate(cases)}
    assert all(p == sorted(p, key=order.__getitem__) for p in names)


def test_shards_are_balanced_by_expected_cost(cases: list[TestCase]) -> None:
    modes = ("sync", "async")
    costs = [shards.expected_cost(c, modes) for c in cases]
    for count in (2, 3, 8):
        loads = [0] * count
        for cost, k in zip(costs, shards.assign(cases, count, modes), strict=True):
            loads[k] += cost
        # Longest processing time first: no shard is more than one case above another.
        assert max(loads) - min(loads) <= max(costs), (count, loads)


def test_the_split_depends_only_on_the_cases_and_modes(cases: list[TestCase]) -> None:
    first = shards.assign(cases, 3, ("sync",))
    assert shards.assign(list(cases), 3, ("sync",)) == first
    # More shards than cases: the rest are empty, still disjoint and whole.
    few = cases[:2]
    assert sorted(shards.assign(few, 5, ("sync",))) == [0, 1]


def test_an_expected_failure_case_costs_one_run(cases: list[TestCase]) -> None:
    case = cases[0]
    failing = type(case)(**{**case.__dict__, "expect_failure": True})
    assert shards.expected_cost(failing, ("sync", "async", "burst")) == shards.expected_cost(case, ("sync",))


REPORT = {
    "add/sync": {"status": "passed", "detail": ""},
    "add/async": {"status": "failed", "detail": "output 0 differs\nat [0, 1]: 1.5 vs 2.0 \x01"},
    "conv/sync": {"status": "skipped", "detail": "CONV_2D: not supported"},
    "nested/name/level": {"status": "passed", "detail": "expected rejection"},
}


def test_junit_is_read_by_a_junit_parser(tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    write_junit(path, REPORT, seconds=1.25, properties={"shard": "1/3"})
    xml = junitparser.JUnitXml.fromfile(str(path))
    suites = list(xml) if isinstance(xml, junitparser.JUnitXml) else [xml]
    assert len(suites) == 1
    suite = suites[0]
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (4, 1, 0, 1)
    assert suite.time == pytest.approx(1.25)
    properties = suite.properties()  # type: ignore[no-untyped-call]  # junitparser leaves it unannotated
    assert {p.name: p.value for p in properties} == {"shard": "1/3"}
    by_name = {(c.classname, c.name): c for c in suite}
    assert set(by_name) == {
        ("nnhal.conformance.sync", "add"),
        ("nnhal.conformance.async", "add"),
        ("nnhal.conformance.sync", "conv"),
        ("nnhal.conformance.level", "nested/name"),
    }
    failed = by_name[("nnhal.conformance.async", "add")]
    (failure,) = failed.result
    assert isinstance(failure, junitparser.Failure)
    assert failure.message == "output 0 differs"
    assert failure.text == "output 0 differs\nat [0, 1]: 1.5 vs 2.0 "  # a control character dropped
    (skipped,) = by_name[("nnhal.conformance.sync", "conv")].result
    assert isinstance(skipped, junitparser.Skipped) and skipped.message == "CONV_2D: not supported"
    assert by_name[("nnhal.conformance.sync", "add")].is_passed


def test_merge_joins_disjoint_reports_and_refuses_overlaps(tmp_path: Path) -> None:
    a = {k: v for k, v in REPORT.items() if k.startswith("add")}
    b = {k: v for k, v in REPORT.items() if not k.startswith("add")}
    assert merge([(Path("a"), a), (Path("b"), b)]) == dict(sorted(REPORT.items()))
    with pytest.raises(ReportError, match="'add/sync' is in both a and c"):
        merge([(Path("a"), a), (Path("c"), {"add/sync": REPORT["add/sync"]})])
    bad = tmp_path / "bad.json"
    for text, needle in [
        ("{", "not a readable JSON report"),
        ("[]", "not a conformance report"),
        ('{"x": {"status": "passed"}}', "is not a case run"),
        ('{"a/sync": {"status": "fine"}}', "is not a case run"),
    ]:
        bad.write_text(text)
        with pytest.raises(ReportError, match=needle):
            load_report(bad)
    with pytest.raises(ReportError, match="no such report"):
        load_report(tmp_path / "missing.json")


def _nnhal(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k != "JOB_COMPLETION_INDEX"}
    return subprocess.run(
        [sys.executable, "-m", "nnhal", *argv], capture_output=True, text=True, timeout=60, env=clean | (env or {})
    )


def test_report_merge_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, out, xml = (tmp_path / n for n in ("a.json", "b.json", "out.json", "out.xml"))
    a.write_text(json.dumps({k: v for k, v in REPORT.items() if k.startswith("add")}))
    b.write_text(json.dumps({k: v for k, v in REPORT.items() if not k.startswith("add")}))
    assert main(["report", "merge", str(a), str(b), "--report", str(out), "--junit", str(xml), "--expect", "2"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "2 passed, 1 failed, 1 skipped"
    assert json.loads(out.read_text()) == dict(sorted(REPORT.items()))
    assert junitparser.JUnitXml.fromfile(str(xml)).failures == 1
    b.write_text(json.dumps({"conv/sync": REPORT["conv/sync"]}))
    assert main(["report", "merge", str(b)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "0 passed, 0 failed, 1 skipped"


@pytest.mark.parametrize(
    ("argv", "env", "needle"),
    [
        (["report", "merge", "missing.json"], {}, "missing.json: no such report"),
        (["report", "merge", "{a}", "{a}"], {}, "is in both"),
        (["report", "merge", "{a}", "--expect", "2"], {}, "1 report(s) given, --expect 2"),
        (["report"], {}, "required"),
        (["conformance", str(V1_0), "--start", "--shard", "3/3"], {}, "not below the shard count"),
        (["conformance", str(V1_0), "--start", "--shard", "3"], {}, "JOB_COMPLETION_INDEX is not set"),
        (["conformance", str(V1_0), "--start", "--shard", "3"], {"JOB_COMPLETION_INDEX": "7"}, "not below"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(
    tmp_path: Path, argv: list[str], env: dict[str, str], needle: str
) -> None:
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"add/sync": REPORT["add/sync"]}))
    done = _nnhal(*(arg.replace("{a}", str(a)) for arg in argv), env=env)
    lines = done.stderr.splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("nnhal: error: ") and needle in lines[0], done.stderr

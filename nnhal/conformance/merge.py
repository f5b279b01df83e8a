"""Merge the JSON reports of a sharded run (``nnhal report merge REPORT…``).

A report is ``{"<case name>/<mode>": {"status": "passed"|"failed"|"skipped", "detail":
"<why>"}}`` (DESIGN §11). Shards are disjoint, so a case run found in two reports means
the reports are not shards of one run (or one was given twice): :class:`ReportError`,
naming the run and both files, rather than a merge that silently keeps one of them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

STATUSES = ("passed", "failed", "skipped")

Report = dict[str, dict[str, str]]


class ReportError(ValueError):
    """A report that cannot be read or merged; the message is one line naming the file."""


def load_report(path: Path) -> Report:
    """The report in ``path``, its shape checked (ReportError saying what is wrong)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ReportError(f"{path}: no such report") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReportError(f"{path}: not a readable JSON report ({type(err).__name__}: {err})") from None
    if not isinstance(doc, dict):
        raise ReportError(f"{path}: not a conformance report (a JSON object of case runs)")
    for key, entry in doc.items():
        if (
            "/" not in key
            or not isinstance(entry, dict)
            or entry.get("status") not in STATUSES
            or not isinstance(entry.get("detail", ""), str)
        ):
            raise ReportError(
                f"{path}: entry {key!r} is not a case run (a '<case>/<mode>' key with a status of "
                f"{', '.join(STATUSES)} and a detail)"
            )
    return {key: {"status": e["status"], "detail": e.get("detail", "")} for key, e in doc.items()}


def merge(reports: Sequence[tuple[Path, Report]]) -> Report:
    """The union of disjoint ``reports`` (with the files they came from, for errors)."""
    merged: Report = {}
    source: dict[str, Path] = {}
    for path, report in reports:
        for key, entry in report.items():
            if key in merged:
                raise ReportError(
                    f"{key!r} is in both {source[key]} and {path}: shards of one run are disjoint "
                    "(a report given twice, or reports of different runs)"
                )
            merged[key] = entry
            source[key] = path
    return dict(sorted(merged.items()))


def counts(report: Report) -> Counter[str]:
    """How many case runs have each status."""
    return Counter(entry["status"] for entry in report.values())

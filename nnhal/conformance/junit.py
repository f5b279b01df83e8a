"""A conformance report as JUnit XML (``--junit FILE``), the format CI systems read.

The document is the common JUnit schema (the one Jenkins, GitLab and the junitparser
package read): ``<testsuites>`` holding one ``<testsuite>`` with the totals, its
properties (the shard, the modes) and one ``<testcase>`` per case run — ``name`` the case,
``classname`` ``nnhal.conformance.<mode>`` — in the report's key order. A failed run has a
``<failure>`` whose ``message`` is the detail's first line and whose text is the whole
detail; a skipped run a ``<skipped>`` with the reason. nnhal reports no JUnit *errors*:
a runner error is a failed case run (its detail says so). Times are wall seconds of the
whole suite; a case's modes run together, so runs carry no time of their own.
"""

from __future__ import annotations

import socket
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

#: The ``classname`` prefix of every test case.
CLASS_PREFIX = "nnhal.conformance"
#: XML 1.0 forbids most control characters; a detail may carry any text.
_NOT_XML = dict.fromkeys(c for c in range(32) if c not in (9, 10, 13))

Report = Mapping[str, Mapping[str, str]]


def split_key(key: str) -> tuple[str, str]:
    """(case, mode) of a report key ``<case name>/<mode>``."""
    case, _, mode = key.rpartition("/")
    return case, mode


def _clean(text: str) -> str:
    return text.translate(_NOT_XML)


def to_junit(
    report: Report,
    suite: str = "nnhal conformance",
    seconds: float = 0.0,
    properties: Mapping[str, str] | None = None,
    started: datetime | None = None,
) -> ET.ElementTree[ET.Element]:
    """The JUnit document of ``report`` (module docstring)."""
    counts = {s: sum(1 for v in report.values() if v["status"] == s) for s in ("passed", "failed", "skipped")}
    totals = {
        "tests": str(len(report)),
        "failures": str(counts["failed"]),
        "errors": "0",
        "skipped": str(counts["skipped"]),
        "time": f"{seconds:.3f}",
    }
    root = ET.Element("testsuites", {"name": suite, **totals})
    when = (started or datetime.now(timezone.utc)).replace(microsecond=0).isoformat()
    ts = ET.SubElement(
        root, "testsuite", {"name": suite, **totals, "timestamp": when, "hostname": socket.gethostname()}
    )
    if properties:
        props = ET.SubElement(ts, "properties")
        for name, value in properties.items():
            ET.SubElement(props, "property", {"name": name, "value": _clean(value)})
    for key in sorted(report):
        entry = report[key]
        case, mode = split_key(key)
        tc = ET.SubElement(ts, "testcase", {"name": _clean(case), "classname": f"{CLASS_PREFIX}.{mode}"})
        detail = _clean(entry.get("detail", ""))
        if entry["status"] == "failed":
            failure = ET.SubElement(tc, "failure", {"message": detail.splitlines()[0] if detail else "failed"})
            failure.set("type", "failed")
            failure.text = detail
        elif entry["status"] == "skipped":
            ET.SubElement(tc, "skipped", {"message": detail})
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(
    path: Path,
    report: Report,
    suite: str = "nnhal conformance",
    seconds: float = 0.0,
    properties: Mapping[str, str] | None = None,
) -> None:
    """Write :func:`to_junit` of ``report`` to ``path`` (UTF-8, with the XML declaration)."""
    to_junit(report, suite, seconds, properties).write(path, encoding="utf-8", xml_declaration=True)

"""``nnhal replay FILE [ADDR | --start]``: a recording's HAL calls against a server.

The calls of FILE (``nnhal serve --record DIR`` made it) are replayed in order
(``nnhal.replay.player``); the differences from the recorded answers are printed as a table,
and the last line is ``N calls replayed, M differences[, K skipped]``. Exit status 0 iff
there is no difference. A file that is not a whole, untampered recording is one line and
exit 2 (``--partial`` replays a recording whose session had not ended, e.g. of a server
that was killed). ``--timing`` adds recorded vs replayed latencies per method.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterator

from nnhal.cli.connect import connect, tls_of
from nnhal.cli.table import Progress, print_table
from nnhal.cli.usage import UsageError
from nnhal.core.recording import Recording, RecordingError, read_recording
from nnhal.replay.player import Player, Report
from nnhal.server.devices import KINDS
from nnhal.testing.local_server import LocalServer

#: Differences printed in full; the rest are counted.
_SHOWN = 50


@contextlib.contextmanager
def _target(args: argparse.Namespace) -> Iterator[str]:
    if not args.start:
        yield args.address
        return
    flags: list[str] = []
    if args.device:
        if args.device not in KINDS:
            raise UsageError(f"--start with --device {args.device}: give a device kind ({', '.join(KINDS)})")
        flags += ["--device", args.device]
    if args.feature_level:
        flags += ["--feature-level", args.feature_level]
    with LocalServer(*flags) as srv:
        yield srv.address


def _read(args: argparse.Namespace) -> Recording:
    try:
        rec = read_recording(args.file)
    except RecordingError as err:
        raise UsageError(str(err)) from None
    if not rec.complete and not args.partial:
        raise UsageError(
            f"{args.file}: the recording has no end frame ({len(rec.calls)} calls: its session had not ended, "
            "or the server was killed); --partial replays what it holds"
        )
    return rec


def _timing_rows(report: Report) -> list[list[object]]:
    by_method: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for lat in report.latencies:
        by_method[lat.method].append((lat.recorded_us, lat.replayed_us))
    rows: list[list[object]] = []
    for method, pairs in sorted(by_method.items()):
        rec = statistics.median(p[0] for p in pairs)
        rep = statistics.median(p[1] for p in pairs)
        rows.append([method, len(pairs), f"{rec:.0f}", f"{rep:.0f}", f"{rep / rec:.2f}" if rec else "-"])
    return rows


def run(args: argparse.Namespace) -> int:
    rec = _read(args)
    with (
        _target(args) as address,
        connect(address, "nnhal-replay", args.timeout, tls_of(args), args.device) as dev,
    ):
        progress = Progress(len(rec.calls), "replay")
        try:
            report = Player(rec, dev, lambda _seq: progress.step()).run()
        except RecordingError as err:
            raise UsageError(str(err)) from None
    header = rec.header
    print(
        f"{args.file}: {len(rec.calls)} calls recorded by the {header.get('recorder', '?')} on "
        f"{header.get('device', '?')} (feature level {header.get('feature_level', '?')})"
    )
    if report.differences:
        rows = [[d.call, d.method, d.what, d.recorded, d.replayed] for d in report.differences[:_SHOWN]]
        print_table(["call", "method", "what", "recorded", "replayed"], rows)
        if len(report.differences) > _SHOWN:
            print(f"… and {len(report.differences) - _SHOWN} more differences")
    if report.skipped:
        reasons = Counter(why for _seq, _method, why in report.skipped)
        print_table(["skipped", "calls"], reasons.most_common())
    if args.timing and report.latencies:
        print_table(
            ["method", "calls", "recorded µs (median)", "replayed µs (median)", "replayed/recorded"],
            _timing_rows(report),
        )
    skipped = f", {len(report.skipped)} skipped" if report.skipped else ""
    print(f"{report.replayed} calls replayed, {len(report.differences)} differences{skipped}")
    return 0 if not report.differences else 1

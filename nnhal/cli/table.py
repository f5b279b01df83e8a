"""Plain-text tables and a progress bar for the CLI (stdout; no dependencies)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    numeric = [all(_is_number(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if numeric[i] else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep, *(line(r) for r in cells[1:])])


def _is_number(text: str) -> bool:
    try:
        float(text.rstrip("%"))
    except ValueError:
        return False
    return True


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], out: TextIO = sys.stdout) -> None:
    print(format_table(headers, rows), file=out)


class Progress:
    """A one-line progress bar on stderr when it is a terminal; sparse lines otherwise."""

    def __init__(self, total: int, label: str, out: TextIO = sys.stderr) -> None:
        self.total = max(total, 1)
        self.label = label
        self.out = out
        self.done = 0
        self.failed = 0
        self._tty = out.isatty()
        self._last = 0.0
        self._start = time.monotonic()

    def step(self, failed: bool = False) -> None:
        self.done += 1
        self.failed += int(failed)
        now = time.monotonic()
        if now - self._last < (0.1 if self._tty else 10.0) and self.done < self.total:
            return
        self._last = now
        frac = self.done / self.total
        bar = "#" * int(frac * 30)
        text = f"{self.label} [{bar:<30}] {self.done}/{self.total} ({self.failed} failed, {now - self._start:.0f}s)"
        if self._tty:
            self.out.write("\r" + text)
            if self.done >= self.total:
                self.out.write("\n")
        else:
            self.out.write(text + "\n")
        self.out.flush()

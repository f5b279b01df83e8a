"""What an import can fail with: one exception type, one line each.

``TfliteImportError`` (a ``ValueError``) says what is wrong with the file and where:
not a flatbuffer, truncated, a schema version we do not read, a tensor or buffer that
does not fit. ``UnsupportedOperators`` (a subclass) lists every operator the importer
cannot express in NNAPI, each with its reason, so that a user sees all of them at once.
The command line prints ``str(err)`` after ``nnhal: error:``; neither carries a traceback
worth showing.
"""

from __future__ import annotations

from dataclasses import dataclass


class TfliteImportError(ValueError):
    """The file cannot become an NNAPI model; the message names the problem."""


@dataclass(frozen=True)
class Unmapped:
    """One operator left out: its index in the subgraph, its TFLite name and why."""

    index: int
    operator: str
    reason: str

    def __str__(self) -> str:
        return f"#{self.index} {self.operator}: {self.reason}"


class Unmappable(Exception):
    """Raised by a mapper for the operator it is mapping; collected into UnsupportedOperators."""


class UnsupportedOperators(TfliteImportError):
    """Operators with no faithful NNAPI mapping (the delegate would leave them on the CPU)."""

    def __init__(self, source: str, unmapped: list[Unmapped]) -> None:
        self.unmapped = list(unmapped)
        names = sorted({u.operator for u in unmapped})
        listed = "; ".join(str(u) for u in unmapped[:8])
        more = f"; and {len(unmapped) - 8} more" if len(unmapped) > 8 else ""
        super().__init__(
            f"{source}: {len(unmapped)} operator(s) cannot be mapped to NNAPI ({', '.join(names)}): {listed}{more}"
        )

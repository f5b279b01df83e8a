"""``nnhal import MODEL.tflite -o MODEL.nnhal``: import a TFLite model and save the canonical
NNAPI model (``nnhal.importers.saved``, a versioned file), printing what was imported.

A file the importer cannot read, or operators it cannot map, is one ``nnhal: error:`` line
naming the problem (every unmapped operator with its reason) and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from nnhal.cli.table import print_table as _print_table
from nnhal.cli.usage import UsageError
from nnhal.importers.errors import TfliteImportError
from nnhal.importers.saved import save
from nnhal.importers.tflite_model import ImportedModel, import_tflite


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A table on the current ``sys.stdout`` (the one ``print`` uses, also when redirected)."""
    _print_table(headers, rows, sys.stdout)


def load_tflite(path: Path) -> ImportedModel:
    """The imported model, or UsageError with the importer's one-line message."""
    if not path.is_file():
        raise UsageError(f"{path}: no such model file")
    try:
        return import_tflite(path)
    except TfliteImportError as err:
        raise UsageError(str(err)) from None


def print_summary(imported: ImportedModel) -> None:
    ops = Counter(op.type.name for op in imported.model.main.operations)
    print(
        f"{imported.source}: {imported.operators} TFLite operators -> {len(imported.model.main.operations)} "
        f"NNAPI operations ({', '.join(f'{name} {n}' for name, n in ops.most_common())})"
    )
    print_table(
        ["", "name", "shape", "dtype"],
        [
            *(["input", s.name, "x".join(map(str, s.shape)), s.dtype] for s in imported.inputs),
            *(["output", s.name, "x".join(map(str, s.shape)), s.dtype] for s in imported.outputs),
        ],
    )


def run(args: argparse.Namespace) -> int:
    imported = load_tflite(args.model)
    print_summary(imported)
    try:
        size = save(imported, args.output)
    except OSError as err:
        raise UsageError(f"{args.output}: cannot write: {err.strerror or err}") from None
    print(f"saved {args.output} ({size} bytes)")
    return 0

"""Fail when the committed generated code differs from what `make proto` would write."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parents[2]
PROTOS = sorted((ROOT / "protos").rglob("*.proto"))


def generate(out: Path) -> None:
    args = [
        "protoc",
        f"-I{ROOT / 'protos'}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *map(str, PROTOS),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def stale_files() -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        generate(out)
        stale = []
        for fresh in sorted(out.rglob("*.py*")):
            rel = fresh.relative_to(out)
            committed = ROOT / rel
            if not committed.exists() or committed.read_bytes() != fresh.read_bytes():
                stale.append(str(rel))
        return stale


def main() -> int:
    stale = stale_files()
    if stale:
        print("generated protobuf code is stale; run `make proto` and commit:", *stale, sep="\n  ", file=sys.stderr)
        return 1
    print(f"generated code is fresh ({len(PROTOS)} protos)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

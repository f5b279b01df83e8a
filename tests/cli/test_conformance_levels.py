"""``nnhal conformance --feature-level``: only with ``--start``, only a level nnhal serves —
refused up front (one line, exit 2) otherwise; and ``nnhal info``'s level labels."""

from __future__ import annotations

from pathlib import Path

import pytest

from nnhal.cli.info import _level
from nnhal.cli.main import main

VECTORS = Path(__file__).resolve().parents[2] / "conformance" / "vectors"


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nnhal: error: "), lines
    return lines[0]


def test_feature_level_needs_start(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["conformance", str(VECTORS / "V1_0"), "--target", "127.0.0.1:1", "--feature-level", "1.0"]
    assert "--start" in _error(argv, capsys)


def test_feature_level_must_be_one_nnhal_serves(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["conformance", str(VECTORS / "V1_0"), "--start", "--feature-level", "9"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--feature-level" in err and "aidl-v4" in err and "Traceback" not in err


def test_info_labels_levels() -> None:
    assert _level(80) == "NN HAL AIDL V4 (feature level 8)"
    assert _level(50) == "NN HAL AIDL V1 (feature level 5)"
    assert _level(10) == "NN HAL 1.0"
    assert _level(99) == "unknown (99)"

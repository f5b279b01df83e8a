"""The command-line rough edges of issue 31: each bad input is one ``nnhal: error:`` line on
stderr, exit status 2, with nothing printed by a library (gRPC, numpy, LiteRT) around it."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from nnhal.cli.main import build_parser

from .test_errors import ROOT, SERVE, assert_usage_error, nnhal

MODEL = ROOT / "models" / "tflite" / "face_detection_front.tflite"


def _all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found.extend(_all_parsers(child))
    return found


def test_url_address_says_to_drop_the_scheme() -> None:
    assert_usage_error(nnhal("info", "http://127.0.0.1:50051"), "without a URL scheme", "127.0.0.1:50051")


def test_unix_socket_that_cannot_be_created_is_our_line_only() -> None:
    assert_usage_error(nnhal(*SERVE, "--listen", "unix:/proc/x.sock"), "cannot create a socket at /proc/x.sock")


def test_every_parser_rejects_abbreviations() -> None:
    parsers = _all_parsers(build_parser())
    assert len(parsers) > 9
    assert all(not p.allow_abbrev for p in parsers), [p.prog for p in parsers if p.allow_abbrev]


def test_abbreviated_flag_is_refused() -> None:
    assert_usage_error(nnhal(*SERVE, "--slot", "3"), "unrecognized arguments: --slot 3")


@pytest.mark.parametrize("argv", [("--bogus",), ("-v", "--bogus=1"), ("--bogus", "serve")])
def test_unknown_top_level_option_is_named(argv: tuple[str, ...]) -> None:
    line = assert_usage_error(nnhal(*argv), "unrecognized arguments: --bogus")
    assert "required" not in line


def test_missing_command_still_says_so() -> None:
    assert_usage_error(nnhal(), "the following arguments are required: COMMAND")


def test_unwritable_save_outputs_is_refused_before_the_model_is_loaded(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = nnhal("run", "--start", str(MODEL), "--save-outputs", str(blocker / "out"))
    assert_usage_error(done, "--save-outputs", "cannot write")
    assert done.stdout == ""  # nothing imported, prepared or executed


def test_text_file_as_input_is_named_as_not_npy(tmp_path: Path) -> None:
    text = tmp_path / "in.txt"
    text.write_text("1 2 3\n")
    line = assert_usage_error(
        nnhal("run", "--start", str(MODEL), "--input", str(text)), "not a .npy file", "numpy.save"
    )
    assert "pickle" not in line


def test_npy_input_still_loads(tmp_path: Path) -> None:
    wrong = tmp_path / "in.npy"
    np.save(wrong, np.zeros((2, 2), np.float32))
    assert_usage_error(nnhal("run", "--start", str(MODEL), "--input", str(wrong)), "shape [2, 2]")

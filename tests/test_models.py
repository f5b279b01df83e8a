"""The shipped models (``nnhal.models``): found through the package (so an installed wheel has
them, as tests/test_dockerfile.py checks of the wheel's contents), a missing one named."""

from __future__ import annotations

import pytest

from nnhal.models import FACE_DETECTION, FACE_LANDMARK, tflite_model


def test_shipped_models_are_files_with_their_attribution() -> None:
    for name in (FACE_DETECTION, FACE_LANDMARK):
        path = tflite_model(name)
        assert path.is_file() and path.read_bytes()[4:8] == b"TFL3", path
    assert "Apache License 2.0" in (tflite_model(FACE_DETECTION).parent / "README.md").read_text()


def test_a_missing_model_is_named() -> None:
    with pytest.raises(FileNotFoundError, match=r"no_such_model\.tflite is missing"):
        tflite_model("no_such_model.tflite")

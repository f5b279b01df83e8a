"""Bad files fail with one message naming the problem; unmappable operators are all listed with
their reasons; the saved ``.nnhal`` format round-trips and rejects what is not one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from nnhal.importers.errors import TfliteImportError, UnsupportedOperators
from nnhal.importers.saved import FORMAT_VERSION, MAGIC, dumps, load, loads, save
from nnhal.importers.tflite_model import import_tflite
from tests.importers.conftest import MODELS
from tests.importers.tflite_writer import Op, Tensor

F = Callable[..., Path]
SHORT_RANGE = MODELS / "face_detection_short_range.tflite"


def _relu_model() -> tuple[list[Tensor], list[Op], list[int], list[int]]:
    return [Tensor("x", (1, 4)), Tensor("y", (1, 4))], [Op("RELU", [0], [1])], [0], [1]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "too short to be a TFLite flatbuffer"),
        (b"PK\x03\x04" + bytes(60), "not a TFLite model (the flatbuffer identifier is"),
        (bytes(range(256)) * 4, "not a TFLite model"),
    ],
    ids=["empty", "zip", "noise"],
)
def test_not_a_flatbuffer(data: bytes, message: str) -> None:
    with pytest.raises(TfliteImportError, match=message.replace("(", r"\(")):
        import_tflite("bad.tflite", data)


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, 0.999])
def test_truncated_real_model(keep: float) -> None:
    data = SHORT_RANGE.read_bytes()
    with pytest.raises(TfliteImportError, match="truncated") as info:
        import_tflite("cut.tflite", data[: int(len(data) * keep)])
    assert "\n" not in str(info.value)


def test_unsupported_schema_version(model_file: F) -> None:
    with pytest.raises(TfliteImportError, match=r"unsupported TFLite schema version 2 \(this importer reads 3\)"):
        import_tflite(model_file(*_relu_model(), version=2))


def test_every_unmappable_operator_is_listed_with_its_reason(model_file: F) -> None:
    tensors = [Tensor("x", (1, 4)), Tensor("a", (1, 4)), Tensor("b", (1, 4)), Tensor("c", (1, 4))]
    ops = [Op("CUSTOM:MyOp", [0], [1]), Op("RELU", [1], [2]), Op("SIGN", [2], [3])]
    with pytest.raises(UnsupportedOperators) as info:
        import_tflite(model_file(tensors, ops, [0], [3]))
    err = info.value
    assert [(u.index, u.operator) for u in err.unmapped] == [(0, "CUSTOM:MyOp"), (2, "SIGN")]
    assert "custom operator" in err.unmapped[0].reason and "no NNAPI mapping" in err.unmapped[1].reason
    assert "2 operator(s) cannot be mapped to NNAPI (CUSTOM:MyOp, SIGN)" in str(err) and "\n" not in str(err)


def test_missing_file() -> None:
    with pytest.raises(TfliteImportError, match="cannot read"):
        import_tflite("/nonexistent/model.tflite")


def test_saved_model_round_trip(tmp_path: Path) -> None:
    imported = import_tflite(SHORT_RANGE)
    target = tmp_path / "m.nnhal"
    assert save(imported, target) == target.stat().st_size
    back = load(target)
    assert back.model == imported.model
    assert (back.inputs, back.outputs, back.operators) == (imported.inputs, imported.outputs, imported.operators)
    assert target.read_bytes()[:8] == MAGIC


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: b"NOTNNHAL" + d[8:], "not a saved nnhal model"),
        (lambda d: d[:8] + (FORMAT_VERSION + 1).to_bytes(4, "little") + d[12:], "format version 2"),
        (lambda d: d[:14], "truncated saved model"),
        (lambda d: d[:-100], "corrupt saved model"),
    ],
    ids=["magic", "version", "header", "model"],
)
def test_saved_model_rejects(mutate: Callable[[bytes], bytes], message: str) -> None:
    data = dumps(import_tflite(SHORT_RANGE))
    with pytest.raises(TfliteImportError, match=message):
        loads(mutate(data), "m.nnhal")


def test_random_inputs_follow_the_specs() -> None:
    imported = import_tflite(SHORT_RANGE)
    (x,) = imported.random_inputs(5)
    assert x.shape == (1, 128, 128, 3) and x.dtype == np.float32
    assert np.array_equal(x, imported.random_inputs(5)[0])

"""Shared helpers: write a synthetic model to a file, run an imported model in-process through
the executor (validated as a driver would), run the same file in LiteRT."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest

import nnhal.server.executor.ops  # noqa: F401  (registers every operation)
from nnhal.core.types import InlinePool
from nnhal.importers import litert
from nnhal.importers.tflite_model import ImportedModel
from nnhal.models import FACE_DETECTION, tflite_model
from nnhal.server.executor.graph import PreparedGraph
from nnhal.server.executor.validate import validate_full
from tests.importers.tflite_writer import Op, Tensor, write_model

MODELS = tflite_model(FACE_DETECTION).parent
needs_litert = pytest.mark.skipif(
    not litert.available(), reason="LiteRT (ai-edge-litert, the 'tflite' extra) is not installed"
)


def run_in_process(imported: ImportedModel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    pools = [p.data for p in imported.model.pools if isinstance(p, InlinePool)]
    validate_full(imported.model, pools)
    return PreparedGraph(imported.model, pools).run(list(inputs))


@pytest.fixture
def model_file(tmp_path: Path) -> Callable[..., Path]:
    """``model_file(tensors, ops, inputs, outputs, version=3)`` -> the path of the written model."""
    count = 0

    def write(tensors: list[Tensor], ops: list[Op], inputs: list[int], outputs: list[int], version: int = 3) -> Path:
        nonlocal count
        count += 1
        path = tmp_path / f"model{count}.tflite"
        path.write_bytes(write_model(tensors, ops, inputs, outputs, version))
        return path

    return write

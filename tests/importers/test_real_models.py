"""The three MediaPipe models through a real server process (prepare, execute) against LiteRT
on the same inputs: random ones and a smooth image-like one. Every output must agree within
1e-4 absolute or 1e-4 relative, element by element."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.importers.compare import diff
from nnhal.importers.litert import LiteRtRunner
from nnhal.importers.tflite_model import ImportedModel, import_tflite
from tests.importers.conftest import MODELS, needs_litert

pytestmark = [pytest.mark.integration, needs_litert]
NAMES = ["face_detection_short_range", "face_detection_front", "face_landmark"]


def smooth_image(shape: tuple[int, ...]) -> np.ndarray:
    """A face-like picture in [-1, 1]: a bright ellipse on a gradient, as the models expect."""
    _, h, w, c = shape
    yy, xx = np.mgrid[0:h, 0:w] / np.array([h, w]).reshape(2, 1, 1)
    face = np.exp(-(((xx - 0.5) / 0.25) ** 2 + ((yy - 0.45) / 0.32) ** 2))
    channels = [0.6 * face + 0.3 * xx, 0.5 * face + 0.2 * yy, 0.4 * face + 0.1]
    image = np.stack(channels[:c], axis=-1)[None]
    return (image * 2.0 - 1.0).astype(np.float32)


def _check(device: Device, imported: ImportedModel, path: Path, inputs: list[np.ndarray]) -> None:
    reference = LiteRtRunner(path).run(inputs)
    with device.prepare_model_sync(imported.model) as pm:
        ours = pm.execute(inputs, timeout=120).outputs
    assert len(ours) == len(reference) == len(imported.outputs)
    for spec, a, b in zip(imported.outputs, ours, reference):
        d = diff(a, b)
        assert d.ok, (spec.name, d)


@pytest.mark.parametrize("name", NAMES)
def test_model_agrees_with_litert(device: Device, name: str) -> None:
    path = MODELS / f"{name}.tflite"
    imported = import_tflite(path)
    _check(device, imported, path, imported.random_inputs(0))
    _check(device, imported, path, [smooth_image(imported.inputs[0].shape)])

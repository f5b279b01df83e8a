"""The real TFLite models shipped with the package (``nnhal/models/tflite``, attribution and
licences in its ``README.md``): the ``exec.tflite_face*`` benchmarks and the importer's examples
use them, from a source checkout and from an installed wheel alike."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

FACE_DETECTION = "face_detection_short_range.tflite"
FACE_LANDMARK = "face_landmark.tflite"


def tflite_model(name: str) -> Path:
    """The file path of the shipped ``.tflite`` model ``name`` (e.g. :data:`FACE_DETECTION`).

    The path exists whenever the package is installed from a wheel, an sdist or a checkout (the
    package is never imported from a zip archive: the servers it starts need real files).
    Raises :class:`FileNotFoundError` naming the path if the model is not there.
    """
    path = Path(str(files(__name__) / "tflite" / name))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the nnhal package was installed without its models")
    return path

"""The ``.nnhal`` file: an imported model saved for later runs, versioned.

Layout (all little-endian)::

    magic   8 bytes  b"NNHALMDL"
    version u32      FORMAT_VERSION (1)
    header  u32 n, then n bytes of UTF-8 JSON: {"source", "operators", "inputs", "outputs"}
                     (each input/output: name, shape, dtype, scale, zero_point)
    model   the rest: the canonical Model as the wire protobuf (``nnhal.core.wire_model.model_to_bytes``)

``load`` checks the magic, the version, the header and the model, and raises TfliteImportError
naming what is wrong; nothing in the file is executed or unpickled.
"""

from __future__ import annotations

import json
import struct
from dataclasses import asdict
from pathlib import Path
from typing import Any

from nnhal.core.errors import HalError
from nnhal.core.wire_model import model_from_bytes, model_to_bytes
from nnhal.importers.errors import TfliteImportError
from nnhal.importers.tflite_model import ImportedModel, TensorSpec

MAGIC = b"NNHALMDL"
FORMAT_VERSION = 1
_HEAD = struct.Struct("<8sII")


def dumps(imported: ImportedModel) -> bytes:
    header = json.dumps(
        {
            "source": imported.source,
            "operators": imported.operators,
            "inputs": [asdict(s) for s in imported.inputs],
            "outputs": [asdict(s) for s in imported.outputs],
        }
    ).encode()
    return _HEAD.pack(MAGIC, FORMAT_VERSION, len(header)) + header + model_to_bytes(imported.model)


def save(imported: ImportedModel, path: str | Path) -> int:
    """Write ``imported`` to ``path``; returns the number of bytes written."""
    data = dumps(imported)
    Path(path).write_bytes(data)
    return len(data)


def _specs(items: Any) -> tuple[TensorSpec, ...]:
    return tuple(
        TensorSpec(
            str(i["name"]), tuple(int(d) for d in i["shape"]), str(i["dtype"]), float(i["scale"]), int(i["zero_point"])
        )
        for i in items
    )


def loads(data: bytes, source: str = "model") -> ImportedModel:
    if data[:8] != MAGIC:
        raise TfliteImportError(f"{source}: not a saved nnhal model (no {MAGIC!r} header)")
    if len(data) < _HEAD.size:
        raise TfliteImportError(f"{source}: truncated saved model ({len(data)} bytes)")
    _, version, size = _HEAD.unpack_from(data)
    if version != FORMAT_VERSION:
        raise TfliteImportError(f"{source}: saved-model format version {version}; this nnhal reads {FORMAT_VERSION}")
    end = _HEAD.size + size
    if end > len(data):
        raise TfliteImportError(f"{source}: truncated saved model ({len(data)} bytes, header needs {end})")
    try:
        header = json.loads(data[_HEAD.size : end])
        inputs, outputs = _specs(header["inputs"]), _specs(header["outputs"])
        source_name, operators = str(header["source"]), int(header["operators"])
    except (ValueError, KeyError, TypeError) as err:
        raise TfliteImportError(f"{source}: corrupt saved-model header ({err})") from None
    try:
        model = model_from_bytes(data[end:])
    except HalError as err:
        raise TfliteImportError(f"{source}: corrupt saved model ({err})") from None
    if len(model.main.input_indexes) != len(inputs) or len(model.main.output_indexes) != len(outputs):
        raise TfliteImportError(f"{source}: the header's inputs/outputs do not match the model")
    return ImportedModel(model, inputs, outputs, source_name, operators)


def load(path: str | Path) -> ImportedModel:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise TfliteImportError(f"{path}: cannot read: {err.strerror or err}") from None
    return loads(data, str(path))


def is_saved(path: str | Path) -> bool:
    """Whether ``path`` starts with the saved-model magic (False when unreadable)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False

"""``import_tflite``: a ``.tflite`` file -> a canonical NNAPI ``Model``, the way the TFLite NNAPI
delegate builds one, plus the names and shapes of its inputs and outputs.

The model's inputs and outputs are the main subgraph's, in TFLite's order, with TFLite's tensor
names (``ImportedModel.inputs`` / ``.outputs``); operators are mapped in file order (TFLite
stores them topologically sorted) by the table in ``nnhal.importers.mapping``. Every operator
that cannot be expressed is collected with its reason and reported together
(``UnsupportedOperators``); a partially mapped model is never returned.

Thread-safety: none needed (each call builds its own state). Errors: ``TfliteImportError``
(file problems, unmappable operators), never anything else for a bad file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnhal.core.operand_types import DTYPE
from nnhal.core.types import Model
from nnhal.importers.converter import Converter
from nnhal.importers.errors import TfliteImportError, Unmappable, Unmapped, UnsupportedOperators
from nnhal.importers.mapping import MAPPERS, reason_for
from nnhal.importers.reader import TfGraph, read_tflite


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output: its TFLite name, shape, numpy dtype and quantization."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scale: float = 0.0
    zero_point: int = 0


@dataclass(frozen=True)
class ImportedModel:
    model: Model
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    source: str
    operators: int

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """One array per input: uniform in [0, 1) for float, the full range for integers."""
        rng = np.random.default_rng(seed)
        arrays = []
        for spec in self.inputs:
            dtype = np.dtype(spec.dtype)
            if dtype.kind == "f":
                arrays.append(rng.random(spec.shape, dtype=np.float32).astype(dtype))
            elif dtype.kind == "b":
                arrays.append(rng.integers(0, 2, spec.shape).astype(dtype))
            else:
                info = np.iinfo(dtype)
                arrays.append(rng.integers(info.min, int(info.max) + 1, spec.shape).astype(dtype))
        return arrays


def _spec(c: Converter, t: int) -> TensorSpec:
    info = c.tensor_info(t)
    kind, scale, zp, _ = c.operand_type(t)
    return TensorSpec(info.name, c.shape(t), np.dtype(DTYPE[kind]).name, scale, zp)


def _stand_in(c: Converter, outputs: tuple[int, ...]) -> None:
    for t in outputs:
        if t >= 0 and t not in c.operand:
            try:
                c.output(t)
            except Unmappable:
                pass  # its type has no operand either; a consumer will say so


def build(graph: TfGraph) -> ImportedModel:
    """The NNAPI model of ``graph``; UnsupportedOperators lists every operator that cannot map."""
    c = Converter(graph)
    unmapped: list[Unmapped] = []
    inputs = []
    for t in graph.inputs:
        try:
            inputs.append(c.output(t))  # a model input is an operand nothing inside produces
        except Unmappable as err:
            raise TfliteImportError(f"{graph.source}: input '{graph.tensors[t].name}': {err}") from None
    for op in graph.operators:
        before = len(unmapped)
        mapper = MAPPERS.get(op.name)
        try:
            if mapper is None:
                unmapped.append(Unmapped(op.index, op.name, reason_for(op.name)))
            else:
                mapper(c, op)
        except Unmappable as err:
            unmapped.append(Unmapped(op.index, op.name, str(err)))
        except (IndexError, ValueError, KeyError) as err:
            unmapped.append(Unmapped(op.index, op.name, f"malformed operator ({type(err).__name__}: {err})"))
        if len(unmapped) > before:
            _stand_in(c, op.outputs)  # so that its consumers are judged on their own
    if unmapped:
        raise UnsupportedOperators(graph.source, unmapped)
    outputs = []
    for t in graph.outputs:
        if t not in c.operand:
            name = graph.tensors[t].name
            raise TfliteImportError(f"{graph.source}: output '{name}' is not computed by any operator (a constant)")
        outputs.append(c.operand[t])
    c.b.identify_inputs_and_outputs(inputs, outputs)
    model = c.b.finish()
    return ImportedModel(
        model,
        tuple(_spec(c, t) for t in graph.inputs),
        tuple(_spec(c, t) for t in graph.outputs),
        graph.source,
        len(graph.operators),
    )


def import_tflite(path: str | Path, data: bytes | None = None) -> ImportedModel:
    """Read ``path`` (or ``data``, named ``path``) and build its NNAPI model."""
    source = str(path)
    if data is None:
        try:
            data = Path(path).read_bytes()
        except OSError as err:
            raise TfliteImportError(f"{source}: cannot read: {err.strerror or err}") from None
    return build(read_tflite(data, source))

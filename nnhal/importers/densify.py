"""Sparse TFLite constants (``SparsityParameters``) to dense arrays, as TFLite's own DENSIFY does.

A sparse tensor of rank n is stored as a tree over ``n + k`` levels (k block dimensions), visited
in ``traversal_order``: a DENSE level has ``dense_size`` children per node; a SPARSE_CSR level
lists each node's children as ``array_indices[array_segments[p]:array_segments[p + 1]]``. The
stored values are the leaves in visiting order. We walk the levels breadth-first with numpy (one
array of node positions per level, no per-element loop), then place every leaf at its dense
coordinate: an original dimension ``d`` blocked by ``block_map[j]`` has coordinate
``outer[d] * block_size + inner[n + j]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tflite

from nnhal.importers.errors import TfliteImportError

_DENSE = 0
_INDEX_DTYPE: dict[int, np.dtype[Any]] = {
    tflite.SparseIndexVector.Int32Vector: np.dtype("<i4"),
    tflite.SparseIndexVector.Uint16Vector: np.dtype("<u2"),
    tflite.SparseIndexVector.Uint8Vector: np.dtype("u1"),
}


def _typed(meta: Any, which: str) -> np.ndarray:
    kind = getattr(meta, f"Array{which}Type")()
    table = getattr(meta, f"Array{which}")()
    if kind == 0 or table is None:
        return np.zeros(0, np.int64)
    dtype = _INDEX_DTYPE[kind]
    o = table.Offset(4)
    if o == 0:
        return np.zeros(0, np.int64)
    start, length = table.Vector(o), table.VectorLen(o)
    data: bytes = table.Bytes
    return np.frombuffer(data, dtype, int(length), int(start)).astype(np.int64)


def densify(values: np.ndarray, shape: tuple[int, ...], sparsity: Any, what: str) -> np.ndarray:
    """The dense array of ``shape`` that ``values`` and ``sparsity`` describe (zeros elsewhere)."""
    order = [int(v) for v in sparsity.TraversalOrderAsNumpy()] if sparsity.TraversalOrderLength() else []
    block_map = [int(v) for v in sparsity.BlockMapAsNumpy()] if sparsity.BlockMapLength() else []
    n = len(shape)
    levels = n + len(block_map)
    if len(order) != levels or sparsity.DimMetadataLength() != levels or sorted(order) != list(range(levels)):
        raise TfliteImportError(f"{what}: sparsity parameters do not describe a rank-{n} tensor")
    positions = np.zeros(1, np.int64)
    coords: list[np.ndarray] = []  # per traversal level, each leaf-path's index at that level
    sizes = [0] * levels
    for level in range(levels):
        meta = sparsity.DimMetadata(level)
        if meta.Format() == _DENSE:
            size = int(meta.DenseSize())
            sizes[order[level]] = size
            child = np.tile(np.arange(size, dtype=np.int64), positions.size)
            coords = [np.repeat(c, size) for c in coords]
            positions = np.repeat(positions, size) * size + child
        else:
            segments, indices = _typed(meta, "Segments"), _typed(meta, "Indices")
            if positions.size and (positions.max() + 1 >= segments.size):
                raise TfliteImportError(f"{what}: sparse level {level} has too few segments")
            starts, ends = segments[positions], segments[positions + 1]
            counts = ends - starts
            if (counts < 0).any() or (ends.max(initial=0) > indices.size):
                raise TfliteImportError(f"{what}: sparse level {level} has inconsistent segments")
            total = int(counts.sum())
            # children k in [start, end) of each node, in order
            base = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
            ks = np.arange(total, dtype=np.int64) + base
            coords = [np.repeat(c, counts) for c in coords]
            child = indices[ks]
            positions = ks
            # a sparse level's size is the dense dimension it indexes
            dim = order[level]
            sizes[dim] = shape[dim] if dim < n else 0
        coords.append(child)
    if positions.size != values.size:
        raise TfliteImportError(f"{what}: sparsity describes {positions.size} values, the buffer holds {values.size}")
    by_dim = [np.zeros(0, np.int64)] * levels
    for level, dim in enumerate(order):
        by_dim[dim] = coords[level]
    dense_index = []
    for d in range(n):
        c = by_dim[d]
        if d in block_map:
            j = block_map.index(d)
            block = sizes[n + j]
            c = c * block + by_dim[n + j]
        if c.size and (c.max() >= shape[d] or c.min() < 0):
            raise TfliteImportError(f"{what}: a sparse index falls outside dimension {d} of size {shape[d]}")
        dense_index.append(c)
    out = np.zeros(shape, values.dtype)
    out[tuple(dense_index)] = values
    return out

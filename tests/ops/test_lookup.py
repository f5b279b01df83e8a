"""EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION, RANDOM_MULTINOMIAL."""

from __future__ import annotations

import numpy as np
import pytest

from nnhal.core.enums import HalVersion, OperandLifeTime, OperationType as Op
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Operand
from nnhal.server.executor.ops._farmhash import fingerprint64
from tests.ops.elementwise_runner import T, run, scalar, tensor, validate

F32 = T.TENSOR_FLOAT32
I32 = T.TENSOR_INT32


def test_embedding_lookup_and_versions() -> None:
    values = tensor(T.TENSOR_QUANT8_ASYMM_SIGNED, [3, 2], 0.5, 1)
    (y,) = run(
        Op.EMBEDDING_LOOKUP, [(tensor(I32, [2]), [2, 0]), (values, np.arange(6))], [tensor(values.type, [], 0.5, 1)]
    )
    assert y.tolist() == [[4, 5], [0, 1]]
    v16 = tensor(T.TENSOR_FLOAT16, [3, 2])
    assert validate(Op.EMBEDDING_LOOKUP, [(tensor(I32, [1]), None), (v16, None)], [tensor(v16.type)]) == HalVersion.V1_3
    with pytest.raises(InvalidArgument):
        run(Op.EMBEDDING_LOOKUP, [(tensor(I32, [1]), [3]), (values, np.arange(6))], [tensor(values.type, [], 0.5, 1)])
    with pytest.raises(InvalidArgument):
        validate(Op.EMBEDDING_LOOKUP, [(tensor(F32, [1]), None), (v16, None)], [tensor(v16.type)])


def test_hashtable_lookup_hits_and_misses() -> None:
    keys = (tensor(I32, [3]), [-5, 2, 40])
    values = (tensor(F32, [3, 2]), [[1, 1], [2, 2], [3, 3]])
    out, hits = run(
        Op.HASHTABLE_LOOKUP,
        [(tensor(I32, [3]), [40, 7, -5]), keys, values],
        [tensor(F32), tensor(T.TENSOR_QUANT8_ASYMM, [], 1.0, 0)],
    )
    assert out.tolist() == [[3, 3], [0, 0], [1, 1]] and hits.tolist() == [1, 0, 1]
    with pytest.raises(InvalidArgument):
        validate(
            Op.HASHTABLE_LOOKUP,
            [(tensor(I32, [3]), None), (keys[0], None), (values[0], None)],
            [tensor(F32), tensor(F32)],
        )


def test_fingerprint64_known_values() -> None:
    # The empty input hashes to the constant k2; other lengths take distinct code paths.
    assert fingerprint64(b"") == 0x9AE16A3B2F90404F
    assert len({fingerprint64(bytes(n)) for n in (3, 7, 15, 31, 63, 64, 65, 200)}) == 8


def test_lsh_projection_sparse_and_dense_shapes() -> None:
    hashes = tensor(F32, [2, 3])
    seeds = [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]
    data = (tensor(I32, [3, 2]), [[1, 2], [3, 4], [5, 6]])
    no_weight = (Operand(type=F32, lifetime=OperandLifeTime.NO_VALUE), None)
    (sparse,) = run(Op.LSH_PROJECTION, [(hashes, seeds), data, no_weight, (scalar(T.INT32), 3)], [tensor(I32)])
    assert sparse.shape == (2,) and 0 <= sparse[0] < 8 and 8 <= sparse[1] < 16
    weight = (tensor(F32, [3]), [1.0, -1.0, 0.5])
    (dense,) = run(Op.LSH_PROJECTION, [(hashes, seeds), data, weight, (scalar(T.INT32), 2)], [tensor(I32)])
    assert dense.shape == (6,) and set(dense.tolist()) <= {0, 1}
    with pytest.raises(InvalidArgument):
        validate(Op.LSH_PROJECTION, [(hashes, None), data, weight, (scalar(T.INT32), 5)], [tensor(I32)])


def test_random_multinomial_distribution() -> None:
    logits = np.log(np.array([[0.2, 0.8]], np.float32))
    ins = [(tensor(F32, [1, 2]), logits), (scalar(T.INT32), 4000), (tensor(I32, [2]), [1, 2])]
    (y,) = run(Op.RANDOM_MULTINOMIAL, ins, [tensor(I32)])
    assert y.shape == (1, 4000) and abs(np.mean(y == 1) - 0.8) < 0.03
    (again,) = run(Op.RANDOM_MULTINOMIAL, ins, [tensor(I32)])
    assert np.array_equal(y, again)
    with pytest.raises(InvalidArgument):
        validate(Op.RANDOM_MULTINOMIAL, [(tensor(I32, [1, 2]), None), ins[1], ins[2]], [tensor(I32)])

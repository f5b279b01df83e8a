"""Lookup and hashing: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION,
RANDOM_MULTINOMIAL.

LSH_PROJECTION must reproduce the reference bit for bit, so it hashes with
FarmHash Fingerprint64 (``_farmhash``) over the bytes of (float32 seed, input
row): hash functions x bits x rows hashes of a few bytes each.

RANDOM_MULTINOMIAL draws from the softmax of each row with a generator seeded
from the two seed values: deterministic for given seeds, but not the
reference's Philox stream (the HAL only specifies the distribution).
"""

from __future__ import annotations

from functools import partial

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.allocation import reserve_shape
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.errors import INVALID
from nnhal.server.executor.ops._farmhash import fingerprint64
from nnhal.server.executor.ops._validation import expect_vector_input, require_same_quant
from nnhal.server.executor.ops.common import FLOAT_TYPES, T, to_compute, version_for_types
from nnhal.server.executor.registry import register

OUTPUT = 0

# -- EMBEDDING_LOOKUP ------------------------------------------------------------------------
LOOKUPS = 0
EMB_VALUES = 1

_EMBEDDING_VERSION = {
    T.TENSOR_FLOAT32: HalVersion.V1_0,
    T.TENSOR_INT32: HalVersion.V1_2,
    T.TENSOR_QUANT8_ASYMM: HalVersion.V1_2,
    T.TENSOR_FLOAT16: HalVersion.V1_3,
    T.TENSOR_QUANT8_ASYMM_SIGNED: HalVersion.V1_3,
}


def validate_embedding_lookup(v: ValidationContext) -> HalVersion:
    v.expect_counts(2, 1)
    t = v.expect_input_type_in(EMB_VALUES, _EMBEDDING_VERSION)
    v.expect_types([T.TENSOR_INT32, t], [t])
    expect_vector_input(v, LOOKUPS)
    rank = v.input_rank(EMB_VALUES)
    v.require(rank is None or rank >= 2, f"values must have rank >= 2, got {rank}")
    require_same_quant(v, OUTPUT, EMB_VALUES)
    return _EMBEDDING_VERSION[t]


def _rows(ctx: ExecutionContext, values: np.ndarray, index: np.ndarray) -> None:
    if index.size and (index.min() < 0 or index.max() >= values.shape[0]):
        ctx.fail(f"lookup index out of range [0, {values.shape[0]})")


def execute_embedding_lookup(ctx: ExecutionContext) -> None:
    lookups = ctx.tensor(LOOKUPS)
    values = ctx.tensor(EMB_VALUES)
    if lookups.ndim != 1 or values.ndim < 2:
        ctx.fail("lookups must be 1-D and values of rank >= 2")
    _rows(ctx, values, lookups)
    reserve_shape((lookups.shape[0], *values.shape[1:]), values.itemsize)
    ctx.set_output(OUTPUT, values[lookups.astype(np.intp)])


# -- HASHTABLE_LOOKUP ------------------------------------------------------------------------
KEYS = 1
HT_VALUES = 2
HITS = 1
_HASHTABLE_TYPES = (T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)


def validate_hashtable_lookup(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 2)
    t = v.expect_input_type_in(HT_VALUES, _HASHTABLE_TYPES)
    v.expect_types([T.TENSOR_INT32, T.TENSOR_INT32, t], [t, T.TENSOR_QUANT8_ASYMM])
    expect_vector_input(v, LOOKUPS)
    expect_vector_input(v, KEYS)
    require_same_quant(v, OUTPUT, HT_VALUES)
    return HalVersion.V1_0


def execute_hashtable_lookup(ctx: ExecutionContext) -> None:
    lookups = ctx.tensor(LOOKUPS)
    keys = ctx.tensor(KEYS)
    values = ctx.tensor(HT_VALUES)
    if lookups.ndim != 1 or keys.ndim != 1 or values.ndim < 1:
        ctx.fail("lookups and keys must be 1-D, values of rank >= 1")
    if keys.shape[0] != values.shape[0]:
        ctx.fail(f"{keys.shape[0]} keys for {values.shape[0]} value rows")
    # Keys are sorted ascending (a HAL requirement): binary search each lookup.
    pos = np.searchsorted(keys, lookups)
    safe = np.minimum(pos, max(keys.shape[0] - 1, 0))
    hit = (pos < keys.shape[0]) & (keys[safe] == lookups) if keys.size else np.zeros(lookups.shape, bool)
    reserve_shape((lookups.shape[0], *values.shape[1:]), values.itemsize)
    out = np.zeros((lookups.shape[0], *values.shape[1:]), dtype=values.dtype)
    out[hit] = values[safe[hit]]
    ctx.set_output(OUTPUT, out)
    ctx.set_output(HITS, hit.astype(np.uint8))


# -- LSH_PROJECTION ----------------------------------------------------------------------------
HASH = 0
LSH_INPUT = 1
WEIGHT = 2
LSH_TYPE = 3
SPARSE_DEPRECATED, DENSE, SPARSE = 1, 2, 3
_LSH_INPUT_TYPES = (T.TENSOR_FLOAT16, T.TENSOR_FLOAT32, T.TENSOR_INT32, T.TENSOR_QUANT8_ASYMM)


def _signed64(u: int) -> int:
    return u - (1 << 64) if u >= 1 << 63 else u


def validate_lsh_projection(v: ValidationContext) -> HalVersion:
    v.expect_counts(4, 1)
    hash_type = v.input_type(HASH)
    if hash_type not in FLOAT_TYPES:
        v.fail(f"hash tensor has unsupported type {hash_type.name}")
    t = v.expect_input_type_in(LSH_INPUT, _LSH_INPUT_TYPES)
    v.expect_types([hash_type, t, hash_type, T.INT32], [T.TENSOR_INT32])
    v.expect_rank(HASH, 2)
    rank = v.input_rank(LSH_INPUT)
    v.require(rank is None or rank >= 1, "input must have rank >= 1")
    dims = v.input_dims(HASH)
    if len(dims) == 2:
        v.require(dims[1] <= 32, f"at most 32 bits per hash function, got {dims[1]}")
    version = version_for_types([hash_type, t])
    kind = v.constant_scalar(LSH_TYPE)
    v.require(kind in (None, SPARSE_DEPRECATED, DENSE, SPARSE), f"unknown projection type {kind}")
    if kind == SPARSE:
        version = max(version, HalVersion.V1_2)
    if kind == DENSE:
        v.require(not v.is_omitted(WEIGHT), "dense projection needs a weight tensor")
    if not v.is_omitted(WEIGHT):
        expect_vector_input(v, WEIGHT)
    return version


def execute_lsh_projection(ctx: ExecutionContext) -> None:
    seeds = to_compute(ctx.tensor(HASH))
    x = ctx.tensor(LSH_INPUT)
    weight = ctx.optional(WEIGHT)
    kind = ctx.scalar(LSH_TYPE)
    if seeds.ndim != 2 or seeds.shape[1] > 32 or x.ndim < 1:
        ctx.fail("hash must be [functions, bits <= 32] and input of rank >= 1")
    if kind not in (SPARSE_DEPRECATED, DENSE, SPARSE):
        ctx.fail(f"unknown projection type {kind}")
    if weight is not None and weight.shape != (x.shape[0],):
        ctx.fail(f"weight must have shape [{x.shape[0]}], got {list(weight.shape)}")
    if kind == DENSE and weight is None:
        ctx.fail("dense projection needs a weight tensor")
    rows = [row.tobytes() for row in np.ascontiguousarray(x).reshape(x.shape[0], -1)]
    weights = [1.0] * len(rows) if weight is None else [float(w) for w in weight.astype(np.float64)]
    n_hash, n_bits = seeds.shape
    bits = np.zeros((n_hash, n_bits), dtype=np.int32)
    for i in range(n_hash):
        for j in range(n_bits):
            key = np.float32(seeds[i, j]).tobytes()
            score = 0.0
            for row, w in zip(rows, weights):
                score += w * float(_signed64(fingerprint64(key + row)))
            bits[i, j] = score > 0
    if kind == DENSE:
        ctx.set_output(OUTPUT, bits.reshape(-1))
        return
    signature = np.zeros(n_hash, dtype=np.int64)
    for j in range(n_bits):
        signature = (signature << 1) | bits[:, j]
    if kind == SPARSE:
        signature += np.arange(n_hash, dtype=np.int64) << n_bits
    # The reference accumulates in int32: keep its wrap-around.
    ctx.set_output(OUTPUT, signature.astype(np.uint32).view(np.int32))


# -- RANDOM_MULTINOMIAL ------------------------------------------------------------------------
LOGITS = 0
SAMPLES = 1
SEEDS = 2


def validate_random_multinomial(v: ValidationContext) -> HalVersion:
    v.expect_counts(3, 1)
    t = v.expect_input_type_in(LOGITS, FLOAT_TYPES)
    v.expect_types([t, T.INT32, T.TENSOR_INT32], [T.TENSOR_INT32])
    v.expect_rank(LOGITS, 2)
    expect_vector_input(v, SEEDS)
    samples = v.constant_scalar(SAMPLES)
    v.require(samples is None or samples >= 0, f"sample count must be non-negative, got {samples}")
    return HalVersion.V1_2


def execute_random_multinomial(ctx: ExecutionContext) -> None:
    logits = to_compute(ctx.tensor(LOGITS)).astype(np.float64)
    samples = ctx.scalar(SAMPLES)
    seeds = ctx.tensor(SEEDS)
    if logits.ndim != 2 or samples < 0 or seeds.size < 2:
        ctx.fail("logits must be [batches, classes], samples >= 0 and two seeds given")
    reserve_shape((logits.shape[0], samples), 8, copies=2)
    rng = np.random.default_rng([int(s) & 0xFFFFFFFF for s in seeds.reshape(-1)[:2]])
    finite = np.isfinite(logits)
    peak = np.max(np.where(finite, logits, -np.inf), axis=1, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    weights = np.where(finite, np.exp(logits - peak), 0.0)
    cdf = np.cumsum(weights, axis=1)
    out = np.empty((logits.shape[0], samples), dtype=np.int32)
    for b in range(logits.shape[0]):
        targets = rng.random(samples) * cdf[b, -1] if cdf.shape[1] else np.zeros(samples)
        out[b] = np.searchsorted(cdf[b], targets, side="right")
    ctx.set_output(OUTPUT, out)


# Runtime lookups and hash operands that do not fit are the request's error: INVALID_ARGUMENT.
_register = partial(register, execution_failure=INVALID)
_register(OperationType.EMBEDDING_LOOKUP, validate=validate_embedding_lookup, execute=execute_embedding_lookup)
_register(OperationType.HASHTABLE_LOOKUP, validate=validate_hashtable_lookup, execute=execute_hashtable_lookup)
_register(OperationType.LSH_PROJECTION, validate=validate_lsh_projection, execute=execute_lsh_projection)
_register(OperationType.RANDOM_MULTINOMIAL, validate=validate_random_multinomial, execute=execute_random_multinomial)

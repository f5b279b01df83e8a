"""Lookup and hashing: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION,
RANDOM_MULTINOMIAL.

LSH_PROJECTION must reproduce the reference bit for bit, so it hashes with
FarmHash Fingerprint64 (the "na" variant) over the bytes of (float32 seed,
input row). Its cost is hash functions x bits x rows hashes of a few bytes, so
the hash is written with Python integers rather than vectorised.

RANDOM_MULTINOMIAL draws from the softmax of each row with a generator seeded
from the two seed values: deterministic for given seeds, but not the
reference's Philox stream (the HAL only specifies the distribution).
"""

from __future__ import annotations

import numpy as np

from nnhal.core.enums import HalVersion, OperationType
from nnhal.server.executor.context import ExecutionContext, ValidationContext
from nnhal.server.executor.ops.common import FLOAT_TYPES, T, to_compute, version_for_types
from nnhal.server.executor.ops.shape import OUTPUT, expect_vector_input, fail, require_same_quant
from nnhal.server.executor.registry import register

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
        raise fail(ctx, f"lookup index out of range [0, {values.shape[0]})")


def execute_embedding_lookup(ctx: ExecutionContext) -> None:
    lookups = ctx.tensor(LOOKUPS)
    values = ctx.tensor(EMB_VALUES)
    if lookups.ndim != 1 or values.ndim < 2:
        raise fail(ctx, "lookups must be 1-D and values of rank >= 2")
    _rows(ctx, values, lookups)
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
        raise fail(ctx, "lookups and keys must be 1-D, values of rank >= 1")
    if keys.shape[0] != values.shape[0]:
        raise fail(ctx, f"{keys.shape[0]} keys for {values.shape[0]} value rows")
    # Keys are sorted ascending (a HAL requirement): binary search each lookup.
    pos = np.searchsorted(keys, lookups)
    safe = np.minimum(pos, max(keys.shape[0] - 1, 0))
    hit = (pos < keys.shape[0]) & (keys[safe] == lookups) if keys.size else np.zeros(lookups.shape, bool)
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

_M64 = (1 << 64) - 1
_K0 = 0xC3A5C85C97CB3127
_K1 = 0xB492B66FBE98F273
_K2 = 0x9AE16A3B2F90404F


def _fetch64(s: bytes, i: int) -> int:
    return int.from_bytes(s[i : i + 8], "little")


def _fetch32(s: bytes, i: int) -> int:
    return int.from_bytes(s[i : i + 4], "little")


def _rot(v: int, shift: int) -> int:
    return v if shift == 0 else ((v >> shift) | (v << (64 - shift))) & _M64


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def _len16(u: int, v: int, mul: int) -> int:
    a = ((u ^ v) * mul) & _M64
    a ^= a >> 47
    b = ((v ^ a) * mul) & _M64
    b ^= b >> 47
    return (b * mul) & _M64


def _len0to16(s: bytes) -> int:
    n = len(s)
    if n >= 8:
        mul = _K2 + n * 2
        a = (_fetch64(s, 0) + _K2) & _M64
        b = _fetch64(s, n - 8)
        c = (_rot(b, 37) * mul + a) & _M64
        d = ((_rot(a, 25) + b) * mul) & _M64
        return _len16(c, d, mul)
    if n >= 4:
        mul = _K2 + n * 2
        return _len16((n + (_fetch32(s, 0) << 3)) & _M64, _fetch32(s, n - 4), mul)
    if n > 0:
        y = s[0] + (s[n >> 1] << 8)
        z = n + (s[n - 1] << 2)
        return (_shift_mix(((y * _K2) ^ (z * _K0)) & _M64) * _K2) & _M64
    return _K2


def _len17to32(s: bytes) -> int:
    n = len(s)
    mul = _K2 + n * 2
    a = (_fetch64(s, 0) * _K1) & _M64
    b = _fetch64(s, 8)
    c = (_fetch64(s, n - 8) * mul) & _M64
    d = (_fetch64(s, n - 16) * _K2) & _M64
    return _len16((_rot((a + b) & _M64, 43) + _rot(c, 30) + d) & _M64, (a + _rot((b + _K2) & _M64, 18) + c) & _M64, mul)


def _len33to64(s: bytes) -> int:
    n = len(s)
    mul = _K2 + n * 2
    a = (_fetch64(s, 0) * _K2) & _M64
    b = _fetch64(s, 8)
    c = (_fetch64(s, n - 8) * mul) & _M64
    d = (_fetch64(s, n - 16) * _K2) & _M64
    y = (_rot((a + b) & _M64, 43) + _rot(c, 30) + d) & _M64
    z = _len16(y, (a + _rot((b + _K2) & _M64, 18) + c) & _M64, mul)
    e = (_fetch64(s, 16) * mul) & _M64
    f = _fetch64(s, 24)
    g = ((y + _fetch64(s, n - 32)) * mul) & _M64
    h = ((z + _fetch64(s, n - 24)) * mul) & _M64
    return _len16((_rot((e + f) & _M64, 43) + _rot(g, 30) + h) & _M64, (e + _rot((f + a) & _M64, 18) + g) & _M64, mul)


def _weak32(s: bytes, i: int, a: int, b: int) -> tuple[int, int]:
    w, x, y, z = (_fetch64(s, i + 8 * k) for k in range(4))
    a = (a + w) & _M64
    b = _rot((b + a + z) & _M64, 21)
    c = a
    a = (a + x + y) & _M64
    b = (b + _rot(a, 44)) & _M64
    return (a + z) & _M64, (b + c) & _M64


def fingerprint64(s: bytes) -> int:
    """FarmHash Fingerprint64 (farmhashna::Hash64) of ``s`` as an unsigned 64-bit value."""
    n = len(s)
    if n <= 16:
        return _len0to16(s)
    if n <= 32:
        return _len17to32(s)
    if n <= 64:
        return _len33to64(s)
    seed = 81
    x = seed
    y = (seed * _K1 + 113) & _M64
    z = (_shift_mix((y * _K2 + 113) & _M64) * _K2) & _M64
    v = (0, 0)
    w = (0, 0)
    x = (x * _K2 + _fetch64(s, 0)) & _M64
    end = ((n - 1) // 64) * 64
    last64 = n - 64
    p = 0
    while True:
        x = (_rot((x + y + v[0] + _fetch64(s, p + 8)) & _M64, 37) * _K1) & _M64
        y = (_rot((y + v[1] + _fetch64(s, p + 48)) & _M64, 42) * _K1) & _M64
        x ^= w[1]
        y = (y + v[0] + _fetch64(s, p + 40)) & _M64
        z = (_rot((z + w[0]) & _M64, 33) * _K1) & _M64
        v = _weak32(s, p, (v[1] * _K1) & _M64, (x + w[0]) & _M64)
        w = _weak32(s, p + 32, (z + w[1]) & _M64, (y + _fetch64(s, p + 16)) & _M64)
        z, x = x, z
        p += 64
        if p == end:
            break
    mul = _K1 + ((z & 0xFF) << 1)
    p = last64
    w0 = (w[0] + ((n - 1) & 63)) & _M64
    v0 = (v[0] + w0) & _M64
    w0 = (w0 + v0) & _M64
    v, w = (v0, v[1]), (w0, w[1])
    x = (_rot((x + y + v[0] + _fetch64(s, p + 8)) & _M64, 37) * mul) & _M64
    y = (_rot((y + v[1] + _fetch64(s, p + 48)) & _M64, 42) * mul) & _M64
    x ^= (w[1] * 9) & _M64
    y = (y + v[0] * 9 + _fetch64(s, p + 40)) & _M64
    z = (_rot((z + w[0]) & _M64, 33) * mul) & _M64
    v = _weak32(s, p, (v[1] * mul) & _M64, (x + w[0]) & _M64)
    w = _weak32(s, p + 32, (z + w[1]) & _M64, (y + _fetch64(s, p + 16)) & _M64)
    z, x = x, z
    return _len16((_len16(v[0], w[0], mul) + _shift_mix(y) * _K0 + z) & _M64, (_len16(v[1], w[1], mul) + x) & _M64, mul)


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
        raise fail(ctx, "hash must be [functions, bits <= 32] and input of rank >= 1")
    if kind not in (SPARSE_DEPRECATED, DENSE, SPARSE):
        raise fail(ctx, f"unknown projection type {kind}")
    if weight is not None and weight.shape != (x.shape[0],):
        raise fail(ctx, f"weight must have shape [{x.shape[0]}], got {list(weight.shape)}")
    if kind == DENSE and weight is None:
        raise fail(ctx, "dense projection needs a weight tensor")
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
        raise fail(ctx, "logits must be [batches, classes], samples >= 0 and two seeds given")
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


register(OperationType.EMBEDDING_LOOKUP, validate=validate_embedding_lookup, execute=execute_embedding_lookup)
register(OperationType.HASHTABLE_LOOKUP, validate=validate_hashtable_lookup, execute=execute_hashtable_lookup)
register(OperationType.LSH_PROJECTION, validate=validate_lsh_projection, execute=execute_lsh_projection)
register(OperationType.RANDOM_MULTINOMIAL, validate=validate_random_multinomial, execute=execute_random_multinomial)

"""Versioned NN HAL types (V1_0 .. V1_3) and their conversions to and from canonical.

``V1_0`` .. ``V1_3`` are the modules holding each version's types as they differ
from the canonical ones (``nnhal.core.types`` / ``nnhal.core.enums``); types a
version shares with an older one are re-exported from it.

Semantics (``shared/seeds/002``, the AOSP NN HAL utils' conversions):

- ``convert(value, to=V1_x)``: canonical -> versioned. Validates the value, then
  fails with ``ConversionError`` (a ``GeneralFailure``, status GENERAL_FAILURE, as
  the utils' ``NN_ERROR()``) when it has no representation in the target: a 1.3
  operation such as HARD_SWISH to V1_0, TENSOR_QUANT8_ASYMM_SIGNED to V1_2, a model
  with referenced subgraphs to V1_2, a token pool to V1_2, a Priority to V1_2...
  The result, when there is one, is valid in the target version.
- Lossy where the utils are lossy: an ErrorStatus a version lacks becomes
  GENERAL_FAILURE (MISSED_DEADLINE_TRANSIENT -> V1_0 GENERAL_FAILURE; DEAD_OBJECT ->
  GENERAL_FAILURE everywhere); capabilities keep only what the version has.
- ``to_canonical(versioned)`` is lossless: ``convert(to_canonical(x), to=version of x) == x``.
- ``unvalidated_convert`` skips the validation but still refuses unrepresentable
  values; prefer ``convert``. ``min_version`` is the oldest version a value fits.
"""

from __future__ import annotations

from nnhal.core.versions import v1_0 as V1_0, v1_1 as V1_1, v1_2 as V1_2, v1_3 as V1_3
from nnhal.core.versions._conversions import (
    CANONICAL_ENUM,
    ENUMS,
    LOSSY_FALLBACK,
    MODULES,
    NO_PERFORMANCE,
    ConversionError,
    convert,
    min_version,
    to_canonical,
    unvalidated_convert,
    validate,
    version_of,
)

__all__ = [
    "CANONICAL_ENUM",
    "ENUMS",
    "LOSSY_FALLBACK",
    "MODULES",
    "NO_PERFORMANCE",
    "V1_0",
    "V1_1",
    "V1_2",
    "V1_3",
    "ConversionError",
    "convert",
    "min_version",
    "to_canonical",
    "unvalidated_convert",
    "validate",
    "version_of",
]

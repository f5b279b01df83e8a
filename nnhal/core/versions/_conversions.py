"""Canonical <-> versioned (V1_0..V1_3) conversions, following the AOSP NN HAL utils
(``shared/seeds/002``): ``convert`` to an older version fails when a value has no
representation there; error codes convert lossily; versioned -> canonical ->
versioned is lossless.

This module holds the public entry points and validation. Dispatch is by tables
(``_tables``: enum class -> versioned enum class per version, and the version that
introduced each Model / Request feature); the converters themselves are in
``_to_versioned`` and ``_to_canonical``, one table from value type to converter each.
Every public name of those modules is importable from here, as it always was.
"""

from __future__ import annotations

import enum
from types import ModuleType
from typing import Any

from nnhal.core import types as ct
from nnhal.core.enums import HalVersion
from nnhal.core.errors import HalError
from nnhal.core.validation import OperationValidator, validate_model

# The tables were defined here before they moved to _tables: their names stay importable
# from this module (the ``X as X`` form marks them as re-exported).
from nnhal.core.versions._tables import (
    CANONICAL_ENUM as CANONICAL_ENUM,
    ENUMS as ENUMS,
    LOSSY_FALLBACK as LOSSY_FALLBACK,
    MODULES as MODULES,
    NO_PERFORMANCE as NO_PERFORMANCE,
    ConversionError as ConversionError,
    V,
)
from nnhal.core.versions._to_canonical import TO_CANONICAL, enum_from
from nnhal.core.versions._to_versioned import TO_VERSIONED, enum_to

# ---------------------------------------------------------------- validation


def _pool_sizes(model: ct.Model) -> list[int | None]:
    return [p.size if isinstance(p, (ct.InlinePool, ct.SharedMemoryPool)) else None for p in model.pools]


def validate(value: Any, operation_validator: OperationValidator | None = None) -> HalVersion:
    """Validate a canonical value (models structurally, with the optional per-operation
    validator); returns the minimum version its content needs. Raises ConversionError."""
    if not isinstance(value, ct.Model):
        return V.V1_0
    try:
        return validate_model(value, _pool_sizes(value), operation_validator)
    except HalError as err:
        raise ConversionError(f"invalid Model: {err.message}") from err


# ---------------------------------------------------------------- public entry points


def version_of(to: HalVersion | ModuleType) -> HalVersion:
    """``HalVersion`` of ``to`` (a HalVersion or one of the V1_x modules)."""
    if isinstance(to, HalVersion):
        return to
    version = getattr(to, "VERSION", None)
    if not isinstance(version, HalVersion):
        raise TypeError(f"{to!r} is not an NN HAL version")
    return version


def unvalidated_convert(value: Any, to: HalVersion | ModuleType) -> Any:
    """Canonical -> version ``to`` without validating the value first.

    Still raises ConversionError when a field has no representation in ``to``."""
    version = version_of(to)
    if isinstance(value, enum.IntEnum):
        return enum_to(value, version)
    if isinstance(value, (tuple, list)):
        return tuple(unvalidated_convert(v, version) for v in value)
    fn = TO_VERSIONED.get(type(value))
    if fn is None:
        raise ConversionError(f"{type(value).__qualname__} is not a canonical NN HAL type")
    return fn(value, version)


def convert(value: Any, to: HalVersion | ModuleType, *, operation_validator: OperationValidator | None = None) -> Any:
    """Canonical ``value`` -> the same value in version ``to`` (``V1_0`` .. ``V1_3``; an AIDL
    level returns the canonical value itself once its content fits the level).

    Validates first (models: structure, plus ``operation_validator`` when given, whose
    minimum versions must not exceed ``to``). Raises ConversionError (GENERAL_FAILURE)
    when the value is invalid or has no representation in ``to``. ErrorStatus converts
    lossily (codes a version lacks become GENERAL_FAILURE)."""
    version = version_of(to)
    needed = validate(value, operation_validator)
    if version.is_aidl:
        # The canonical types are the AIDL types (every AIDL level has every canonical
        # field): only the content's level can be too new.
        if needed > version:
            raise ConversionError(f"the value needs NN HAL {needed.label}; cannot convert to NN HAL {version.label}")
        return value
    result = unvalidated_convert(value, version)  # names the field without a representation, if any
    if needed > version:
        raise ConversionError(f"the value needs NN HAL {needed.label}; cannot convert to NN HAL {version.label}")
    return result


def to_canonical(value: Any, *, validate_result: bool = True) -> Any:
    """Versioned ``value`` (any V1_x type) -> canonical. Lossless: converting the result
    back to the value's version gives ``value``. Raises ConversionError when the value
    is invalid (e.g. a 1.3 enum inside a V1_0 Model, a token pool in a V1_0 Request)."""
    if isinstance(value, enum.IntEnum):
        return enum_from(value)
    if isinstance(value, (tuple, list)):
        return tuple(to_canonical(v, validate_result=validate_result) for v in value)
    fn = TO_CANONICAL.get(type(value))
    if fn is None:
        raise ConversionError(f"{type(value).__qualname__} is not a versioned NN HAL type")
    result = fn(value)
    if validate_result:
        validate(result)
    return result


def min_version(value: Any, operation_validator: OperationValidator | None = None) -> HalVersion:
    """The oldest version that can represent canonical ``value``; ConversionError if none."""
    needed = validate(value, operation_validator)
    errors: list[str] = []
    for version in V:
        if version < needed:
            continue
        if version.is_aidl:
            return version  # the canonical types are the AIDL types (see ``convert``)
        try:
            unvalidated_convert(value, version)
        except ConversionError as err:
            errors.append(err.message)
            continue
        return version
    raise ConversionError(errors[-1] if errors else "no NN HAL version can represent the value")

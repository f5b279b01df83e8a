"""Vendor extensions (HAL 1.2 ``Extension``, ``Model.extensionNameToPrefix``; AIDL
``ExtensionNameAndPrefix``) through the same registry as the built-in operations.

An extension is a name (reverse domain, e.g. ``com.example.nnhal``), operand types and
operations, each numbered within the extension (the low 16 bits of a type). ``install``
gives it this process's prefix, registers its operand types with the core's type tables
and its operations, with their validate / prepare / execute, in the operation registry —
from then on an operation of the extension is an ordinary registry entry.

A model names its extensions with prefixes of its own choosing. ``localize`` renumbers a
model's extension types to this process's prefixes for the extensions a device enables;
an extension the device does not enable (or nobody installed) gets a prefix nothing is
registered under, so its operations are unsupported in getSupportedOperations and
INVALID_ARGUMENT at preparation, as the HAL has it for a driver lacking an extension. A
model using a prefix its extensionNameToPrefix does not map is INVALID_ARGUMENT.

Not thread-safe for installation: install extensions at start-up, before serving.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

import numpy as np

from nnhal.core.enums import (
    EXTENSION_TYPE_LOW_BITS,
    OperandType,
    OperationType,
    extension_prefix,
    extension_type,
    is_extension_type,
)
from nnhal.core.operand_types import register_extension_operand_type
from nnhal.core.types import Extension, ExtensionNameAndPrefix, ExtensionOperandTypeInformation, Model, Subgraph
from nnhal.core.validation import check_extension_prefixes
from nnhal.server.executor.registry import Kernel, Preparer, Validator, register

_LOW_MASK = (1 << EXTENSION_TYPE_LOW_BITS) - 1
#: Prefixes from here down are given to extensions a model names but this device lacks.
_UNKNOWN_FIRST = 0xFFFF


@dataclass(frozen=True)
class ExtensionOperandType:
    """An operand type of an extension: its number within the extension and element layout."""

    type: int
    dtype: np.dtype
    is_tensor: bool


@dataclass(frozen=True)
class ExtensionOperation:
    """An operation of an extension, with the registry's three functions."""

    type: int
    validate: Validator
    execute: Kernel
    prepare: Preparer | None = None


@dataclass(frozen=True)
class ExtensionDefinition:
    name: str
    operand_types: tuple[ExtensionOperandType, ...] = ()
    operations: tuple[ExtensionOperation, ...] = ()


_INSTALLED: dict[str, tuple[int, ExtensionDefinition]] = {}


def install(definition: ExtensionDefinition) -> int:
    """Register ``definition`` in this process (once; again is a no-op); returns its prefix."""
    if definition.name in _INSTALLED:
        return _INSTALLED[definition.name][0]
    if "." not in definition.name:
        raise ValueError(f"extension name {definition.name!r} must start with a reverse domain name")
    prefix = len(_INSTALLED) + 1
    for t in definition.operand_types:
        register_extension_operand_type(extension_type(prefix, t.type), t.dtype, t.is_tensor)
    for op in definition.operations:
        register(
            OperationType(extension_type(prefix, op.type)), validate=op.validate, execute=op.execute, prepare=op.prepare
        )
    _INSTALLED[definition.name] = (prefix, definition)
    return prefix


def prefix_of(name: str) -> int | None:
    """This process's prefix for an installed extension."""
    entry = _INSTALLED.get(name)
    return None if entry is None else entry[0]


def describe(names: Sequence[str]) -> tuple[Extension, ...]:
    """getSupportedExtensions for a device enabling ``names`` (each installed)."""
    out = []
    for name in names:
        _, d = _INSTALLED[name]
        infos = tuple(
            ExtensionOperandTypeInformation(t.type, t.is_tensor, int(np.dtype(t.dtype).itemsize))
            for t in d.operand_types
        )
        out.append(Extension(name, infos))
    return tuple(out)


def localize(model: Model, enabled: Collection[str]) -> Model:
    """``model`` with its extension types renumbered to this process's prefixes (see the module
    docstring). INVALID_ARGUMENT when the model's own prefixes are inconsistent."""
    if not model.extension_name_to_prefix:
        return model
    check_extension_prefixes(model)
    mapping: dict[int, int] = {}
    unknown = _UNKNOWN_FIRST
    for e in model.extension_name_to_prefix:
        local = prefix_of(e.name) if e.name in enabled else None
        if local is None:
            local, unknown = unknown, unknown - 1
        mapping[e.prefix] = local

    def renumber(t: int) -> int:
        return extension_type(mapping[extension_prefix(t)], t & _LOW_MASK) if is_extension_type(t) else t

    def subgraph(sg: Subgraph) -> Subgraph:
        operands = tuple(replace(op, type=OperandType(renumber(op.type))) for op in sg.operands)
        operations = tuple(replace(op, type=OperationType(renumber(op.type))) for op in sg.operations)
        return replace(sg, operands=operands, operations=operations)

    return replace(
        model,
        main=subgraph(model.main),
        referenced=tuple(subgraph(sg) for sg in model.referenced),
        extension_name_to_prefix=tuple(
            ExtensionNameAndPrefix(e.name, mapping[e.prefix]) for e in model.extension_name_to_prefix
        ),
    )

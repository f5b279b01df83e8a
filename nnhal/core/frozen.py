"""Frozen slotted dataclasses built at the cost of plain ones: :func:`slot_init`.

A frozen dataclass's ``__init__`` stores each field through ``object.__setattr__`` (its own
``__setattr__`` refuses); from Python that call goes through the type's attribute look-up and
makes two argument tuples per field. A slotted class has a descriptor per field whose
``__set__`` stores it directly: :func:`slot_init` gives the class an ``__init__`` that stores
each field through it. The class stays what ``@dataclass`` made it (frozen: assignment still
raises ``FrozenInstanceError``; the same fields, signature, defaults, equality, hash,
``replace`` and pickling).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

T = TypeVar("T")


def slot_init(cls: type[T]) -> type[T]:
    """``cls`` (a frozen slotted dataclass: apply above ``@dataclass(frozen=True, slots=True)``)
    with an ``__init__`` of the same signature — the fields in order, each with its default or
    default factory — that stores every field through its slot's descriptor. Raises TypeError
    for a class this cannot serve (not a frozen slotted dataclass, a field out of ``__init__``,
    keyword-only fields, a ``__post_init__``, init-only variables)."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__qualname__}: slot_init serves frozen slotted dataclasses")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__qualname__}: slot_init does not run __post_init__")
    every = cls.__dict__["__dataclass_fields__"]
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if len(fields) != len(every) or any(not f.init or f.kw_only for f in fields):
        raise TypeError(f"{cls.__qualname__}: slot_init serves fields that are all positional in __init__")
    defaults = inspect.signature(cls.__init__).parameters
    names: dict[str, Any] = {}
    args: list[str] = []
    body: list[str] = []
    for k, f in enumerate(fields):
        setter = f"_set{k}"
        names[setter] = cls.__dict__[f.name].__set__  # the slot's member descriptor
        if f.default is not dataclasses.MISSING:
            names[f"_default{k}"] = f.default
            args.append(f"{f.name}=_default{k}")
            body.append(f"    {setter}(self, {f.name})")
        elif f.default_factory is not dataclasses.MISSING:
            # As dataclasses does (its own sentinel default): the factory called when it is left.
            names[f"_factory{k}"] = f.default_factory
            names[f"_unset{k}"] = defaults[f.name].default
            args.append(f"{f.name}=_unset{k}")
            body.append(f"    {setter}(self, _factory{k}() if {f.name} is _unset{k} else {f.name})")
        else:
            args.append(f.name)
            body.append(f"    {setter}(self, {f.name})")
    source = f"def __init__(self, {', '.join(args)}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, names)  # the source is made above from the class's own field names, as dataclasses does
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = cls.__init__.__doc__
    init.__annotations__ = dict(cls.__init__.__annotations__)
    cls.__init__ = init  # type: ignore[method-assign]
    return cls

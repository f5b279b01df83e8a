"""slot_init: a frozen slotted dataclass built through its slots stays what @dataclass made it."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field

import pytest

from nnhal.core import types
from nnhal.core.frozen import slot_init
from nnhal.core.types import DataLocation, ExecutionResult, RequestArgument


@dataclass(frozen=True, slots=True)
class _Plain:
    a: int
    b: str = "x"
    c: dict[int, int] = field(default_factory=dict)


@slot_init
@dataclass(frozen=True, slots=True)
class _Lean:
    a: int
    b: str = "x"
    c: dict[int, int] = field(default_factory=dict)


def test_same_signature_as_the_dataclass_init() -> None:
    plain = inspect.signature(_Plain.__init__).parameters
    lean = inspect.signature(_Lean.__init__).parameters
    assert list(plain) == list(lean)
    assert [p.default for p in plain.values()] == [p.default for p in lean.values()]
    assert _Lean.__init__.__qualname__ == "_Lean.__init__"


def test_fields_defaults_and_a_fresh_factory_value() -> None:
    one, two = _Lean(1), _Lean(2, "y", {3: 4})
    assert (one.a, one.b, one.c) == (1, "x", {})
    assert (two.a, two.b, two.c) == (2, "y", {3: 4})
    assert _Lean(a=5, c={}).a == 5
    assert one.c is not _Lean(1).c  # a new dict per instance, as the factory's
    with pytest.raises(TypeError):
        _Lean()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Lean(1, "x", {}, 4)  # type: ignore[call-arg]


def test_still_frozen_equal_hashable_replaceable_and_picklable() -> None:
    value = _Lean(1, "y")
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.a = 2  # type: ignore[misc]
    assert value == _Lean(1, "y") and value != _Lean(1, "z")
    assert hash(DataLocation(1, 2, 3)) == hash(DataLocation(1, 2, 3))
    assert dataclasses.replace(value, a=3) == _Lean(3, "y")
    assert pickle.loads(pickle.dumps(value)) == value


def test_every_slotted_canonical_type_is_built_through_its_slots() -> None:
    for cls in vars(types).values():
        # ExecutionResult: its own written __init__ (through its slots' setters as well).
        if cls is ExecutionResult:
            continue
        if dataclasses.is_dataclass(cls) and isinstance(cls, type) and "__slots__" in cls.__dict__:
            assert "<string>" in cls.__init__.__code__.co_filename
            assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"
    assert RequestArgument(location=DataLocation(0, 4, 8)).location == DataLocation(0, 4, 8)
    assert ExecutionResult().output_pools == {} and ExecutionResult().output_pools is not ExecutionResult().output_pools


def test_refuses_what_it_cannot_serve() -> None:
    @dataclass(slots=True)
    class Mutable:
        a: int

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclass(frozen=True, slots=True)
    class KeywordOnly:
        a: int = field(kw_only=True)

    @dataclass(frozen=True, slots=True)
    class Later:
        a: int

        def __post_init__(self) -> None:
            pass

    for cls in (Mutable, NoSlots, KeywordOnly, Later):
        with pytest.raises(TypeError):
            slot_init(cls)

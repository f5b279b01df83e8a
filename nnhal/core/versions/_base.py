"""Helpers shared by the versioned type modules (``v1_0`` ... ``v1_3``): building a
version's enum from the canonical one, so each version holds exactly the members it
introduced or inherited, under the HAL's names and numbers."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from nnhal.core.enums import HalVersion


def subset_enum(
    name: str,
    canonical: type[enum.IntEnum],
    introduced: Mapping[Any, HalVersion],
    version: HalVersion,
    module: str,
) -> type[enum.IntEnum]:
    """An IntEnum holding the members of ``canonical`` that ``version`` already had.

    Names and numbers are the HAL's (the canonical enums are numbered as in
    ``types.hal``), so a versioned value and its canonical twin share a number.
    """
    members = [(m.name, m.value) for m in canonical if introduced[m] <= version]
    cls = enum.IntEnum(name, members, module=module)  # type: ignore[misc]
    cls.__qualname__ = name
    return cls

"""Canonical values of the AIDL NN HAL surface (V1-V4) beyond the 1.3 types, and their rules.

- ``TokenValuePair`` hints (``PrepareModelConfig.compilationHints``,
  ``ExecutionConfig.executionHints``): a token is the extension prefix in the high 15
  bits and the hint in the low 16, sign bit 0. ``accepted_hints`` validates them as
  the AIDL says: a negative token or a token given twice is INVALID_ARGUMENT, as is an
  ``extensionNameToPrefix`` naming one extension or prefix twice; hints of extensions
  the device does not support (or whose prefix the mapping lacks) are ignored.
- ``ExecutionConfig`` / ``PrepareModelConfig``: the V4 configuration parcelables.
- ``TimingNs``: AIDL Timing, nanoseconds, -1 when not available; canonical ``Timing``
  is microseconds with ``NO_TIMING`` (1.2/1.3), and the two convert both ways.
- Optional durations (loop timeouts, fenced durations): -1 or None means "omitted",
  other negative values are INVALID_ARGUMENT (``optional_duration``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nnhal.core.enums import EXTENSION_TYPE_LOW_BITS, LOOP_TIMEOUT_MAXIMUM_NS, ExecutionPreference, Priority
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import NO_TIMING, ExtensionNameAndPrefix, Timing

#: AIDL's "not available" timing and "omitted" duration.
UNAVAILABLE = -1


@dataclass(frozen=True, slots=True)
class TokenValuePair:
    token: int
    value: bytes = b""

    @property
    def prefix(self) -> int:
        """The extension prefix (the high bits); 0 for no extension."""
        return self.token >> EXTENSION_TYPE_LOW_BITS


@dataclass(frozen=True, slots=True)
class ExecutionConfig:
    """AIDL ExecutionConfig. ``loop_timeout_duration_ns`` None: the default (2 s)."""

    measure_timing: bool = False
    loop_timeout_duration_ns: int | None = None
    execution_hints: tuple[TokenValuePair, ...] = ()
    extension_name_to_prefix: tuple[ExtensionNameAndPrefix, ...] = ()


@dataclass(frozen=True, slots=True)
class PrepareModelConfig:
    """AIDL PrepareModelConfig; the deadline travels as the time remaining (``timeout``)."""

    preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER
    priority: Priority = Priority.MEDIUM
    cache_token: bytes = b""
    compilation_hints: tuple[TokenValuePair, ...] = ()
    extension_name_to_prefix: tuple[ExtensionNameAndPrefix, ...] = ()


#: The defaults (frozen values, safe to share as argument defaults).
DEFAULT_EXECUTION_CONFIG = ExecutionConfig()
DEFAULT_PREPARE_CONFIG = PrepareModelConfig()


@dataclass(frozen=True, slots=True)
class TimingNs:
    """AIDL Timing: nanoseconds, ``UNAVAILABLE`` (-1) when not measured."""

    time_on_device_ns: int = UNAVAILABLE
    time_in_driver_ns: int = UNAVAILABLE

    @classmethod
    def of(cls, timing: Timing) -> TimingNs:
        def ns(us: int) -> int:
            return UNAVAILABLE if us == NO_TIMING else us * 1000

        return cls(ns(timing.time_on_device), ns(timing.time_in_driver))

    def canonical(self) -> Timing:
        def us(ns: int) -> int:
            return NO_TIMING if ns < 0 else ns // 1000

        return Timing(us(self.time_on_device_ns), us(self.time_in_driver_ns))


def optional_duration(value: int | None, what: str) -> int | None:
    """None for omitted (None or -1); INVALID_ARGUMENT for other negative values."""
    if value is None or value == UNAVAILABLE:
        return None
    if value < 0:
        raise InvalidArgument(f"{what} is {value}: use -1 to omit it; other negative values are invalid")
    return value


def loop_timeout_for_driver(value: int | None) -> int:
    """An AIDL loop timeout as the driver takes it (0 = the default; at most 15 s):
    omitted -> 0; 0 ns stays "no time at all" (1 ns, as the driver reads 0 as the default)."""
    duration = optional_duration(value, "loopTimeoutDurationNs")
    if duration is None:
        return 0
    return max(1, min(duration, LOOP_TIMEOUT_MAXIMUM_NS))


def check_extension_names(mapping: Sequence[ExtensionNameAndPrefix], where: str) -> None:
    """INVALID_ARGUMENT when ``extensionNameToPrefix`` names one extension or prefix twice."""
    names = [e.name for e in mapping]
    prefixes = [e.prefix for e in mapping]
    if len(set(names)) != len(names):
        raise InvalidArgument(f"{where}: extensionNameToPrefix names an extension twice")
    if len(set(prefixes)) != len(prefixes):
        raise InvalidArgument(f"{where}: extensionNameToPrefix gives one prefix to two extensions")


def accepted_hints(
    hints: Sequence[TokenValuePair],
    mapping: Sequence[ExtensionNameAndPrefix],
    supported_extensions: Iterable[str],
    where: str,
) -> tuple[TokenValuePair, ...]:
    """The hints a device supporting ``supported_extensions`` may use, after the AIDL checks
    (module docstring): INVALID_ARGUMENT for a negative or repeated token or a bad mapping;
    hints of unsupported or unmapped extensions are ignored (left out)."""
    check_extension_names(mapping, where)
    seen: set[int] = set()
    for hint in hints:
        if hint.token < 0:
            raise InvalidArgument(f"{where}: hint token {hint.token} has its sign bit set")
        if hint.token in seen:
            raise InvalidArgument(f"{where}: hint token {hint.token:#x} is given twice")
        seen.add(hint.token)
    by_prefix = {e.prefix: e.name for e in mapping}
    supported = set(supported_extensions)
    return tuple(h for h in hints if by_prefix.get(h.prefix) in supported)

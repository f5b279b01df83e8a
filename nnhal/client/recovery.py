"""Recovery: the recover-once-under-a-lock state both resilient wrappers share (AOSP ``protect``).

``Recoverer`` holds the current object and replaces it once per death: one caller
recovers under a lock, an identity check makes the callers that queued behind it
reuse what it obtained, and callers that queued behind a *failed* attempt share
its error instead of repeating it. Lock order: ``_recovery_lock``, then
``_state_lock`` (never the other way); reading the current object never waits
for a recovery in progress. The rule itself (:class:`RecoveryState`, :func:`protected`)
is shared with the asyncio wrappers (:class:`AsyncRecoverer`, ``nnhal.client.aio.resilient``),
and so is the device replacement rule (:func:`replacement`: a device that comes back
different becomes the :class:`~nnhal.client.invalid_device.InvalidDevice` null object).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from nnhal.client.callbacks import Callback
from nnhal.client.invalid_device import InvalidDevice
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, HalError

log = logging.getLogger(__name__)


class Releasable(Protocol):
    def release(self) -> None: ...


V = TypeVar("V", bound=Releasable)
T = TypeVar("T")


def dead_after_failed_recovery(err: DeadObject, what: str, recovery: HalError) -> DeadObject:
    return DeadObject(
        f"{err.message}, and failed to recover dead {what} with error {recovery.error_status.name}: {recovery.message}"
    )


class RecoveryState(Generic[T]):
    """The recover-once rule without its locks (each client's recoverer holds them): the
    current object, the finished attempts, the last failed one. Its caller serialises
    ``before`` … ``succeeded`` / ``failed`` per recovery."""

    def __init__(self, current: T) -> None:
        self.current = current
        self.attempts = 0
        self.recoveries = 0
        self._last_failure: tuple[T, HalError] | None = None

    def before(self, failing: T, seen_attempts: int) -> T | None:
        """What a caller that saw ``failing`` (after ``seen_attempts``) gets without
        recovering: the object another caller recovered, or that caller's failure raised;
        None: recover now."""
        if self.current is not failing:
            return self.current  # another caller already recovered
        if self.attempts != seen_attempts and self._last_failure is not None:
            obj, error = self._last_failure
            if obj is failing:
                # An attempt that began after we saw the object failed: share its error.
                raise HalError.of(error.error_status, error.message)
        return None

    def failed(self, failing: T, err: HalError) -> None:
        self.attempts += 1
        self._last_failure = (failing, err)

    def succeeded(self, replacement: T) -> None:
        self.attempts += 1
        self._last_failure = None
        self.current = replacement
        self.recoveries += 1


class Recoverer(Generic[T]):
    """Holds the current object; replaces it once per death, under a lock, with an identity check.

    Reading the current object never waits for a recovery in progress.
    ``attempts`` counts finished recovery attempts: a caller that saw the object
    before an attempt finished and failed gets that attempt's error at once
    instead of repeating it."""

    def __init__(self, current: T, make: Callable[[T], T]) -> None:
        # Lock order: _recovery_lock, then _state_lock (never the other way).
        self._recovery_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._state = RecoveryState(current)
        self._make = make

    @property
    def recoveries(self) -> int:
        return self._state.recoveries

    @property
    def current(self) -> T:
        with self._state_lock:
            return self._state.current

    def snapshot(self) -> tuple[T, int]:
        with self._state_lock:
            return self._state.current, self._state.attempts

    def recover(self, failing: T, seen_attempts: int) -> T:
        with self._recovery_lock:
            with self._state_lock:
                known = self._state.before(failing, seen_attempts)
            if known is not None:
                return known
            try:
                replacement = self._make(failing)
            except HalError as err:
                with self._state_lock:
                    self._state.failed(failing, err)
                raise
            with self._state_lock:
                self._state.succeeded(replacement)
            return replacement


class AsyncRecoverer(Generic[T]):
    """The asyncio :class:`Recoverer`: one recovery at a time (an ``asyncio.Lock``); the state
    needs no lock of its own on one event loop."""

    def __init__(self, current: T, make: Callable[[T], Awaitable[T]]) -> None:
        self._lock = asyncio.Lock()
        self._state = RecoveryState(current)
        self._make = make

    @property
    def recoveries(self) -> int:
        return self._state.recoveries

    @property
    def current(self) -> T:
        return self._state.current

    def snapshot(self) -> tuple[T, int]:
        return self._state.current, self._state.attempts

    async def recover(self, failing: T, seen_attempts: int) -> T:
        async with self._lock:
            known = self._state.before(failing, seen_attempts)
            if known is not None:
                return known
            try:
                replacement = await self._make(failing)
            except HalError as err:
                self._state.failed(failing, err)
                raise
            self._state.succeeded(replacement)
            return replacement


@dataclass(frozen=True)
class Attempt:
    """A step of :func:`protected`: run the call on ``target``, answered by its result."""

    target: Any


@dataclass(frozen=True)
class Recover:
    """A step of :func:`protected`: ``recoverer.recover(failing, attempts)``, answered by the
    replacement (its HalError thrown back)."""

    failing: Any
    attempts: int


R = TypeVar("R")


def protected(
    target: Any, attempts: int, what: str, dead: Callable[[Any], bool] | None = None
) -> Generator[Attempt | Recover, Any, Any]:
    """The AOSP ``protect`` rule, for either client: run the call; on DEAD_OBJECT (raised, or
    in-band when ``dead(result)``) recover and run it once more. A failed recovery raises
    DEAD_OBJECT with the recovery error appended; an in-band result comes back as it was,
    the recovery error appended to its message."""
    try:
        result = yield Attempt(target)
    except DeadObject as err:
        try:
            target = yield Recover(target, attempts)
        except HalError as recovery:
            raise dead_after_failed_recovery(err, what, recovery) from recovery
        return (yield Attempt(target))
    if dead is None or not dead(result):
        return result
    try:
        target = yield Recover(target, attempts)
    except HalError as recovery:
        result.message += (
            f", and failed to recover dead {what} with error {recovery.error_status.name}: {recovery.message}"
        )
        return result
    return (yield Attempt(target))


@dataclass(frozen=True)
class Connect:
    """A step of :func:`replacement`: connect a fresh device (the wrapper's factory), answered by it."""


@dataclass(frozen=True)
class Describe:
    """A step of :func:`replacement`: ``device``'s metadata as the wrapper keeps them (name,
    version string, feature level, type, extensions, capabilities), answered by that tuple."""

    device: Any


@dataclass(frozen=True)
class Close:
    """A step of :func:`replacement`: close ``device``; ``quiet``: an error doing so is dropped
    (a dead device's channel may already be gone)."""

    device: Any
    quiet: bool = False


def replacement(
    failing: Any, metadata: tuple[Any, ...], cache_files: tuple[int, int]
) -> Generator[Connect | Describe | Close, Any, tuple[Any, bool]]:
    """The device that replaces ``failing`` after its death, for either client's wrapper, and
    whether it is valid: a fresh connection whose metadata equal the original's ``metadata``;
    one that differs is closed and replaced by an ``InvalidDevice`` answering the original's
    metadata (every other call GENERAL_FAILURE). A HalError connecting or describing is raised
    (the fresh device closed). ``failing`` is closed once replaced."""
    device = yield Connect()
    try:
        same = (yield Describe(device)) == metadata
    except HalError:
        yield Close(device)
        raise
    valid = same
    if not same:
        name, version, _, kind, extensions, caps = metadata
        log.error("the recovered device %r differs from the original; marking it invalid", name)
        yield Close(device)
        device = InvalidDevice(name, version, failing.feature_level, kind, extensions, caps, cache_files)
    yield Close(failing, quiet=True)
    log.info("recovered device %r", metadata[0])
    return device, valid


def in_background(fn: Callable[[], V], name: str) -> Callback[V]:
    """Run ``fn`` on a helper thread; its value (or HalError) reaches the returned callback once.
    A value nobody can receive any more is released."""
    cb: Callback[V] = Callback()

    def run() -> None:
        try:
            value = fn()
        except HalError as err:
            cb.notify(err.error_status, None, err.message)
            return
        if not cb.notify(ErrorStatus.NONE, value):
            value.release()

    threading.Thread(target=run, name=name, daemon=True).start()
    return cb

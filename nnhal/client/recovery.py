"""Recovery: the recover-once-under-a-lock state both resilient wrappers share (AOSP ``protect``).

``Recoverer`` holds the current object and replaces it once per death: one caller
recovers under a lock, an identity check makes the callers that queued behind it
reuse what it obtained, and callers that queued behind a *failed* attempt share
its error instead of repeating it. Lock order: ``_recovery_lock``, then
``_state_lock`` (never the other way); reading the current object never waits
for a recovery in progress.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from nnhal.client.callbacks import Callback
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, HalError


class Releasable(Protocol):
    def release(self) -> None: ...


V = TypeVar("V", bound=Releasable)
T = TypeVar("T")


def dead_after_failed_recovery(err: DeadObject, what: str, recovery: HalError) -> DeadObject:
    return DeadObject(
        f"{err.message}, and failed to recover dead {what} with error {recovery.error_status.name}: {recovery.message}"
    )


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
        self._current = current
        self._make = make
        self._attempts = 0
        self._last_failure: tuple[T, HalError] | None = None
        self.recoveries = 0

    @property
    def current(self) -> T:
        with self._state_lock:
            return self._current

    def snapshot(self) -> tuple[T, int]:
        with self._state_lock:
            return self._current, self._attempts

    def recover(self, failing: T, seen_attempts: int) -> T:
        with self._recovery_lock:
            with self._state_lock:
                if self._current is not failing:
                    return self._current  # another caller already recovered
                if self._attempts != seen_attempts and self._last_failure is not None:
                    obj, error = self._last_failure
                    if obj is failing:
                        # An attempt that began after we saw the object failed: share its error.
                        raise HalError.of(error.error_status, error.message)
            try:
                replacement = self._make(failing)
            except HalError as err:
                with self._state_lock:
                    self._attempts += 1
                    self._last_failure = (failing, err)
                raise
            with self._state_lock:
                self._attempts += 1
                self._last_failure = None
                self._current = replacement
                self.recoveries += 1
            return replacement


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

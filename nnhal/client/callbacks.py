"""One-shot callback values: the result of an asynchronous HAL call, delivered once.

``notify`` may be called from any thread, any number of times; only the first
call counts (later ones are ignored and counted, so tests can assert that a
callback fired exactly once). ``wait`` blocks until notified or the timeout.
Listeners (``add_done_callback``) run once, on the notifying thread, outside the
lock; one that raises is logged and does not keep the others from running (each may be
another waiter's release). ``then`` derives a callback whose value is converted from this
one's; a conversion that fails in any way still notifies it (exactly once, always).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import GeneralFailure, HalError

log = logging.getLogger(__name__)

V = TypeVar("V")
W = TypeVar("W")


class Callback(Generic[V]):
    """The one-shot result of an asynchronous call: status, message and value. Thread-safe."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._status = ErrorStatus.GENERAL_FAILURE
        self._message = ""
        self._value: V | None = None
        self.notifications = 0
        self._listeners: list[Callable[[Callback[V]], None]] = []

    def notify(self, status: ErrorStatus, value: V | None = None, message: str = "") -> bool:
        """Deliver the result; returns False if one was already delivered."""
        with self._lock:
            self.notifications += 1
            if self._event.is_set():
                return False
            self._status, self._value, self._message = status, value, message
            self._event.set()
            listeners = list(self._listeners)
        for listener in listeners:
            self._run(listener)
        return True

    def _run(self, listener: Callable[[Callback[V]], None]) -> None:
        try:
            listener(self)
        except Exception:  # a listener's bug must not cost the next listener its notify
            log.exception("a callback listener raised")

    def add_done_callback(self, fn: Callable[[Callback[V]], None]) -> None:
        with self._lock:
            if not self._event.is_set():
                self._listeners.append(fn)
                return
        self._run(fn)

    def then(self, convert: Callable[[V], W]) -> Callback[W]:
        """A callback notified when this one is, with its status and message and the value
        passed through ``convert`` (no value stays no value; a HalError ``convert`` raises
        becomes the result, any other exception GENERAL_FAILURE). ``convert`` runs on the
        notifying thread."""
        derived: Callback[W] = Callback()

        def forward(source: Callback[V]) -> None:
            if source.value is None:
                derived.notify(source.status, None, source.message)
                return
            try:
                value = convert(source.value)
            except HalError as err:
                derived.notify(err.error_status, None, err.message)
                return
            except Exception as err:  # a malformed answer the conversion could not read
                derived.notify(ErrorStatus.GENERAL_FAILURE, None, f"the result could not be read: {err!r}")
                return
            derived.notify(source.status, value, source.message)

        self.add_done_callback(forward)
        return derived

    def done(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once notified; False if ``timeout`` seconds passed first."""
        return self._event.wait(timeout)

    @property
    def status(self) -> ErrorStatus:
        return self._status

    @property
    def message(self) -> str:
        return self._message

    def get(self, timeout: float | None = None) -> V:
        """The value, or raise the HalError the call ended with."""
        if not self._event.wait(timeout):
            raise GeneralFailure(f"no result within {timeout} s")
        if self._status != ErrorStatus.NONE:
            raise HalError.of(self._status, self._message)
        assert self._value is not None
        return self._value

    @property
    def value(self) -> V | None:
        return self._value

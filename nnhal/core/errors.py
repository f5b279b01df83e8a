"""One error hierarchy carrying an ErrorStatus, with a registry from status to class.

A HAL error is a value: servers turn it into the in-band ``status`` field and
clients raise the matching subclass, so callers can ``except InvalidArgument`` or
test ``err.transient`` without looking at numbers.
"""

from __future__ import annotations

from typing import ClassVar

from nnhal.core.enums import ErrorStatus


class HalError(Exception):
    """An NN HAL failure: ``status`` (never NONE) and a message saying what is wrong."""

    status: ClassVar[ErrorStatus] = ErrorStatus.GENERAL_FAILURE
    #: True when the same call may succeed later without changes.
    transient: ClassVar[bool] = False

    def __init__(self, message: str = "", status: ErrorStatus | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None and status is not type(self).status:
            # An instance whose status differs from its class's (used by `of`).
            self._status = status
        else:
            self._status = type(self).status

    @property
    def error_status(self) -> ErrorStatus:
        return self._status

    def __str__(self) -> str:
        return f"{self._status.name}: {self.message}" if self.message else self._status.name

    @staticmethod
    def of(status: ErrorStatus, message: str = "") -> HalError:
        """The error of the class registered for ``status``."""
        cls = _REGISTRY.get(status, HalError)
        return cls(message) if cls is not HalError else HalError(message, status)


class DeviceUnavailable(HalError):
    status = ErrorStatus.DEVICE_UNAVAILABLE
    transient = True


class GeneralFailure(HalError):
    status = ErrorStatus.GENERAL_FAILURE


class OutputInsufficientSize(HalError):
    status = ErrorStatus.OUTPUT_INSUFFICIENT_SIZE


class InvalidArgument(HalError):
    status = ErrorStatus.INVALID_ARGUMENT


class MissedDeadlineTransient(HalError):
    status = ErrorStatus.MISSED_DEADLINE_TRANSIENT
    transient = True


class MissedDeadlinePersistent(HalError):
    status = ErrorStatus.MISSED_DEADLINE_PERSISTENT


class ResourceExhaustedTransient(HalError):
    status = ErrorStatus.RESOURCE_EXHAUSTED_TRANSIENT
    transient = True


class ResourceExhaustedPersistent(HalError):
    status = ErrorStatus.RESOURCE_EXHAUSTED_PERSISTENT


class DeadObject(HalError):
    """The remote service died or became unreachable (binder DEAD_OBJECT)."""

    status = ErrorStatus.DEAD_OBJECT
    transient = True


_REGISTRY: dict[ErrorStatus, type[HalError]] = {
    cls.status: cls
    for cls in (
        DeviceUnavailable,
        GeneralFailure,
        OutputInsufficientSize,
        InvalidArgument,
        MissedDeadlineTransient,
        MissedDeadlinePersistent,
        ResourceExhaustedTransient,
        ResourceExhaustedPersistent,
        DeadObject,
    )
}


#: What a failed allocation says in libraries that do not raise MemoryError (ONNX Runtime's
#: arena, a C++ ``std::bad_alloc`` turned into a RuntimeError), in the text of whatever they raise.
_ALLOCATION_FAILURES = ("arena alloc failed", "failed to allocate memory", "bad_alloc", "out of memory")


def allocation_failed(err: BaseException) -> bool:
    """Whether ``err`` is an allocation that failed: a MemoryError (numpy's ``_ArrayMemoryError``
    is one) or a library's allocation failure (:data:`_ALLOCATION_FAILURES`). Such a failure is
    RESOURCE_EXHAUSTED_TRANSIENT (DESIGN.md §5), never GENERAL_FAILURE."""
    if isinstance(err, MemoryError):
        return True
    text = str(err).lower()
    return any(s in text for s in _ALLOCATION_FAILURES)

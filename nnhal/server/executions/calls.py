"""The HAL calls the owner runs, and the events of a launch / notify call, in canonical types.

Every transport converts its request into one of these values (``Execution``,
``FencedExecution``, ``Preparation``, ``CachedPreparation``) and its answer out of the
canonical answer (``ExecutionResult``, ``Prepared``, ``FencedExecutionInfo``). An
asynchronous call (``execute_1_3``, ``prepareModel*``, the HIDL ``execute``) is a
:class:`Launch` event, then exactly one :class:`Notify`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from nnhal.core.enums import ErrorStatus, ExecutionPreference, Priority
from nnhal.core.types import Model, Request
from nnhal.server.pieces import Pieces

A = TypeVar("A")


class Execution(NamedTuple):
    """An execution of ``prepared_model`` (a handle of ``session``). ``deadline_ns``: on this
    host's monotonic clock; ``loop_timeout_ns`` 0: the default. A named tuple: made on every
    execution's hot path, where a frozen dataclass costs a ``__setattr__`` per field."""

    session: str
    prepared_model: str
    request: Request
    measure: bool = False
    deadline_ns: int | None = None
    loop_timeout_ns: int = 0
    profile: bool = False


@dataclass(frozen=True, slots=True)
class FencedExecution:
    """IPreparedModel::executeFenced: the execution runs once the fences ``wait_for``
    signalled, within ``duration_ns`` of that; ``on_signal`` is called once its own fence
    signalled (never when the launch fails)."""

    session: str
    prepared_model: str
    request: Request
    wait_for: tuple[str, ...]
    measure: bool
    deadline_ns: int | None
    loop_timeout_ns: int
    duration_ns: int | None = None
    on_signal: Callable[[], None] | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Preparation:
    """IDevice::prepareModel*: ``model`` compiled for ``session``; ``token`` (non-empty)
    names its cache entry, ``want_cache``: the notify carries the model cache."""

    session: str
    model: Model
    preference: ExecutionPreference
    priority: Priority = Priority.MEDIUM
    deadline_ns: int | None = None
    token: bytes = b""
    want_cache: bool = False


@dataclass(frozen=True, slots=True)
class CachedPreparation:
    """IDevice::prepareModelFromCache*: a model from its cache files."""

    session: str
    model_cache: tuple[bytes | Pieces, ...]
    data_cache: tuple[bytes | Pieces, ...]
    token: bytes
    deadline_ns: int | None = None


@dataclass(frozen=True, slots=True)
class Prepared:
    """A preparation's answer: the prepared model's handle and (when asked) its model cache."""

    handle: str
    model_cache: bytes = b""


@dataclass(frozen=True, slots=True)
class Launch:
    """The launch status of an asynchronous call (the HAL method's return value)."""

    status: ErrorStatus
    message: str = ""


@dataclass(frozen=True, slots=True)
class Notify(Generic[A]):
    """The one notify of an asynchronous call: ``answer`` when it ran, else None and the
    status saying why (a launch error is notified with the launch's status)."""

    status: ErrorStatus
    message: str = ""
    answer: A | None = None

"""Resilient wrappers: a device and prepared models that survive a restarted server.

As AOSP ``neuralnetworks/utils/common/Resilient*``: every call goes through
``protect``. When it fails with DEAD_OBJECT, one caller recovers under a lock
(an identity check makes the others, who waited on that lock, reuse the device
it obtained), then the call is retried once. A recovered device whose metadata
differ from the original's (name, version string, feature level, type,
extensions, capabilities) is replaced by an ``InvalidDevice`` whose operations
fail with GENERAL_FAILURE. A ``ResilientPreparedModel`` re-creates its prepared
model on the recovered device by preparing the same Model again, with the same
preference, priority and cache token.

Errors other than DEAD_OBJECT pass through untouched, without recovery. When
recovery fails the caller gets DEAD_OBJECT, with the recovery error appended;
the next call tries to recover again. Every wait is bounded: a recovery costs
at most ``recover_timeout`` seconds per attempt, and callers that queued behind
a failed attempt share its error instead of repeating it.

Scope: asynchronous calls (``prepare_model``, ``execute_async``,
``execute_request_async``) run the protected synchronous form on a helper
thread, so a death during the call is recovered too. ``execute_fenced`` and
``burst`` are protected at launch only: a fence or burst belongs to the
prepared model that existed when it was made. Driver-managed buffers
(``allocate``) are not re-created: their contents lived in the dead server,
so a buffer from before a death answers DEAD_OBJECT and must be allocated again
(``allocate`` re-creates first a resilient prepared model it names that was
made before the death).

A draining server (SIGTERM, DESIGN §12) is no death until it is gone: work it
launched still finishes, new work gets DEVICE_UNAVAILABLE (passed through: a
retry on the same address would reach the same draining server). Once it is
gone, calls fail with DEAD_OBJECT saying "the server is draining (shutting
down)", and the next call recovers on the restarted server as after a crash.

Modules: this one (``ResilientDevice``), :mod:`nnhal.client.resilient_prepared_model`
and :mod:`nnhal.client.recovery` (the recover-once state both share, with its lock order).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from nnhal.client import steps
from nnhal.client.buffer import Buffer
from nnhal.client.cache_files import CacheInput
from nnhal.client.callbacks import Callback
from nnhal.client.device import Device
from nnhal.client.interfaces import IBuffer, IDevice, IPreparedModel
from nnhal.client.invalid_device import InvalidDevice
from nnhal.client.prepared_model import PreparedModel
from nnhal.client.recovery import (
    Attempt,
    Close,
    Connect,
    Describe,
    Recover,
    Recoverer,
    in_background,
    protected,
    replacement,
)
from nnhal.client.remote import wait_bound
from nnhal.client.remote.transport import TlsConfig
from nnhal.client.resilient_prepared_model import ResilientPreparedModel
from nnhal.core.enums import DeviceStatus, DeviceType, ExecutionPreference, Priority
from nnhal.core.types import BufferDesc, BufferRole, Capabilities, Extension, Model

__all__ = ["ResilientDevice", "ResilientPreparedModel"]

log = logging.getLogger(__name__)

R = TypeVar("R")
DeviceFactory = Callable[[], IDevice]


class ResilientDevice:
    """An IDevice that reconnects to a restarted server. Thread-safe.

    ``factory`` makes a fresh connected device (e.g. ``Device.connect(address)``);
    it must raise DeadObject (bounded in time) when no server answers.
    Name, version string, extensions and capabilities are cached from the first
    device (as in AOSP); other queries are forwarded through ``protect``."""

    def __init__(self, factory: DeviceFactory, device: IDevice | None = None) -> None:
        self._factory = factory
        first = device if device is not None else factory()
        self._metadata = self._metadata_of(first)
        self._name: str = first.name
        self._version_string: str = self._metadata[1]
        self._extensions: tuple[Extension, ...] = self._metadata[4]
        self._capabilities: Capabilities = self._metadata[5]
        self._cache_files_needed = first.number_of_cache_files_needed()
        self._valid = True
        self._recoverer = Recoverer(first, self._make_device)

    @classmethod
    def connect(
        cls,
        address: str,
        *,
        client_name: str = "",
        timeout: float = 10.0,
        recover_timeout: float = 5.0,
        keepalive_ms: int | None = None,
        tls: TlsConfig | Literal[False] | None = None,
    ) -> ResilientDevice:
        """Connect to ``address``; reconnect there (within ``recover_timeout`` s) after a death.
        ``tls`` as for ``Device.connect`` (every reconnection uses it too).

        Raises DeadObject if no server answers within ``timeout`` seconds."""

        def make(t: float) -> Device:
            return Device.connect(address, client_name=client_name, timeout=t, keepalive_ms=keepalive_ms, tls=tls)

        return cls(lambda: make(recover_timeout), make(timeout))

    # -- recovery -----------------------------------------------------------------
    @staticmethod
    def _metadata_of(device: IDevice) -> tuple[Any, ...]:
        return (
            device.name,
            device.version_string(),
            device.feature_level,
            device.type(),
            device.supported_extensions(),
            device.capabilities(),
        )

    def _make_device(self, failing: IDevice) -> IDevice:
        def perform(step: Connect | Describe | Close) -> Any:
            if isinstance(step, Connect):
                return self._factory()
            if isinstance(step, Describe):
                return self._metadata_of(step.device)
            try:
                step.device.close()
            except Exception:
                if not step.quiet:
                    raise
                log.debug("closing the dead device failed", exc_info=True)
            return None

        device, valid = steps.drive(replacement(failing, self._metadata, self._cache_files_needed), perform)
        self._valid = self._valid and valid
        return device  # type: ignore[no-any-return]

    def protect(self, fn: Callable[[IDevice], R]) -> R:
        """Run ``fn`` on the current device; on DEAD_OBJECT recover and retry once."""
        device, attempts = self._recoverer.snapshot()

        def perform(step: Attempt | Recover) -> Any:
            if isinstance(step, Recover):
                return self._recoverer.recover(step.failing, step.attempts)
            return fn(step.target)

        return steps.drive(protected(device, attempts, "device"), perform)  # type: ignore[no-any-return]

    @property
    def device(self) -> IDevice:
        """The device calls currently go to (a Device, or InvalidDevice)."""
        return self._recoverer.current

    @property
    def is_valid(self) -> bool:
        """False once a recovery found a different device."""
        return self._valid

    @property
    def recoveries(self) -> int:
        """How many times a dead device was replaced."""
        return self._recoverer.recoveries

    # -- IDevice: cached metadata ---------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def feature_level(self) -> int:
        return self.device.feature_level

    def capabilities(self) -> Capabilities:
        return self._capabilities

    def version_string(self) -> str:
        return self._version_string

    def supported_extensions(self) -> tuple[Extension, ...]:
        return self._extensions

    # -- IDevice: protected calls ---------------------------------------------------
    def type(self) -> DeviceType:
        return self.protect(lambda d: d.type())

    def number_of_cache_files_needed(self) -> tuple[int, int]:
        return self.protect(lambda d: d.number_of_cache_files_needed())

    def status(self) -> DeviceStatus:
        return self.protect(lambda d: d.status())

    def supported_operations(self, model: Model) -> list[bool]:
        return self.protect(lambda d: d.supported_operations(model))

    def supported_operations_with_reasons(self, model: Model) -> list[tuple[bool, str]]:
        return self.protect(lambda d: d.supported_operations_with_reasons(model))

    def prepare_model_sync(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority | int = Priority.MEDIUM,
        timeout: float | None = None,
        deadline_at: float | None = None,
        cache_token: bytes | None = None,
    ) -> ResilientPreparedModel:
        """prepareModel_1_3 and wait, protected; the result re-prepares itself after a death.

        A re-preparation keeps ``preference``, ``priority``, ``cache_token`` and the
        relative ``timeout``, not ``deadline_at`` (an absolute time long past by then)."""

        def prepare(deadline: float | None) -> IPreparedModel:
            return self.protect(
                lambda d: d.prepare_model_sync(
                    model,
                    preference=preference,
                    priority=priority,
                    timeout=timeout,
                    deadline_at=deadline,
                    cache_token=cache_token,
                )
            )

        return ResilientPreparedModel(lambda: prepare(None), prepare(deadline_at))

    def prepare_model(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority | int = Priority.MEDIUM,
        timeout: float | None = None,
        deadline_at: float | None = None,
        cache_token: bytes | None = None,
    ) -> Callback[ResilientPreparedModel]:
        """prepareModel_1_3: returns at once; the callback delivers a ResilientPreparedModel.

        The protected preparation runs on a helper thread, so a server death during
        the preparation is recovered as well."""
        return in_background(
            lambda: self.prepare_model_sync(
                model,
                preference=preference,
                priority=priority,
                timeout=timeout,
                deadline_at=deadline_at,
                cache_token=cache_token,
            ),
            "nnhal-resilient-prepare",
        )

    def prepare_model_from_cache(
        self,
        model_cache: CacheInput,
        token: bytes,
        model: Model | None = None,
        *,
        timeout: float | None = None,
        deadline_at: float | None = None,
    ) -> Callback[ResilientPreparedModel]:
        """prepareModelFromCache_1_3, protected; the result re-prepares from the same cache."""

        def prepare(deadline: float | None) -> IPreparedModel:
            def call(d: IDevice) -> IPreparedModel:
                cb = d.prepare_model_from_cache(model_cache, token, model, timeout=timeout, deadline_at=deadline)
                return cb.get(wait_bound(timeout))

            return self.protect(call)

        return in_background(
            lambda: ResilientPreparedModel(lambda: prepare(None), prepare(deadline_at)), "nnhal-resilient-prepare"
        )

    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: list[Any],
        input_roles: list[BufferRole],
        output_roles: list[BufferRole],
    ) -> IBuffer:
        """IDevice::allocate, protected. A resilient prepared model stands for its current one,
        re-created first when it was made before a death the device recovered from. The
        buffer itself is not re-created after a death."""

        def call(d: IDevice) -> IBuffer:
            session = getattr(d, "session_id", None)  # a remote proxy's; None: no sessions to match
            current = [
                (pm.prepared_model if session is None else pm.current_in(session))
                if isinstance(pm, ResilientPreparedModel)
                else pm
                for pm in prepared_models
            ]
            return d.allocate(desc, current, input_roles, output_roles)

        return self.protect(call)

    # -- lifetime ----------------------------------------------------------------------
    def close(self) -> None:
        self.device.close()

    def __enter__(self) -> ResilientDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _conforms_device(device: Device) -> IDevice:
    """Never called: lets mypy check that each implementation satisfies its Protocol."""
    return device


def _conforms_resilient_device(device: ResilientDevice) -> IDevice:
    return device


def _conforms_invalid_device(device: InvalidDevice) -> IDevice:
    return device


def _conforms_prepared_model(pm: PreparedModel) -> IPreparedModel:
    return pm


def _conforms_buffer(buffer: Buffer) -> IBuffer:
    return buffer


def _conforms_resilient_prepared_model(pm: ResilientPreparedModel) -> IPreparedModel:
    return pm

"""The asyncio resilient wrappers: a device and prepared models that survive a restarted server.

The asyncio twins of :class:`nnhal.client.resilient.ResilientDevice` and
:class:`nnhal.client.resilient_prepared_model.ResilientPreparedModel`, on the same rules:
every call runs through :func:`nnhal.client.recovery.protected` (on DEAD_OBJECT one caller
recovers, :class:`~nnhal.client.recovery.AsyncRecoverer`'s identity check makes the others
reuse what it obtained, and the call runs once more); a recovered device whose metadata
differ from the original's is replaced by the :class:`~nnhal.client.invalid_device.InvalidDevice`
null object (every operation GENERAL_FAILURE); a prepared model is re-prepared from the same
Model with the same preference, priority and cache token (one from ``prepare_model_from_cache``:
from the same cache and token). A re-preparation keeps the relative ``timeout``, not
``deadline_at`` (an absolute time long past by then). Driver buffers (``allocate``, protected
itself), fences and bursts belong to the prepared model that made them and are not re-created:
a buffer from before a death answers DEAD_OBJECT and must be allocated again.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import numpy as np

from nnhal.client import steps
from nnhal.client.aio.buffer import Buffer
from nnhal.client.aio.device import Device
from nnhal.client.aio.prepared_model import PreparedModel
from nnhal.client.cache_files import CacheInput
from nnhal.client.invalid_device import InvalidDevice
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.recovery import AsyncRecoverer, Attempt, Close, Connect, Describe, Recover, protected, replacement
from nnhal.client.release import AsyncReleasable
from nnhal.client.remote.transport import TlsConfig
from nnhal.core.enums import DeviceStatus, DeviceType, ErrorStatus, ExecutionPreference, Priority
from nnhal.core.errors import HalError
from nnhal.core.types import BufferDesc, BufferRole, Capabilities, Extension, Model, Request

log = logging.getLogger(__name__)

#: A device of either kind: the asyncio proxy or the null object that replaced it.
AnyDevice = Device | InvalidDevice


async def _awaited(value: Any) -> Any:
    """A call's result: awaited when it is a coroutine (the proxy's), as is (the null object's)."""
    return await value if inspect.isawaitable(value) else value


async def _protect(recoverer: AsyncRecoverer[Any], what: str, fn: Callable[[Any], Any], dead: Any = None) -> Any:
    target, attempts = recoverer.snapshot()

    async def perform(step: Attempt | Recover) -> Any:
        if isinstance(step, Recover):
            return await recoverer.recover(step.failing, step.attempts)
        return await _awaited(fn(step.target))

    return await steps.drive_async(protected(target, attempts, what, dead), perform)


async def _metadata_of(device: Device) -> tuple[Any, ...]:
    return (
        device.name,
        await device.version_string(),
        device.feature_level,
        await device.type(),
        await device.supported_extensions(),
        await device.capabilities(),
    )


class ResilientDevice(AsyncReleasable):
    """An asyncio IDevice that reconnects to a restarted server. Open with :meth:`connect`."""

    def __init__(self, factory: Callable[[], Awaitable[Device]], first: Device, metadata: tuple[Any, ...]) -> None:
        self._factory = factory
        self._metadata = metadata
        self._cache_files: tuple[int, int] = (0, 0)
        self._valid = True
        self._recoverer: AsyncRecoverer[AnyDevice] = AsyncRecoverer(first, self._make_device)

    @classmethod
    async def connect(
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
        Raises DeadObject if no server answers within ``timeout`` seconds."""
        name = client_name or f"pid-{os.getpid()}"

        async def make(t: float) -> Device:
            return await Device.connect(address, client_name=name, timeout=t, keepalive_ms=keepalive_ms, tls=tls)

        first = await make(timeout)
        self = cls(lambda: make(recover_timeout), first, await _metadata_of(first))
        self._cache_files = await first.number_of_cache_files_needed()
        return self

    async def _make_device(self, failing: AnyDevice) -> AnyDevice:
        async def perform(step: Connect | Describe | Close) -> Any:
            if isinstance(step, Connect):
                return await self._factory()
            if isinstance(step, Describe):
                return await _metadata_of(step.device)
            try:
                await _awaited(step.device.close())
            except Exception:
                if not step.quiet:
                    raise
                log.debug("closing the dead device failed", exc_info=True)
            return None

        device, valid = await steps.drive_async(replacement(failing, self._metadata, self._cache_files), perform)
        self._valid = self._valid and valid
        return device  # type: ignore[no-any-return]

    def protect(self, fn: Callable[[AnyDevice], Any]) -> Awaitable[Any]:
        """Run ``fn`` (a coroutine's maker) on the current device; on DEAD_OBJECT recover and retry once."""
        return _protect(self._recoverer, "device", fn)

    @property
    def device(self) -> AnyDevice:
        return self._recoverer.current

    @property
    def is_valid(self) -> bool:
        return self._valid

    @property
    def recoveries(self) -> int:
        return self._recoverer.recoveries

    # -- IDevice: the original's facts, the rest protected ---------------------------------------
    @property
    def name(self) -> str:
        return str(self._metadata[0])

    async def version_string(self) -> str:
        return str(self._metadata[1])

    async def supported_extensions(self) -> tuple[Extension, ...]:
        return tuple(self._metadata[4])

    async def capabilities(self) -> Capabilities:
        caps: Capabilities = self._metadata[5]
        return caps

    async def number_of_cache_files_needed(self) -> tuple[int, int]:
        return self._cache_files

    async def type(self) -> DeviceType:
        return await self.protect(lambda d: d.type())  # type: ignore[no-any-return]

    async def status(self) -> DeviceStatus:
        return await self.protect(lambda d: d.status())  # type: ignore[no-any-return]

    async def supported_operations(self, model: Model) -> list[bool]:
        return await self.protect(lambda d: d.supported_operations(model))  # type: ignore[no-any-return]

    async def prepare_model(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority | int = Priority.MEDIUM,
        timeout: float | None = None,
        deadline_at: float | None = None,
        cache_token: bytes | None = None,
    ) -> ResilientPreparedModel:
        """prepareModel, protected; the result re-prepares itself the same way after a death."""

        async def prepare(deadline: float | None) -> PreparedModel:
            return await self.protect(  # type: ignore[no-any-return]
                lambda d: d.prepare_model(
                    model,
                    preference=preference,
                    priority=priority,
                    timeout=timeout,
                    deadline_at=deadline,
                    cache_token=cache_token,
                )
            )

        return ResilientPreparedModel(lambda: prepare(None), await prepare(deadline_at))

    async def prepare_model_from_cache(
        self,
        model_cache: CacheInput,
        token: bytes,
        model: Model | None = None,
        *,
        timeout: float | None = None,
        deadline_at: float | None = None,
    ) -> ResilientPreparedModel:
        """prepareModelFromCache_1_3, protected; the result re-prepares from the same cache and
        token after a death (the restarted server must accept that cache: the same cache secret)."""

        async def prepare(deadline: float | None) -> PreparedModel:
            return await self.protect(  # type: ignore[no-any-return]
                lambda d: d.prepare_model_from_cache(model_cache, token, model, timeout=timeout, deadline_at=deadline)
            )

        return ResilientPreparedModel(lambda: prepare(None), await prepare(deadline_at))

    async def allocate(
        self,
        desc: BufferDesc,
        prepared_models: Sequence[PreparedModel | ResilientPreparedModel],
        input_roles: list[BufferRole],
        output_roles: list[BufferRole],
    ) -> Buffer:
        """IDevice::allocate, protected. A resilient prepared model stands for its current one,
        re-created first when it was made before a death the device recovered from. The
        buffer itself is not re-created after a death."""

        async def call(d: AnyDevice) -> Any:
            if isinstance(d, InvalidDevice):
                return d.allocate(desc, [], input_roles, output_roles)  # GENERAL_FAILURE
            current = [
                await pm.current_in(d.session_id) if isinstance(pm, ResilientPreparedModel) else pm
                for pm in prepared_models
            ]
            return await d.allocate(desc, current, input_roles, output_roles)

        return await self.protect(call)  # type: ignore[no-any-return]

    async def release(self) -> None:
        """Close the current device (the session's end releases what it created)."""
        await _awaited(self.device.close())

    close = release


class ResilientPreparedModel(AsyncReleasable):
    """An asyncio IPreparedModel re-created on demand after its server died."""

    def __init__(self, factory: Callable[[], Awaitable[PreparedModel]], first: PreparedModel) -> None:
        self._factory = factory
        self._recoverer: AsyncRecoverer[PreparedModel] = AsyncRecoverer(first, self._make)

    async def _make(self, failing: PreparedModel) -> PreparedModel:
        replacement = await self._factory()
        try:
            await failing.release()
        except HalError:  # dead: its session is gone with its server
            pass
        return replacement

    @property
    def prepared_model(self) -> PreparedModel:
        return self._recoverer.current

    @property
    def recoveries(self) -> int:
        return self._recoverer.recoveries

    async def current_in(self, session_id: str) -> PreparedModel:
        """The current prepared model, re-created first (by the recover-once rule) when it
        belongs to a session other than ``session_id``: one made before the device's death."""
        pm, attempts = self._recoverer.snapshot()
        if pm.session_id == session_id:
            return pm
        return await self._recoverer.recover(pm, attempts)

    async def execute(self, inputs: Sequence[np.ndarray | None], **kwargs: Any) -> ExecutionOutcome:
        """``PreparedModel.execute``, protected."""
        return await _protect(self._recoverer, "prepared model", lambda pm: pm.execute(inputs, **kwargs))  # type: ignore[no-any-return]

    async def execute_request(self, request: Request, **kwargs: Any) -> ExecutionOutcome:
        """``PreparedModel.execute_request``, protected: the status is in the outcome
        (DEAD_OBJECT only if recovery failed)."""
        return await _protect(  # type: ignore[no-any-return]
            self._recoverer,
            "prepared model",
            lambda pm: pm.execute_request(request, **kwargs),
            lambda o: o.status == ErrorStatus.DEAD_OBJECT,
        )

    async def release(self) -> None:
        """Release the current prepared model; a dead one needs no release."""
        await self.prepared_model.__aexit__()

"""The asyncio device proxy: an IDevice on the other side of a ``grpc.aio`` channel.

``async with await aio.Device.connect(address) as dev:`` (or ``async with
aio.Device.connect(address) as dev:``) opens a session; every object prepared through
it belongs to that session and is released by the server when the session ends.
Coroutines raise HalError subclasses; a dead server surfaces as DeadObject, at once
for every later call (see :mod:`nnhal.client.remote.aio_session`).

``device="ort"`` names one of a server's devices; ``tls`` is as for the sync
:meth:`nnhal.client.device.Device.connect` (None: ``NNHAL_TLS_*`` when set; False: plaintext).

Preparations: ``await prepare_model(model)`` (the PreparedModel, or the HalError raised),
``prepare_model_async(model)`` (an ``asyncio.Task`` started at once, as ``execute_async``),
``await prepare_model_from_cache(model_cache, token)`` (prepareModelFromCache_1_3 with the
cache a preparation with ``cache_token`` returned). ``await allocate(...)``: a driver-managed
buffer (:mod:`nnhal.client.aio.buffer`); ``prepare_model_with_config`` and ``allocate_aidl``
are the AIDL forms. Every call takes the form of the device's level, as the sync client's
(:mod:`nnhal.client.forms`): a 1.0-1.2 device is spoken to in its own version's forms.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Generator
from typing import Any, Literal

from nnhal.client import forms
from nnhal.client.aio.buffer import Buffer
from nnhal.client.aio.prepared_model import PreparedModel
from nnhal.client.cache_files import CacheInput
from nnhal.client.faults import Fault
from nnhal.client.remote import aidl, calls
from nnhal.client.remote.aio_session import AioSession
from nnhal.client.remote.transport import TlsConfig
from nnhal.core.aidl_types import DEFAULT_PREPARE_CONFIG, PrepareModelConfig
from nnhal.core.enums import DeviceStatus, DeviceType, ExecutionPreference, Priority
from nnhal.core.types import BufferDesc, BufferRole, Capabilities, Extension, Model


class Device:
    """A remote NN HAL device for asyncio code. Use as an async context manager or ``await close()``."""

    def __init__(self, session: AioSession) -> None:
        self._session = session
        self.address = session.address

    @classmethod
    def connect(
        cls,
        address: str,
        *,
        client_name: str = "",
        timeout: float = 10.0,
        keepalive_ms: int | None = None,
        tls: TlsConfig | Literal[False] | None = None,
        device: str | None = None,
    ) -> Connecting:
        """Connect to ``address`` (``host:port`` or ``unix:PATH``) and open a session: await the
        result or use it with ``async with``. Raises DeadObject if no server answers within
        ``timeout`` seconds, InvalidArgument for TLS files that cannot be read or a device the
        server does not host."""
        config = TlsConfig.from_env() if tls is None else (tls or None)
        name = client_name or f"pid-{os.getpid()}"
        return Connecting(cls, address, name, timeout, keepalive_ms, config, device)

    # -- the session ---------------------------------------------------------------------------
    @property
    def remote(self) -> AioSession:
        """The session this device speaks through (raw access: ``remote.stubs``,
        ``remote.session_id``, for tests that send hand-built messages)."""
        return self._session

    @property
    def name(self) -> str:
        return self._session.device_name

    @property
    def feature_level(self) -> int:
        return self._session.feature_level

    @property
    def session_id(self) -> str:
        return self._session.session_id

    @property
    def dead(self) -> bool:
        """True once the server is known dead (every later call: DEAD_OBJECT at once)."""
        return self._session.dead

    @property
    def draining(self) -> bool:
        """True once the server announced it is draining (its end is then reported as DRAINING)."""
        return self._session.draining

    @property
    def last_request_id(self) -> str:
        """The request id of the last call this proxy started."""
        return self._session.last_request_id

    async def close(self) -> None:
        """End the session (idempotent): the server releases every object it created."""
        await self._session.close()

    async def __aenter__(self) -> Device:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- IDevice (the calls of nnhal.client.forms in the form of the device's level) -------------
    @property
    def _level(self) -> int:
        return forms.level_of(self._session)

    async def capabilities(self) -> Capabilities:
        return await self._session.run(forms.capabilities_call(self._level, self.session_id))

    async def version_string(self) -> str:
        return await self._session.run(forms.version_string_call(self._level, self.session_id))

    async def type(self) -> DeviceType:
        return await self._session.run(forms.device_type_call(self._level, self.session_id))

    async def supported_extensions(self) -> tuple[Extension, ...]:
        return await self._session.run(forms.supported_extensions_call(self._level, self.session_id))

    async def number_of_cache_files_needed(self) -> tuple[int, int]:
        return await self._session.run(forms.number_of_cache_files_needed_call(self._level, self.session_id))

    async def status(self) -> DeviceStatus:
        return await self._session.run(calls.status(self.session_id))

    async def supported_operations(self, model: Model) -> list[bool]:
        """getSupportedOperations in the level's form: per operation of the main subgraph, whether it is supported."""
        return [ok for ok, _ in await self.supported_operations_with_reasons(model)]

    async def supported_operations_with_reasons(self, model: Model) -> list[tuple[bool, str]]:
        """getSupportedOperations with the device's reason for each unsupported operation."""
        return await self._session.run(forms.supported_operations_call(self._level, self.session_id, model))

    async def stats(self) -> dict[str, int]:
        """Server-wide object counts (nnhal extension): sessions, prepared_models, ..."""
        return (await self._session.run(calls.stats(self.session_id)))[0]

    async def limits(self) -> dict[str, int]:
        """The server's configured resource limits (0 = unlimited)."""
        return (await self._session.run(calls.stats(self.session_id)))[1]

    # -- faults (servers started with --enable-fault-injection) ------------------------------------
    async def set_faults(self, prepare_delay_ms: int = 0, execute_delay_ms: int = 0) -> None:
        """Delay this session's preparations / executions (servers with fault injection only)."""
        await self._session.run(calls.set_faults(self.session_id, prepare_delay_ms, execute_delay_ms))

    async def inject_faults(self, *faults: Fault, clear: bool = False) -> None:
        """Have the server inject ``faults`` (:class:`nnhal.client.faults.Fault`) into the next
        calls of any client; ``clear`` first removes every fault set before."""
        await self._session.run(calls.inject_faults(self.session_id, faults, clear))

    async def clear_faults(self) -> None:
        """Remove every injected fault of the server and this session's delays."""
        await self.inject_faults(clear=True)

    # -- preparation ---------------------------------------------------------------------------------
    async def prepare_model(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority | int = Priority.MEDIUM,
        timeout: float | None = None,
        deadline_at: float | None = None,
        cache_token: bytes | None = None,
    ) -> PreparedModel:
        """prepareModel_1_3 (a launch, then exactly one notify): the prepared model, or the
        HalError the preparation ended with (DEAD_OBJECT if the server dies meanwhile).
        ``timeout`` / ``deadline_at`` (``time.monotonic()``) set the HAL deadline;
        ``cache_token`` (32 bytes) asks for the model cache (``pm.model_cache``). Cancelling
        the caller lets the preparation end; the model it makes is then released."""
        step = forms.prepare_launch(
            self._level, self.session_id, model, preference, priority, timeout, deadline_at, cache_token
        )
        ref = await self._session.prepare(step)
        return PreparedModel(self._session, ref.handle, model, ref.model_cache)

    async def prepare_model_with_config(
        self,
        model: Model,
        config: PrepareModelConfig = DEFAULT_PREPARE_CONFIG,
        *,
        timeout: float | None = None,
        deadline_at: float | None = None,
    ) -> PreparedModel:
        """AIDL V4 prepareModelWithConfig: preference, priority, cache token and compilation
        hints in one PrepareModelConfig; the prepared model or the HalError raised."""
        step = aidl.prepare_with_config_launch(self.session_id, model, config, timeout, deadline_at)
        ref = await self._session.prepare(step)
        return PreparedModel(self._session, ref.handle, model, ref.model_cache)

    def prepare_model_async(self, model: Model, **kwargs: Any) -> asyncio.Task[PreparedModel]:
        """:meth:`prepare_model` started at once as a task (from a running event loop), the
        asyncio form of the sync client's prepare callback. Raises DEAD_OBJECT at once for a
        server known dead; every other failure is the task's exception."""
        self._session.check("prepareModel_1_3")
        return asyncio.get_running_loop().create_task(self.prepare_model(model, **kwargs), name="nnhal-prepare")

    async def prepare_model_from_cache(
        self,
        model_cache: CacheInput,
        token: bytes,
        model: Model | None = None,
        *,
        timeout: float | None = None,
        deadline_at: float | None = None,
    ) -> PreparedModel:
        """prepareModelFromCache_1_3 with the model cache a preparation with ``cache_token``
        returned; a tampered or truncated cache is the server's error, raised. ``model``
        (optional) lets ``execute`` take numpy arrays."""
        step = forms.prepare_from_cache_launch(self._level, self.session_id, model_cache, token, timeout, deadline_at)
        ref = await self._session.prepare(step)
        return PreparedModel(self._session, ref.handle, model, ref.model_cache)

    # -- memory domains ----------------------------------------------------------------------------
    async def allocate(
        self,
        desc: BufferDesc,
        prepared_models: list[PreparedModel],
        input_roles: list[BufferRole],
        output_roles: list[BufferRole],
    ) -> Buffer:
        """IDevice::allocate: a driver-managed buffer usable in the given roles (its HalError
        raised: INVALID_ARGUMENT for roles that do not fit the models)."""
        handles = [pm.handle for pm in prepared_models]
        handle, token = await self._session.run(
            calls.allocate(self.session_id, desc, handles, input_roles, output_roles)
        )
        return Buffer(self._session, handle, token)

    async def allocate_aidl(
        self,
        desc: BufferDesc,
        prepared_models: list[PreparedModel],
        input_roles: list[BufferRole],
        output_roles: list[BufferRole],
    ) -> Buffer:
        """AIDL IDevice::allocate: as ``allocate``, each role's ``frequency`` being AIDL's
        probability, in (0, 1] (INVALID_ARGUMENT otherwise)."""
        handles = [pm.handle for pm in prepared_models]
        call = aidl.allocate(self.session_id, desc, handles, input_roles, output_roles)
        return Buffer(self._session, *await self._session.run(call))


class Connecting:
    """What :meth:`Device.connect` returns: awaitable (the Device) and an async context manager
    (the Device, closed at the end of the block)."""

    def __init__(self, cls: type[Device], *args: Any) -> None:
        self._cls = cls
        self._args = args
        self._device: Device | None = None

    async def _open(self) -> Device:
        return self._cls(await AioSession.open(*self._args))

    def __await__(self) -> Generator[Any, None, Device]:
        return self._open().__await__()

    async def __aenter__(self) -> Device:
        self._device = await self._open()
        return self._device

    async def __aexit__(self, *exc: object) -> None:
        if self._device is not None:
            await self._device.close()

"""The asyncio device proxy: an IDevice on the other side of a ``grpc.aio`` channel.

``async with await aio.Device.connect(address) as dev:`` (or ``async with
aio.Device.connect(address) as dev:``) opens a session; every object prepared through
it belongs to that session and is released by the server when the session ends.
Coroutines raise HalError subclasses; a dead server surfaces as DeadObject, at once
for every later call (see :mod:`nnhal.client.aio.session`).

``device="ort"`` names one of a server's devices; ``tls`` is as for the sync
:meth:`nnhal.client.device.Device.connect` (None: ``NNHAL_TLS_*`` when set; False: plaintext).

Preparations: ``await prepare_model(model)`` (the PreparedModel, or the HalError raised),
``prepare_model_async(model)`` (an ``asyncio.Task`` started at once, as ``execute_async``),
``await prepare_model_from_cache(model_cache, token)`` (prepareModelFromCache_1_3 with the
cache a preparation with ``cache_token`` returned). ``await allocate(...)``: a driver-managed
buffer (:mod:`nnhal.client.aio.buffer`). The HAL 1.3 forms only: a device at a
lower ``--feature-level`` refuses them saying so (the sync client speaks the older forms).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Generator
from typing import Any, Literal

from nnhal.client.aio.buffer import Buffer
from nnhal.client.aio.prepared_model import PreparedModel
from nnhal.client.aio.session import AioSession
from nnhal.client.faults import Fault
from nnhal.client.remote.messages import (
    fault_request,
    fill_allocate,
    prepare_from_cache_request,
    prepare_request,
    prepared_of,
    stats_of,
)
from nnhal.client.remote.transport import TlsConfig, grpc_timeout, remaining_time, tag_request_id
from nnhal.core import wire
from nnhal.core.enums import DeviceStatus, DeviceType, ErrorStatus, ExecutionPreference, Priority
from nnhal.core.errors import HalError
from nnhal.core.types import BufferDesc, BufferRole, Capabilities, Extension, Model
from nnhal.proto import service_pb2 as spb


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

    # -- IDevice ----------------------------------------------------------------------------------
    async def _query(self, rpc_name: str, checked: bool = True) -> Any:
        """A device query (DeviceRequest); its in-band status raised when ``checked``."""
        session = self._session
        rpc = getattr(session.stubs.device, rpc_name)
        req = spb.DeviceRequest(session=session.session_id)
        return await (session.checked(rpc, req, rpc_name) if checked else session.unary(rpc, req, rpc_name))

    async def capabilities(self) -> Capabilities:
        return wire.capabilities_from((await self._query("getCapabilities_1_3")).capabilities)

    async def version_string(self) -> str:
        return str((await self._query("getVersionString")).version)

    async def type(self) -> DeviceType:
        return wire.device_type_from((await self._query("getType")).type)

    async def supported_extensions(self) -> tuple[Extension, ...]:
        return tuple(wire.extension_from(e) for e in (await self._query("getSupportedExtensions")).extensions)

    async def number_of_cache_files_needed(self) -> tuple[int, int]:
        msg = await self._query("getNumberOfCacheFilesNeeded")
        return int(msg.num_model_cache), int(msg.num_data_cache)

    async def status(self) -> DeviceStatus:
        return wire.device_status_from((await self._query("getStatus", checked=False)).status)

    async def supported_operations(self, model: Model) -> list[bool]:
        """getSupportedOperations_1_3: per operation of the main subgraph, whether it is supported."""
        return [ok for ok, _ in await self.supported_operations_with_reasons(model)]

    async def supported_operations_with_reasons(self, model: Model) -> list[tuple[bool, str]]:
        """getSupportedOperations_1_3 with the device's reason for each unsupported operation."""
        req = spb.SupportedOperationsRequest(session=self._session.session_id)
        wire.model_to(model, req.model)
        msg = await self._session.checked(
            self._session.stubs.device.getSupportedOperations_1_3, req, "getSupportedOperations_1_3"
        )
        return [(bool(ok), str(why)) for ok, why in zip(msg.supported, msg.reasons)]

    async def stats(self) -> dict[str, int]:
        """Server-wide object counts (nnhal extension): sessions, prepared_models, ..."""
        return stats_of(await self._query("getStats", checked=False))[0]

    async def limits(self) -> dict[str, int]:
        """The server's configured resource limits (0 = unlimited)."""
        return stats_of(await self._query("getStats", checked=False))[1]

    # -- faults (servers started with --enable-fault-injection) ------------------------------------
    async def set_faults(self, prepare_delay_ms: int = 0, execute_delay_ms: int = 0) -> None:
        """Delay this session's preparations / executions (servers with fault injection only)."""
        req = spb.FaultRequest(
            session=self._session.session_id, prepare_delay_ms=prepare_delay_ms, execute_delay_ms=execute_delay_ms
        )
        await self._session.checked(self._session.stubs.device.setFaults, req, "setFaults")

    async def inject_faults(self, *faults: Fault, clear: bool = False) -> None:
        """Have the server inject ``faults`` (:class:`nnhal.client.faults.Fault`) into the next
        calls of any client; ``clear`` first removes every fault set before."""
        req = fault_request(self._session.session_id, faults, clear)
        await self._session.checked(self._session.stubs.device.setFaults, req, "setFaults")

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
        ``cache_token`` (32 bytes) asks for the model cache (``pm.model_cache``)."""
        remaining = remaining_time(timeout, deadline_at)
        req = prepare_request(self._session.session_id, model, preference, priority, cache_token, remaining)
        rpc = self._session.stubs.device.prepareModel_1_3
        return await self._prepare(rpc, req, "prepareModel_1_3", remaining, model)

    def prepare_model_async(self, model: Model, **kwargs: Any) -> asyncio.Task[PreparedModel]:
        """:meth:`prepare_model` started at once as a task (from a running event loop), the
        asyncio form of the sync client's prepare callback. Raises DEAD_OBJECT at once for a
        server known dead; every other failure is the task's exception."""
        self._session.check("prepareModel_1_3")
        return asyncio.get_running_loop().create_task(self.prepare_model(model, **kwargs), name="nnhal-prepare")

    async def prepare_model_from_cache(
        self,
        model_cache: bytes,
        token: bytes,
        model: Model | None = None,
        *,
        timeout: float | None = None,
        deadline_at: float | None = None,
    ) -> PreparedModel:
        """prepareModelFromCache_1_3 with the model cache a preparation with ``cache_token``
        returned; a tampered or truncated cache is the server's error, raised. ``model``
        (optional) lets ``execute`` take numpy arrays."""
        remaining = remaining_time(timeout, deadline_at)
        req = prepare_from_cache_request(self._session.session_id, model_cache, token, remaining)
        rpc = self._session.stubs.device.prepareModelFromCache_1_3
        return await self._prepare(rpc, req, "prepareModelFromCache_1_3", remaining, model)

    async def _prepare(
        self, rpc: Any, req: Any, what: str, remaining: float | None, model: Model | None
    ) -> PreparedModel:
        """The prepare RPC runs to its notify even when the caller is cancelled (a HAL
        preparation cannot be cancelled): the model it then makes, which nobody owns, is
        released — the sync client's discard of a prepared model whose waiter was released."""
        rpc_task = asyncio.ensure_future(self._session.notify(rpc, req, what, grpc_timeout(remaining)))
        try:
            notify = await asyncio.shield(rpc_task)
        except asyncio.CancelledError:
            rpc_task.add_done_callback(self._discard)
            raise
        status, message, ref = prepared_of(notify)
        if status != ErrorStatus.NONE or ref is None:
            raise tag_request_id(HalError.of(status, message), self._session.last_request_id)
        return PreparedModel(self._session, ref.handle, model, ref.model_cache)

    def _discard(self, rpc_task: asyncio.Future[Any]) -> None:
        if rpc_task.cancelled() or rpc_task.exception() is not None:
            return  # no model was made, or the session ended (and released it)
        _, _, ref = prepared_of(rpc_task.result())
        if ref is not None:
            self._session.spawn(PreparedModel(self._session, ref.handle, None).release())

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
        req = spb.AllocateRequest(session=self._session.session_id)
        fill_allocate(req, desc, [pm.handle for pm in prepared_models], input_roles, output_roles, wire.buffer_role_to)
        msg = await self._session.checked(self._session.stubs.device.allocate, req, "allocate")
        return Buffer(self._session, str(msg.buffer), int(msg.token))


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

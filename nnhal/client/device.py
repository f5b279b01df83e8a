"""The device proxy: an IDevice on the other side of a gRPC channel.

``Device.connect(address)`` opens a :class:`~nnhal.client.remote.RemoteSession`
(the channel and the session stream); every object prepared through the device
belongs to that session and is released by the server when the session ends.
Methods raise HalError subclasses; a dead server surfaces as DeadObject,
immediately for every later call.

Several devices: ``list_devices(addr)`` names a server's devices (the default first),
``Device.connect(addr, device="ort")`` opens a session on one of them.

TLS: ``Device.connect(addr, tls=TlsConfig(ca=..., cert=..., key=...))``; without
``tls`` the ``NNHAL_TLS_*`` environment variables apply when set
(``TlsConfig.from_env``), and ``tls=False`` forces plaintext. A server with mTLS
refuses a client without a certificate its CA signed: DeadObject when the connect
timeout ends, as for no server at all (the handshake failure is not an answer).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from nnhal.client import forms
from nnhal.client.buffer import Buffer
from nnhal.client.cache_files import CacheInput
from nnhal.client.callbacks import Callback
from nnhal.client.faults import Fault
from nnhal.client.prepared_model import PreparedModel
from nnhal.client.recorder import ClientRecorder
from nnhal.client.remote import DEFAULT_CALL_TIMEOUT, PreparedRef, RemoteSession, aidl
from nnhal.client.remote.devices import DeviceInfo, list_devices
from nnhal.client.remote.transport import TlsConfig
from nnhal.core.aidl_types import DEFAULT_PREPARE_CONFIG, PrepareModelConfig
from nnhal.core.enums import DeviceStatus, DeviceType, ExecutionPreference, HalVersion, Priority
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import BufferDesc, BufferRole, Capabilities, Extension, Model

PrepareCallback = Callback[PreparedModel]

__all__ = ["Device", "DeviceInfo", "PrepareCallback", "TlsConfig", "list_devices"]


class Device:
    """A remote NN HAL device. Thread-safe. Use as a context manager or call ``close``."""

    def __init__(
        self,
        address: str,
        client_name: str,
        connect_timeout: float,
        keepalive_ms: int | None,
        tls: TlsConfig | None = None,
        device: str | None = None,
        record: Path | str | None = None,
    ) -> None:
        self.address = address
        self._remote = RemoteSession(address, client_name, connect_timeout, keepalive_ms, tls, device)
        if record is not None:
            self._start_recording(Path(record))

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
        record: Path | str | None = None,
    ) -> Device:
        """Connect to the server at ``address`` (``host:port`` or ``unix:PATH``) and open a session.

        ``tls``: None uses ``NNHAL_TLS_*`` when set, else plaintext; False is plaintext.
        With mTLS the server names the client after its certificate, not ``client_name``.
        ``device``: which of the server's devices (``list_devices``; None: its default one);
        every object prepared through this proxy belongs to that device.
        ``record``: write the HAL calls this client makes to that file (``nnhal replay`` replays
        it; ``nnhal.client.recorder`` says what it holds — the models and data included).
        Raises DeadObject if no server answers within ``timeout`` seconds, InvalidArgument
        for TLS files that cannot be read, a device the server does not host, or a recording
        file that cannot be made (it must not exist)."""
        config = TlsConfig.from_env() if tls is None else (tls or None)
        return cls(address, client_name or f"pid-{os.getpid()}", timeout, keepalive_ms, config, device, record)

    def _start_recording(self, path: Path) -> None:
        remote = self._remote
        try:
            level = _level_label(remote.feature_level)
            remote.recorder = ClientRecorder(path, remote.device_name, level)
        except OSError as err:
            remote.close()
            raise InvalidArgument(f"record={path}: cannot write a recording there ({err.strerror or err})") from None

    # -- the session ------------------------------------------------------------
    @property
    def remote(self) -> RemoteSession:
        """The session this device speaks through (raw access: ``remote.stubs``,
        ``remote.session_id``, for tests that send hand-built messages)."""
        return self._remote

    @property
    def session_id(self) -> str:
        """The session this device proxy opened (its prepared models and buffers belong to it)."""
        return self._remote.session_id

    @property
    def name(self) -> str:
        return self._remote.device_name

    @property
    def feature_level(self) -> int:
        return self._remote.feature_level

    @property
    def shm_dir(self) -> str:
        """The server's shared-memory directory ("" when it offers none to this client)."""
        return self._remote.shm_dir

    @property
    def shm_memfd(self) -> str:
        """The server's ``nnhal.core.host.memfd_identity`` ("" when it opens no client memfds)."""
        return self._remote.shm_memfd

    @property
    def shm_prefix(self) -> str:
        """The prefix the names of shared regions must carry."""
        return self._remote.shm_prefix

    # -- IDevice ---------------------------------------------------------------
    # Each call takes the newest method form the device's level serves (``forms``).
    def capabilities(self) -> Capabilities:
        return forms.capabilities(self._remote)

    def version_string(self) -> str:
        return forms.version_string(self._remote)

    def type(self) -> DeviceType:
        return forms.device_type(self._remote)

    def supported_extensions(self) -> tuple[Extension, ...]:
        return forms.supported_extensions(self._remote)

    def number_of_cache_files_needed(self) -> tuple[int, int]:
        return forms.number_of_cache_files_needed(self._remote)

    def status(self) -> DeviceStatus:
        return self._remote.status()

    def supported_operations(self, model: Model) -> list[bool]:
        return [ok for ok, _ in forms.supported_operations(self._remote, model)]

    def supported_operations_with_reasons(self, model: Model) -> list[tuple[bool, str]]:
        return forms.supported_operations(self._remote, model)

    def stats(self) -> dict[str, int]:
        """Server-wide object counts (nnhal extension): sessions, prepared_models, ..."""
        return self._remote.stats()[0]

    def limits(self) -> dict[str, int]:
        """The server's configured resource limits (0 = unlimited)."""
        return self._remote.stats()[1]

    def set_faults(self, prepare_delay_ms: int = 0, execute_delay_ms: int = 0) -> None:
        """Test-only: ask a server started with --enable-fault-injection to slow this session."""
        self._remote.set_faults(prepare_delay_ms, execute_delay_ms)

    def inject_faults(self, *faults: Fault, clear: bool = False) -> None:
        """Test-only: have a server started with --enable-fault-injection inject ``faults``
        (``nnhal.client.faults.Fault``) into the next calls of any client; ``clear`` first
        removes every fault set before. INVALID_ARGUMENT when the server refuses."""
        self._remote.inject_faults(faults, clear)

    def clear_faults(self) -> None:
        """Test-only: remove every injected fault of the server and this session's delays."""
        self._remote.inject_faults((), clear=True)

    # -- preparation --------------------------------------------------------------
    def prepare_model(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority | int = Priority.MEDIUM,
        timeout: float | None = None,
        deadline_at: float | None = None,
        cache_token: bytes | None = None,
    ) -> PrepareCallback:
        """prepareModel_1_3: returns at once; the callback delivers the PreparedModel (or
        the error) exactly once, DEAD_OBJECT included if the server dies meanwhile.

        Raises at launch only for a dead server; launch errors arrive in the callback."""
        cb = forms.prepare_model(self._remote, model, preference, priority, timeout, deadline_at, cache_token)
        return cb.then(self._adopt(model))

    def prepare_model_with_config(
        self,
        model: Model,
        config: PrepareModelConfig = DEFAULT_PREPARE_CONFIG,
        *,
        timeout: float | None = None,
        deadline_at: float | None = None,
    ) -> PrepareCallback:
        """AIDL V4 prepareModelWithConfig: preference, priority, cache token and compilation
        hints in one PrepareModelConfig (hints validated by the device, unsupported ones ignored)."""
        step = aidl.prepare_with_config_launch(self._remote.session_id, model, config, timeout, deadline_at)
        cb = self._remote.launch_prepare(step)
        return cb.then(self._adopt(model))

    def prepare_model_from_cache(
        self,
        model_cache: CacheInput,
        token: bytes,
        model: Model | None = None,
        *,
        timeout: float | None = None,
        deadline_at: float | None = None,
    ) -> PrepareCallback:
        """prepareModelFromCache_1_3 with the model cache a previous prepare returned.

        ``model`` (optional) lets the proxy size outputs without asking the server."""
        cb = forms.prepare_model_from_cache(self._remote, model_cache, token, timeout, deadline_at)
        return cb.then(self._adopt(model))

    def _adopt(self, model: Model | None) -> Callable[[PreparedRef], PreparedModel]:
        def adopt(ref: PreparedRef) -> PreparedModel:
            return PreparedModel(self._remote, ref.handle, model, ref.model_cache)

        return adopt

    def prepare_model_sync(self, model: Model, **kwargs: Any) -> PreparedModel:
        """prepare_model and wait; raises the HalError the preparation ended with."""
        cb = self.prepare_model(model, **kwargs)
        cb.wait(DEFAULT_CALL_TIMEOUT)
        return cb.get(0)

    # -- memory domains -----------------------------------------------------------
    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: list[PreparedModel],
        input_roles: list[BufferRole],
        output_roles: list[BufferRole],
    ) -> Buffer:
        """IDevice::allocate: a driver-managed buffer usable in the given roles."""
        handles = [pm.handle for pm in prepared_models]
        handle, token = self._remote.allocate(desc, handles, input_roles, output_roles)
        return Buffer(self._remote, handle, token)

    def allocate_aidl(
        self,
        desc: BufferDesc,
        prepared_models: list[PreparedModel],
        input_roles: list[BufferRole],
        output_roles: list[BufferRole],
    ) -> Buffer:
        """AIDL IDevice::allocate (AIDL V1+): as ``allocate``, each role's ``frequency`` being
        AIDL's probability, in (0, 1] (INVALID_ARGUMENT otherwise)."""
        handles = [pm.handle for pm in prepared_models]
        call = aidl.allocate(self._remote.session_id, desc, handles, input_roles, output_roles)
        return Buffer(self._remote, *self._remote.run(call))

    # -- lifetime ---------------------------------------------------------------
    def close(self) -> None:
        """End the session: the server releases every object it created. Idempotent."""
        self._remote.close()
        if self._remote.recorder is not None:
            self._remote.recorder.close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _level_label(level: int) -> str:
    try:
        return HalVersion(level).label
    except ValueError:
        return str(level)

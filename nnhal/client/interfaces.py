"""The client's interfaces as Protocols: IDevice, IPreparedModel, IBuffer and the one-shot result.

Implemented alike by the remote proxies (``Device``, ``PreparedModel``), the
resilient wrappers (``ResilientDevice``, ``ResilientPreparedModel``) and the
null object ``InvalidDevice``, so callers can take any of them. Methods raise
HalError subclasses (DeadObject for a dead server) as documented on ``Device``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from nnhal.client.cache_files import CacheInput
from nnhal.core.enums import DeviceStatus, DeviceType, ErrorStatus, ExecutionPreference, Priority
from nnhal.core.types import BufferDesc, BufferRole, BufferTokenPool, Capabilities, Extension, Model, Request

if TYPE_CHECKING:
    from nnhal.client.burst import Burst
    from nnhal.client.fenced import FencedExecution
    from nnhal.client.memory import SharedMemory
    from nnhal.client.outcome import ExecutionOutcome

T_co = TypeVar("T_co", covariant=True)


class IResult(Protocol[T_co]):
    """The result of an asynchronous call, delivered exactly once (``callbacks.Callback``)."""

    def get(self, timeout: float | None = None) -> T_co:
        """The value, or raise the HalError the call ended with (GENERAL_FAILURE on timeout)."""
        ...

    def wait(self, timeout: float | None = None) -> bool: ...

    def done(self) -> bool: ...

    @property
    def status(self) -> ErrorStatus: ...

    @property
    def message(self) -> str: ...


class IBuffer(Protocol):
    """A driver-managed buffer (``buffer.Buffer``)."""

    token: int

    def pool(self) -> BufferTokenPool: ...

    def copy_from(self, src: np.ndarray | SharedMemory, dimensions: tuple[int, ...] | None = None) -> None: ...

    def copy_to(self, dst: SharedMemory) -> None: ...

    def copy_to_array(self, dtype: np.dtype | type, shape: tuple[int, ...]) -> np.ndarray: ...

    def release(self) -> None: ...


class IPreparedModel(Protocol):
    @property
    def model(self) -> Model | None: ...

    def execute(
        self,
        inputs: Sequence[np.ndarray | None],
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> ExecutionOutcome: ...

    def execute_async(
        self,
        inputs: Sequence[np.ndarray | None],
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> IResult[ExecutionOutcome]: ...

    def execute_request(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> ExecutionOutcome: ...

    def execute_request_async(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> IResult[ExecutionOutcome]: ...

    def execute_fenced(
        self,
        request: Request,
        *,
        wait_for: Sequence[FencedExecution] = (),
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
        timeout_after_fence_ns: int = 0,
    ) -> FencedExecution: ...

    def burst(self) -> Burst: ...

    def release(self) -> None: ...


class IDevice(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def feature_level(self) -> int: ...

    def capabilities(self) -> Capabilities: ...

    def version_string(self) -> str: ...

    def type(self) -> DeviceType: ...

    def supported_extensions(self) -> tuple[Extension, ...]: ...

    def number_of_cache_files_needed(self) -> tuple[int, int]: ...

    def status(self) -> DeviceStatus: ...

    def supported_operations(self, model: Model) -> list[bool]: ...

    def supported_operations_with_reasons(self, model: Model) -> list[tuple[bool, str]]: ...

    def prepare_model(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority | int = Priority.MEDIUM,
        timeout: float | None = None,
        deadline_at: float | None = None,
        cache_token: bytes | None = None,
    ) -> IResult[IPreparedModel]: ...

    def prepare_model_sync(
        self,
        model: Model,
        *,
        preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
        priority: Priority | int = Priority.MEDIUM,
        timeout: float | None = None,
        deadline_at: float | None = None,
        cache_token: bytes | None = None,
    ) -> IPreparedModel: ...

    def prepare_model_from_cache(
        self,
        model_cache: CacheInput,
        token: bytes,
        model: Model | None = None,
        *,
        timeout: float | None = None,
        deadline_at: float | None = None,
    ) -> IResult[IPreparedModel]: ...

    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: list[Any],
        input_roles: list[BufferRole],
        output_roles: list[BufferRole],
    ) -> IBuffer: ...

    def close(self) -> None: ...

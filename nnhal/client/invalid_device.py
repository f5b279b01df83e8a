"""InvalidDevice: the null object a ResilientDevice falls back to (AOSP ``InvalidDevice``).

When a dead device comes back as a *different* device (another name, version
string, feature level, type, extensions or capabilities), objects prepared for
the old one must not silently run on the new one. The resilient wrapper then
swaps in this object: it still answers the metadata queries with the cached
values of the original device, and every other method raises GeneralFailure
("InvalidDevice"), as the AOSP null object returns ``NN_ERROR()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from nnhal.client.cache_files import CacheInput
from nnhal.core.enums import DeviceStatus, DeviceType
from nnhal.core.errors import GeneralFailure
from nnhal.core.types import BufferDesc, BufferRole, Capabilities, Extension, Model

if TYPE_CHECKING:
    from nnhal.client.interfaces import IBuffer


class InvalidDevice:
    """An IDevice whose every operation fails with GENERAL_FAILURE. Thread-safe (immutable)."""

    def __init__(
        self,
        name: str,
        version_string: str,
        feature_level: int,
        type: DeviceType,
        extensions: tuple[Extension, ...],
        capabilities: Capabilities,
        cache_files_needed: tuple[int, int],
    ) -> None:
        self._name = name
        self._version_string = version_string
        self._feature_level = feature_level
        self._type = type
        self._extensions = extensions
        self._capabilities = capabilities
        self._cache_files_needed = cache_files_needed

    def _fail(self, what: str) -> NoReturn:
        raise GeneralFailure(f"InvalidDevice: {what}: the device {self._name!r} was replaced by a different one")

    # -- metadata: the original device's cached values --------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def feature_level(self) -> int:
        return self._feature_level

    def capabilities(self) -> Capabilities:
        return self._capabilities

    def version_string(self) -> str:
        return self._version_string

    def type(self) -> DeviceType:
        return self._type

    def supported_extensions(self) -> tuple[Extension, ...]:
        return self._extensions

    def number_of_cache_files_needed(self) -> tuple[int, int]:
        return self._cache_files_needed

    # -- everything else fails --------------------------------------------------------
    def status(self) -> DeviceStatus:
        self._fail("getStatus")

    def supported_operations(self, model: Model) -> list[bool]:
        self._fail("getSupportedOperations")

    def supported_operations_with_reasons(self, model: Model) -> list[tuple[bool, str]]:
        self._fail("getSupportedOperations")

    def prepare_model(self, model: Model, **kwargs: Any) -> NoReturn:
        self._fail("prepareModel")

    def prepare_model_sync(self, model: Model, **kwargs: Any) -> NoReturn:
        self._fail("prepareModel")

    def prepare_model_from_cache(
        self, model_cache: CacheInput, token: bytes, model: Model | None = None, **kwargs: Any
    ) -> NoReturn:
        self._fail("prepareModelFromCache")

    def allocate(
        self,
        desc: BufferDesc,
        prepared_models: list[Any],
        input_roles: list[BufferRole],
        output_roles: list[BufferRole],
    ) -> IBuffer:
        self._fail("allocate")

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> InvalidDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Which NN HAL method forms a device of each feature level serves (DESIGN.md §9).

A device serves every method form introduced at or below its feature level — as the
HIDL interfaces inherit (IDevice 1.3 extends 1.2 … 1.0), and as nnhal keeps the 1.3
forms for its AIDL levels, whose IDevice / IPreparedModel methods carry the same
canonical types (AIDL-only forms live in ``aidl.proto``). A method newer than the
level is refused with GENERAL_FAILURE: what a binder client sees when it calls a
transaction the service does not implement (UNKNOWN_TRANSACTION, which the AOSP
utils report as GENERAL_FAILURE). A *field* newer than the level inside a method the
level has (a deadline on a 1.2 burst execution) is INVALID_ARGUMENT instead.

Names are the HAL's; where AIDL reuses a 1.x name with other types the AIDL form
is named "AIDL <interface>.<method>", and methods of the AIDL-only objects carry
their interface (``IBurst.executeSynchronously``). Client and server
read the same table: the client picks the newest form a device serves.
"""

from __future__ import annotations

from nnhal.core.enums import HalVersion
from nnhal.core.errors import GeneralFailure, InvalidArgument

V = HalVersion

_BY_LEVEL: dict[HalVersion, tuple[str, ...]] = {
    V.V1_0: (
        "getCapabilities",
        "getSupportedOperations",
        "prepareModel",
        "getStatus",
        "execute",
    ),
    V.V1_1: ("getCapabilities_1_1", "getSupportedOperations_1_1", "prepareModel_1_1"),
    V.V1_2: (
        "getCapabilities_1_2",
        "getSupportedOperations_1_2",
        "prepareModel_1_2",
        "prepareModelFromCache",
        "getVersionString",
        "getType",
        "getSupportedExtensions",
        "getNumberOfCacheFilesNeeded",
        "execute_1_2",
        "executeSynchronously",
        "configureExecutionBurst",
    ),
    V.V1_3: (
        "getCapabilities_1_3",
        "getSupportedOperations_1_3",
        "prepareModel_1_3",
        "prepareModelFromCache_1_3",
        "allocate",
        "execute_1_3",
        "executeSynchronously_1_3",
        "executeFenced",
        "IBuffer.copyTo",
        "IBuffer.copyFrom",
        "IFencedExecutionCallback.getExecutionInfo",
    ),
    V.AIDL_V1: (
        "AIDL IDevice.allocate",
        "AIDL IPreparedModel.executeSynchronously",
        "AIDL IPreparedModel.executeFenced",
        "AIDL IPreparedModel.configureExecutionBurst",
        "AIDL IFencedExecutionCallback.getExecutionInfo",
        "IBurst.executeSynchronously",
        "IBurst.releaseMemoryResource",
    ),
    V.AIDL_V2: (),
    V.AIDL_V3: (),
    V.AIDL_V4: (
        "prepareModelWithConfig",
        "createReusableExecution",
        "executeSynchronouslyWithConfig",
        "executeFencedWithConfig",
        "IBurst.executeSynchronouslyWithConfig",
        "IExecution.executeSynchronously",
        "IExecution.executeFenced",
    ),
}

#: The feature level that introduced each method form.
METHOD_LEVEL: dict[str, HalVersion] = {name: level for level, names in _BY_LEVEL.items() for name in names}


def method_level(method: str) -> HalVersion:
    """The level that introduced ``method`` (KeyError for a name the table lacks: a bug)."""
    return METHOD_LEVEL[method]


def serves(level: HalVersion | int, method: str) -> bool:
    """True when a device of feature ``level`` serves ``method``."""
    return int(level) >= int(METHOD_LEVEL[method])


def require_method(level: HalVersion, method: str) -> None:
    """GENERAL_FAILURE naming both levels when a device of ``level`` lacks ``method``."""
    needed = METHOD_LEVEL[method]
    if level < needed:
        raise GeneralFailure(f"{method} needs NN HAL {needed.label}; this device serves {level.label}")


def require_field(level: HalVersion, needed: HalVersion, what: str, method: str) -> None:
    """INVALID_ARGUMENT when a call of ``method`` carries ``what``, which needs ``needed``."""
    if level < needed:
        raise InvalidArgument(f"{method}: {what} needs NN HAL {needed.label}; this device serves {level.label}")

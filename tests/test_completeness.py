"""Every operation of NN HAL 1.3 and AIDL V4 is registered, and every public vector's operations
are supported (at the highest level) or rejected as newer than the level (below it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nnhal.conformance.vectors import iter_cases
from nnhal.core.enums import OPERATION_INTRODUCED, HalVersion, OperationType
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import InlinePool
from nnhal.server.executor.registry import registered
from nnhal.server.executor.validate import supported_operations

VECTORS = Path(__file__).resolve().parents[1] / "conformance" / "vectors"


def test_every_operation_type_is_registered() -> None:
    missing = [op.name for op in OperationType if 0 <= op.value <= 105 and op not in registered()]
    assert not missing, f"unregistered: {missing}"
    assert len([op for op in OperationType if 0 <= op.value <= 105]) == 106
    # The AIDL additions and the level that introduced each (OperationType.aidl).
    assert {op: OPERATION_INTRODUCED[op] for op in OperationType if 102 <= op.value <= 105} == {
        OperationType.BATCH_MATMUL: HalVersion.AIDL_V2,
        OperationType.PACK: HalVersion.AIDL_V2,
        OperationType.MIRROR_PAD: HalVersion.AIDL_V3,
        OperationType.REVERSE: HalVersion.AIDL_V3,
    }


@pytest.mark.slow
def test_every_public_vector_is_supported() -> None:
    unsupported: list[str] = []
    for case in iter_cases([VECTORS]):
        if case.expect_failure:
            continue
        pools = [p.data for p in case.model.pools if isinstance(p, InlinePool)]
        ok, reasons = supported_operations(case.model, pools, HalVersion.AIDL_V4)
        if not all(ok):
            unsupported.append(f"{case.name}: {[r for r in reasons if r]}")
    assert not unsupported, f"{len(unsupported)} cases unsupported, e.g. {unsupported[:5]}"


def test_aidl_vectors_are_invalid_below_their_level() -> None:
    """A case of AIDL_V2 / AIDL_V3 is INVALID_ARGUMENT on a device one level below its own."""
    for folder, below in (("AIDL_V2", HalVersion.AIDL_V1), ("AIDL_V3", HalVersion.AIDL_V2)):
        for case in iter_cases([VECTORS / folder]):
            pools = [p.data for p in case.model.pools if isinstance(p, InlinePool)]
            with pytest.raises(InvalidArgument, match="needs NN HAL AIDL"):
                supported_operations(case.model, pools, below)
            assert all(supported_operations(case.model, pools, HalVersion(below + 10))[0])

"""Every NN HAL 1.3 operation is registered, and every public vector's operations are supported."""

from __future__ import annotations

from pathlib import Path

import pytest

from nnhal.conformance.vectors import iter_cases
from nnhal.core.enums import HalVersion, OperationType
from nnhal.core.types import InlinePool
from nnhal.server.executor.registry import registered
from nnhal.server.executor.validate import supported_operations

VECTORS = Path(__file__).resolve().parents[1] / "conformance" / "vectors"


def test_every_operation_type_is_registered() -> None:
    missing = [op.name for op in OperationType if 0 <= op.value <= 101 and op not in registered()]
    assert not missing, f"unregistered: {missing}"
    assert len([op for op in OperationType if 0 <= op.value <= 101]) == 102


@pytest.mark.slow
def test_every_public_vector_is_supported() -> None:
    unsupported: list[str] = []
    for case in iter_cases([VECTORS]):
        if case.expect_failure:
            continue
        pools = [p.data for p in case.model.pools if isinstance(p, InlinePool)]
        ok, reasons = supported_operations(case.model, pools, HalVersion.V1_3)
        if not all(ok):
            unsupported.append(f"{case.name}: {[r for r in reasons if r]}")
    assert not unsupported, f"{len(unsupported)} cases unsupported, e.g. {unsupported[:5]}"

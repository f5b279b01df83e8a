"""The VTS mutation families (nnhal.conformance.mutations) against the reference validator,
in-process: every mutation of a few small cases is INVALID_ARGUMENT from the
getSupportedOperations and the prepare-time validation (the VTS rule, issue #13), and the
families generate what the VTS would."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from nnhal.conformance.mutations import NOT_REPRESENTABLE, model_mutations, request_mutations
from nnhal.conformance.variants import build_request
from nnhal.conformance.vectors import TestCase, load_file
from nnhal.core.enums import HalVersion
from nnhal.core.errors import HalError
from nnhal.core.types import InlinePool
from nnhal.server.executor.validate import supported_operations, validate_full

VECTORS = Path(__file__).resolve().parents[1] / "conformance" / "vectors"
#: Small cases over several families of operations (one case of each file).
FILES = ["V1_0/add.json.gz", "V1_2/split_float_1.json.gz", "AIDL_V2/pack.json.gz", "V1_3/if_simple.json.gz"]


def _first(path: str) -> TestCase:
    return next(c for c in load_file(VECTORS / path) if not c.expect_failure)


@pytest.mark.parametrize("path", FILES)
def test_every_model_mutation_is_invalid_argument(path: str) -> None:
    case = _first(path)
    accepted: list[str] = []
    families: Counter[str] = Counter()
    for family, message, model in model_mutations(case.model):
        families[family] += 1
        pools = [p.data for p in model.pools if isinstance(p, InlinePool)]
        for step in ("getSupportedOperations", "prepare"):
            try:
                if step == "prepare":
                    validate_full(model, pools)
                else:
                    supported_operations(model, pools, HalVersion.AIDL_V4)
            except HalError as err:
                assert err.error_status.name == "INVALID_ARGUMENT", f"{family}: {message}: {err}"
            else:
                accepted.append(f"{family}: {message}: {step} accepted it")
    assert not accepted, accepted[:5]
    assert families["mutateOperationOperandTypeTest"] > 0 and families["removeOperationTest"] > 0


def test_request_mutations_remove_each_argument() -> None:
    case = _first("V1_0/add.json.gz")
    request = build_request(case)
    names = [(f, m) for f, m, _ in request_mutations(request)]
    assert names == [
        ("removeInputTest", "removed input 0"),
        ("removeInputTest", "removed input 1"),
        ("removeOutputTest", "removed output 0"),
    ]


def test_the_families_the_canonical_types_cannot_express_are_named() -> None:
    assert set(NOT_REPRESENTABLE) == {
        "mutateOperationTypeTest",
        "mutateExecutionPreferenceTest",
        "mutateExecutionPriorityTest",
    }

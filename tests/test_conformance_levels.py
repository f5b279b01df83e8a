"""The conformance runner and feature levels (issue #13), across processes: a device at 1.0
runs a V1_0 case in the modes 1.0 has (the others skipped saying why) and refuses an AIDL
case as its level requires (mode ``level``); ``validation`` mode refuses every mutation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nnhal.client.device import Device
from nnhal.conformance.runner import run_case
from nnhal.conformance.vectors import TestCase, load_file
from nnhal.testing.local_server import LocalServer

VECTORS = Path(__file__).resolve().parents[1] / "conformance" / "vectors"
pytestmark = pytest.mark.integration


def _first(path: str) -> TestCase:
    return next(c for c in load_file(VECTORS / path) if not c.expect_failure)


@pytest.fixture(scope="module")
def device_1_0() -> Iterator[Device]:
    with LocalServer("--feature-level", "1.0") as srv, Device.connect(srv.address) as dev:
        yield dev


def test_a_1_0_device_runs_v1_0_cases_and_skips_newer_modes(device_1_0: Device) -> None:
    results = run_case(device_1_0, _first("V1_0/add.json.gz"), ("sync", "async", "dynamic", "domain"))
    assert {m: r.status for m, r in results.items()} == {
        "sync": "passed",
        "async": "passed",
        "dynamic": "skipped",
        "domain": "skipped",
    }
    assert results["domain"].detail == "domain needs NN HAL 1.3; the device serves 1.0"


@pytest.mark.parametrize("path", ["AIDL_V2/batch_matmul.json.gz", "V1_3/rank.json.gz"])
def test_a_1_0_device_refuses_newer_cases_as_expected(device_1_0: Device, path: str) -> None:
    results = run_case(device_1_0, _first(path), ("sync", "async"))
    assert list(results) == ["level"] and results["level"].status == "passed", results
    assert "getSupportedOperations INVALID_ARGUMENT, prepareModel INVALID_ARGUMENT" in results["level"].detail


def test_validation_mode_refuses_every_mutation(device: Device) -> None:
    results = run_case(device, _first("V1_0/add.json.gz"), ("validation",))
    assert results["validation"].status == "passed", results["validation"].detail
    assert results["validation"].detail.endswith("mutations refused with INVALID_ARGUMENT")

"""The VTS executor modes of ``nnhal conformance`` (burst, burst_fast, fenced, timing,
reusable, config) on a few vector cases against real server processes, gated by level;
and what they rely on: the fenced duration after the fence, an IExecution held by its
fenced run, the AIDL executeFenced wrapper, ``nnhal info`` naming AIDL levels."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.conformance import executors
from nnhal.conformance.runner import LEVEL_MODE, run_case
from nnhal.conformance.vectors import TestCase, load_file
from nnhal.core.enums import ErrorStatus
from nnhal.testing.local_server import LocalServer
from tests.conftest import one_io_request, relu_chain

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

VECTORS = Path(__file__).resolve().parents[2] / "conformance" / "vectors"
#: The modes of ``nnhal.conformance.executors`` (their entries of the mode table).
EXECUTOR_MODES = ("burst", "burst_fast", "fenced", "timing", "reusable", "config")
MISSED = (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT)


def _cases(path: str, *names: str) -> list[TestCase]:
    cases = {c.name: c for c in load_file(VECTORS / path)}
    return [cases[n] for n in names]


@pytest.fixture(scope="module")
def few() -> list[TestCase]:
    """A 1.0 case, an AIDL V2 one, a zero-sized output (fenced runs must refuse it)."""
    return [
        *_cases("V1_0/add.json.gz", "add"),
        *_cases("AIDL_V2/pack.json.gz", "pack_FLOAT32_binary_axis0"),
        *_cases("V1_2/avg_pool_v1_2.json.gz", "avg_pool_v1_2_zero_sized_nhwc"),
    ]


def test_every_executor_mode_passes_at_level_8(device: Device, few: list[TestCase]) -> None:
    for case in few:
        results = run_case(device, case, EXECUTOR_MODES)
        assert set(results) == set(EXECUTOR_MODES), case.name
        bad = {m: r for m, r in results.items() if r.status != "passed"}
        assert not bad, (case.name, bad)
        assert all(r.detail for r in results.values())
    zero = run_case(device, few[2], ("fenced", "reusable", "config"))
    for mode in ("fenced", "reusable", "config"):
        assert "expected rejection (zero-sized output)" in zero[mode].detail
        assert "INVALID_ARGUMENT" in zero[mode].detail


@pytest.fixture(scope="module")
def server12() -> Iterator[LocalServer]:
    with LocalServer("--feature-level", "1.2") as srv:
        yield srv


def test_modes_a_level_lacks_are_skipped_saying_why(server12: LocalServer, few: list[TestCase]) -> None:
    with Device.connect(server12.address) as dev:
        results = run_case(dev, few[0], EXECUTOR_MODES)
        assert {m for m, r in results.items() if r.status == "passed"} == {"burst", "burst_fast", "timing"}
        for mode in ("fenced", "reusable", "config"):
            assert results[mode].status == "skipped"
            assert "the device serves 1.2" in results[mode].detail
        assert "1.3" in results["fenced"].detail and "AIDL V4" in results["reusable"].detail
        # A case newer than the device is one expected rejection, whatever the modes.
        newer = run_case(dev, few[1], EXECUTOR_MODES)
        assert set(newer) == {LEVEL_MODE} and newer[LEVEL_MODE].status == "passed"
        assert "INVALID_ARGUMENT" in newer[LEVEL_MODE].detail


def test_fenced_duration_after_the_fence_is_enforced(device: Device) -> None:
    x = np.ones((2, 4), np.float32)
    request = one_io_request(x)
    with device.prepare_model_sync(relu_chain(1, (2, 4))) as pm:
        first = pm.execute_fenced(request)
        assert first.get_execution_info(wait=True, timeout=60).status == ErrorStatus.NONE
        device.set_faults(execute_delay_ms=400)
        try:
            late13 = pm.execute_fenced(request, wait_for=[first], timeout_after_fence_ns=20_000_000)
            late_aidl = pm.execute_fenced_aidl(request, wait_for=[first], duration_ns=20_000_000)
            roomy = pm.execute_fenced_aidl(request, duration_ns=60_000_000_000, measure=True)
            for fence in (late13, late_aidl):
                info = fence.get_execution_info(wait=True, timeout=60)
                assert info.signalled and info.status in MISSED, info
            info = roomy.get_execution_info(wait=True, timeout=60)
            assert info.status == ErrorStatus.NONE, info.message
            assert info.timing_ns is not None and info.timing_launched_ns is not None  # the AIDL form's timings
        finally:
            device.clear_faults()


def test_a_reusable_executions_fenced_run_holds_it_until_its_fence_signals(device: Device) -> None:
    x = np.ones((2, 4), np.float32)
    pm = device.prepare_model_sync(relu_chain(1, (2, 4)))
    with pm, pm.create_reusable_execution(one_io_request(x)) as execution:
        device.set_faults(execute_delay_ms=200)
        try:
            fence = execution.execute_fenced()
            outcome = execution.compute(timeout=60)
            # The synchronous run waited for the fenced one: its fence had signalled.
            assert fence.get_execution_info(wait=False).signalled
        finally:
            device.clear_faults()
        assert outcome.status == ErrorStatus.NONE
        assert fence.get_execution_info(wait=True, timeout=60).status == ErrorStatus.NONE


def test_info_names_aidl_levels(server: LocalServer) -> None:
    # Its own process: the table printer binds the stdout of the process it was imported in.
    command = [sys.executable, "-m", "nnhal", "info", server.address]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "NN HAL AIDL V4 (feature level 8)" in done.stdout


def test_a_server_without_the_fast_path_skips_burst_fast_and_passes_the_grpc_burst(few: list[TestCase]) -> None:
    """``--no-fast-path`` is the server's choice: its fast-burst refusal is a skip saying so,
    and the gRPC burst (measured, then twice unmeasured: a burst repeat answers the third)
    passes."""
    with LocalServer("--no-fast-path") as srv, Device.connect(srv.address) as dev:
        results = run_case(dev, few[0], ("burst", "burst_fast"))
        assert results["burst"].status == "passed", results["burst"]
        assert "twice unmeasured" in results["burst"].detail
        assert results["burst_fast"].status == "skipped", results["burst_fast"]
        assert "offers no same-host fast path" in results["burst_fast"].detail
        assert executors.NOT_OFFERED in results["burst_fast"].detail  # the server's own words

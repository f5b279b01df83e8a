"""A seeded fault schedule replays exactly: against a server with ``--fault-seed``, a
conformance run gives the same report with ``--jobs 1`` and ``--jobs 3``, and a shard of it
(what a failed Indexed Job index reruns) gives the same result for each of its case runs
as the whole run did; both clients send the scope. ``--fault-seed`` without
``--enable-fault-injection`` is refused."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nnhal.client import aio
from nnhal.client.device import Device
from nnhal.client.faults import fault_scope
from nnhal.core.errors import HalError
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model

ROOT = Path(__file__).resolve().parents[2]
V1_0 = ROOT / "conformance" / "vectors" / "V1_0"
BUNDLES = ("add.json.gz", "add_quant8.json.gz", "conv_float.json.gz", "avg_pool_float_1.json.gz")
pytestmark = pytest.mark.integration


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("NNHAL_") and k != "JOB_COMPLETION_INDEX"}


@pytest.mark.timeout(240)
def test_a_seeded_run_replays_whatever_the_jobs_and_the_shard(tmp_path: Path) -> None:
    vectors = tmp_path / "vectors"
    vectors.mkdir()
    for name in BUNDLES:
        shutil.copy(V1_0 / name, vectors / name)
    runs = {"jobs1": ("--jobs", "1"), "jobs3": ("--jobs", "3"), "shard": ("--jobs", "2", "--shard", "1/2")}
    with LocalServer("--enable-fault-injection", "--fault-seed", "11", "--fault-rate", "0.1") as srv:
        procs = {
            name: subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "nnhal",
                    "conformance",
                    str(vectors),
                    "--target",
                    srv.address,
                    "--mode",
                    "sync",
                    "--mode",
                    "async",
                    *args,
                    "--report",
                    str(tmp_path / f"{name}.json"),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_env(),
            )
            for name, args in runs.items()
        }
        try:
            outs = {name: p.communicate(timeout=150) for name, p in procs.items()}
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=30)
    for name, p in procs.items():
        # Exit 1: the injected faults fail case runs, as they should.
        assert p.returncode == 1, (name, outs[name][0][-2000:] + outs[name][1][-2000:])
    reports = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in runs}
    whole = reports["jobs1"]
    differ = {k: (v, reports["jobs3"].get(k)) for k, v in whole.items() if reports["jobs3"].get(k) != v}
    assert reports["jobs3"].keys() == whole.keys() and not differ, differ
    injected = [v for v in whole.values() if v["status"] == "failed"]
    assert injected and all("(--fault-seed): seed 11" in v["detail"] for v in injected), injected
    assert any(v["status"] == "passed" for v in whole.values())
    shard = reports["shard"]
    differ = {k: (whole.get(k), v) for k, v in shard.items() if whole.get(k) != v}
    assert shard and not differ, differ
    print(
        f"\nseeded run: {len(injected)} of {len(whole)} case runs failed by injected faults, same with --jobs 1 and 3"
    )


def test_a_seed_needs_fault_injection() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nnhal", "serve", "--listen", "127.0.0.1:0", "--fault-seed", "3"],
        capture_output=True, text=True, timeout=60, env=_env(),
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "nnhal: error: --fault-seed makes a seeded fault schedule: it needs --enable-fault-injection"
    ]


def test_both_clients_carry_the_fault_scope() -> None:
    """Rate 1: every scoped call of a seeded method is faulted, every unscoped one is not;
    the sync and the asyncio client alike."""
    model = add_model()
    with LocalServer("--enable-fault-injection", "--fault-seed", "5", "--fault-rate", "1") as srv:
        with Device.connect(srv.address, client_name="seeded") as dev:
            assert dev.supported_operations(model) == [True]
            with fault_scope("sync-client/step"), pytest.raises(HalError, match=r"\(--fault-seed\): seed 5"):
                dev.supported_operations(model)
            assert dev.supported_operations(model) == [True]

        async def main() -> None:
            async with aio.Device.connect(srv.address, client_name="seeded-aio") as adev:
                assert await adev.supported_operations(model) == [True]
                with fault_scope("aio-client/step"):
                    with pytest.raises(HalError, match="scope aio-client/step, getSupportedOperations_1_3 call 0"):
                        await adev.supported_operations(model)
                    with pytest.raises(HalError, match="getSupportedOperations_1_3 call 1"):
                        await adev.supported_operations(model)

        asyncio.run(asyncio.wait_for(main(), 60))

"""The pytest plugin, used as a user would: a separate pytest run of a user's test file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

USER_TESTS = """
import numpy as np

from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import OperandType as T, OperationType as O


def test_runs_a_model(nnhal_device):
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [2])
    model = b.outputs(b.op(O.ADD, [x, x, b.int32(0)], T.TENSOR_FLOAT32, [2])).finish()
    with nnhal_device.prepare_model_sync(model) as pm:
        out = pm.execute([np.array([1, 2], np.float32)]).outputs[0]
    assert out.tolist() == [2.0, 4.0]


def test_faults_are_enabled(nnhal_device):
    nnhal_device.set_faults(execute_delay_ms=1)


def test_factory_starts_its_own(nnhal_server_factory):
    srv = nnhal_server_factory("--slots", "1", unix=True)
    assert srv.address.startswith("unix:")
"""


def test_a_users_suite_gets_a_server_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(textwrap.dedent(USER_TESTS))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout


USER_FAULT_TESTS = """
import numpy as np
import pytest

from nnhal.client.builder import ModelBuilder
from nnhal.core.enums import ErrorStatus, OperandType as T, OperationType as O
from nnhal.core.errors import GeneralFailure
from nnhal.client.device import Device
from nnhal.testing import FaultSetter


def _model():
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [2])
    return b.outputs(b.op(O.ADD, [x, x, b.int32(0)], T.TENSOR_FLOAT32, [2])).finish()


def test_an_injected_error_in_one_line(nnhal_device, nnhal_faults):
    with nnhal_device.prepare_model_sync(_model()) as pm:
        nnhal_faults.error("executeSynchronously_1_3", ErrorStatus.GENERAL_FAILURE, count=5)
        with pytest.raises(GeneralFailure, match="injected"):
            pm.execute([np.array([1, 2], np.float32)])


def test_faults_do_not_leak_into_the_next_test(nnhal_device):
    with nnhal_device.prepare_model_sync(_model()) as pm:
        assert pm.execute([np.array([1, 2], np.float32)]).outputs[0].tolist() == [2.0, 4.0]


def test_an_exit_on_its_own_server(nnhal_server_factory):
    srv = nnhal_server_factory("--enable-fault-injection")
    with Device.connect(srv.address) as dev:
        FaultSetter(dev).exit("prepareModel_1_3", point="after_launch", code=3)
        cb = dev.prepare_model(_model())
        assert cb.wait(30) and cb.status == ErrorStatus.DEAD_OBJECT
    assert srv.proc.wait(30) == 3
"""


def test_a_users_suite_sets_faults_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "test_user_faults.py").write_text(textwrap.dedent(USER_FAULT_TESTS))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout


def test_every_fixture_says_what_it_gives(tmp_path: Path) -> None:
    # `pytest --fixtures` is how a user finds them: each of ours carries a docstring.
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "--fixtures", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    for name in ("nnhal_server", "nnhal_server_factory", "nnhal_device", "nnhal_faults"):
        (at,) = [i for i, line in enumerate(lines) if line.split(" ", 1)[0] == name]
        assert lines[at + 1].startswith("    ") and "no docstring available" not in lines[at + 1], lines[at : at + 2]

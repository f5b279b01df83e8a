"""Work is bounded by the server's limits (issue #11 item 4), across the process boundary:
every tensor an execution allocates is charged to the client's memory before it exists,
and an execution without a client deadline ends at the server's maximum execution time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import ErrorStatus, OperandType as T, OperationType as O
from nnhal.core.errors import MissedDeadlinePersistent, ResourceExhaustedPersistent, ResourceExhaustedTransient
from nnhal.core.types import Model
from nnhal.testing import LocalServer
from tests.conftest import one_io_request, relu_chain

pytestmark = pytest.mark.integration

MIB = 1 << 20
#: What the server may hold beyond its memory limit: the interpreter, numpy and gRPC.
SLACK = 100 * MIB


def _amplifier(side: int) -> Model:
    """4 bytes in, a side x side float32 image in between (RESIZE_BILINEAR), one number out."""
    b = ModelBuilder()
    x = b.input(T.TENSOR_FLOAT32, [1, 1, 1, 1])
    big = b.op(O.RESIZE_BILINEAR, [x, b.int32(side), b.int32(side)], T.TENSOR_FLOAT32, [1, side, side, 1])
    axes = b.constant(np.array([1, 2], np.int32))
    return b.outputs(b.op(O.MEAN, [big, axes, b.int32(0)], T.TENSOR_FLOAT32, [1, 1])).finish()


def _peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_amplification_is_refused_before_it_allocates() -> None:
    limit = 64 * MIB
    with LocalServer("--memory-total", str(limit)) as srv, Device.connect(srv.address) as dev:
        before = _peak_rss(srv.pid)
        with (
            dev.prepare_model_sync(_amplifier(8192)) as pm,  # 256 MiB in between
            pytest.raises((ResourceExhaustedPersistent, ResourceExhaustedTransient)),
        ):
            pm.execute([np.ones((1, 1, 1, 1), np.float32)])
        with dev.prepare_model_sync(_amplifier(64)) as pm:  # 16 KiB: fits
            out = pm.execute([np.full((1, 1, 1, 1), 3.0, np.float32)]).outputs[0]
            np.testing.assert_allclose(out, [[3.0]])
        peak = _peak_rss(srv.pid)
        assert peak < before + limit + SLACK, f"peak RSS {peak / MIB:.0f} MiB, {before / MIB:.0f} MiB at start"
        queue = dev.remote.same_host  # its rings are this session's while it lives
        rings = queue.ring_bytes if queue is not None else 0
        assert dev.stats()["bytes_in_use"] == rings  # every reservation given back


def test_an_execution_without_deadline_ends_at_the_server_maximum() -> None:
    with LocalServer("--max-execution-seconds", "0.05") as srv, Device.connect(srv.address) as dev:
        x = np.ones((64, 4096), np.float32)
        with dev.prepare_model_sync(relu_chain(2000, (64, 4096))) as pm:
            with pytest.raises(MissedDeadlinePersistent, match="maximum"):
                pm.execute([x])
            # A client deadline is the client's to choose: the server maximum does not apply.
            outcome = pm.execute_request_async(one_io_request(x), timeout=60)
            assert outcome.wait(60) and outcome.status == ErrorStatus.NONE

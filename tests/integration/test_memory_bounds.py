"""Work is bounded by the server's limits (issue #11 item 4), across the process boundary:
every tensor an execution allocates is charged to the client's memory before it exists,
and an execution without a client deadline ends at the server's maximum execution time."""

from __future__ import annotations

import ctypes
import time
from pathlib import Path

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.core.builder import ModelBuilder
from nnhal.core.enums import ErrorStatus, OperandType as T, OperationType as O
from nnhal.core.errors import MissedDeadlinePersistent, ResourceExhaustedPersistent, ResourceExhaustedTransient
from nnhal.core.types import Model
from nnhal.testing import LocalServer
from tests.conftest import one_io_request, relu_chain, settled_bytes_in_use

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
        assert settled_bytes_in_use(dev, rings) == rings  # every reservation given back


def test_an_execution_without_deadline_ends_at_the_server_maximum() -> None:
    with LocalServer("--max-execution-seconds", "0.05") as srv, Device.connect(srv.address) as dev:
        x = np.ones((64, 4096), np.float32)
        # 6,000 operations: well past the 50 ms maximum on a quiet machine (2,000 ran in 44 ms).
        with dev.prepare_model_sync(relu_chain(6000, (64, 4096))) as pm:
            with pytest.raises(MissedDeadlinePersistent, match="maximum"):
                pm.execute([x])
            # A client deadline is the client's to choose: the server maximum does not apply.
            outcome = pm.execute_request_async(one_io_request(x), timeout=60)
            assert outcome.wait(60) and outcome.status == ErrorStatus.NONE


def _identity(side: int) -> Model:
    """A side x side float32 tensor through RESHAPE to its own shape."""
    b = ModelBuilder()
    shape = [side, side]
    x = b.input(T.TENSOR_FLOAT32, shape)
    return b.outputs(b.op(O.RESHAPE, [x, b.constant(np.array(shape, np.int32))], T.TENSOR_FLOAT32, shape)).finish()


def _minor_faults(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[7])


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "malloc_trim"), reason="glibc's allocator only")
def test_large_transfers_reuse_warm_heap_pages_and_give_them_back_when_idle() -> None:
    """A 16 MiB tensor in and out streams in 1 MiB chunks: the chunks freed by one call are the
    next call's, not faulted in afresh (the free top of a heap is not handed back at every
    ``free``), and once the calls stop the server's memory goes back to where it was."""
    side = 2048
    pages_moved = 2 * side * side * 4 // 4096  # in and out
    with LocalServer() as srv, Device.connect(srv.address) as dev, dev.prepare_model_sync(_identity(side)) as pm:
        x = np.arange(side * side, dtype=np.float32).reshape(side, side)
        np.testing.assert_array_equal(pm.execute([x]).outputs[0], x)
        time.sleep(1.0)  # the first call's memory goes back (a trim once the releases pause)
        start = _rss(srv.pid)
        faults = []
        for _ in range(4):
            before = _minor_faults(srv.pid)
            pm.execute([x])
            faults.append(_minor_faults(srv.pid) - before)
        # Without reuse every chunk is faulted in again: about one fault per page moved.
        assert min(faults) < pages_moved // 2, f"minor faults per call {faults}, {pages_moved} pages moved"
        end = time.monotonic() + 10
        while _rss(srv.pid) > start + 16 * MIB and time.monotonic() < end:
            time.sleep(0.1)
        assert _rss(srv.pid) <= start + 16 * MIB, f"RSS {_rss(srv.pid) / MIB:.0f} MiB, {start / MIB:.0f} at start"

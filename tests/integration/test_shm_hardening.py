"""Hostile shared memory across processes (issue #11): a client that shrinks its own
regions while the server uses them gets an error status and never faults the server
(the server reads and writes regions with preadv/pwrite, never through a mapping);
region files of killed clients are removed when their sessions end, and files a live
process holds or that were made by other means are never touched."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.memory import HELD_SUFFIX, SharedMemory
from nnhal.client.prepared_model import PreparedModel
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import BufferDesc, BufferRole, DataLocation, Request, RequestArgument
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, soak

pytestmark = pytest.mark.integration

#: Shrink races per test; 50 under NNHAL_SOAK (the issue #11 figure).
TRIALS = soak(12, 50)
#: Killed client processes holding regions; 20 under NNHAL_SOAK.
VICTIMS = soak(4, 20)
ERRORS = (ErrorStatus.INVALID_ARGUMENT, ErrorStatus.GENERAL_FAILURE)
N = 1024  # float32 elements per tensor
BYTES = 4 * N


@pytest.fixture(scope="module")
def shm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalServer, Path]]:
    """A server with its own shared-memory directory (nothing else lives there), shared by
    this module's tests: each uses its own session and regions, and each leaves the server
    alive and executing, which the next one relies on and checks again."""
    shm = tmp_path_factory.mktemp("shm")
    with LocalServer("--enable-fault-injection", "--shm-dir", str(shm)) as srv:
        yield srv, shm


def _request(inp: SharedMemory, out: SharedMemory) -> Request:
    return Request(
        (RequestArgument(location=DataLocation(0, 0, BYTES)), RequestArgument(location=DataLocation(0, BYTES, BYTES))),
        (RequestArgument(location=DataLocation(1, 0, BYTES)),),
        (inp.pool(), out.pool()),
    )


def _alive(srv: LocalServer, pm: PreparedModel) -> None:
    """The server process lives and still executes correctly."""
    assert srv.proc.poll() is None, srv.log()
    x = np.arange(N, dtype=np.float32).reshape(1, N)
    np.testing.assert_array_equal(pm.execute([x, x], timeout=30).outputs[0], 2 * x)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backing", ["file", "unsealed_memfd"])
@pytest.mark.parametrize("which", ["input", "output"])
def test_shrinking_a_region_during_an_execution(shm_server: tuple[LocalServer, Path], which: str, backing: str) -> None:
    """TRIALS executions each held 250 ms by the fault injection; the client shrinks one of
    its regions (a file, or a memfd without seals: the server saw no F_SEAL_SHRINK when it
    opened it, so it copies through it) 0-40 ms after the launch: each gets an error
    status, never a SIGBUS, and the server lives.
    (The hold is far longer than the shrink's delay so that a client thread a loaded machine
    keeps waiting still shrinks while the execution is held.)"""
    srv, _ = shm_server
    rng = random.Random(11)
    with Device.connect(srv.address, client_name="shrinker") as dev, dev.prepare_model_sync(add_model((1, N))) as pm:
        dev.set_faults(execute_delay_ms=250)
        for trial in range(TRIALS):
            memfd = backing == "unsealed_memfd"
            with (
                SharedMemory.create(dev, 2 * BYTES, memfd=memfd, seal=False) as inp,
                SharedMemory.create(dev, BYTES, memfd=memfd, seal=False) as out,
            ):
                inp.view(np.float32, (2 * N,))[:] = 1.0
                cb = pm.execute_request_async(_request(inp, out), timeout=30)
                time.sleep(rng.uniform(0.0, 0.04))
                victim = inp if which == "input" else out
                os.truncate(victim.path, rng.choice([0, 1, BYTES // 2, victim.size - 1]))
                assert cb.wait(30), f"trial {trial}: no answer"
                assert cb.status in ERRORS, f"trial {trial}: {cb.status.name} {cb.message}"
            assert srv.proc.poll() is None, f"trial {trial}: the server died\n{srv.log()}"
        dev.set_faults(execute_delay_ms=0)
        _alive(srv, pm)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backing", ["file", "unsealed_memfd"])
def test_shrinking_a_region_while_the_server_copies_it(shm_server: tuple[LocalServer, Path], backing: str) -> None:
    """No injected delay: a thread shrinks 8 MiB regions (files, or memfds without the seals,
    which the server copies through) at random moments while real executions read and write
    them (TRIALS trials, input and output in turn). Whatever the moment, an answer comes
    (success if the copy won, an error status if the shrink did) and the server lives."""
    srv, _ = shm_server
    n = 2 << 20
    rng = random.Random(12)
    shape = (1, n)
    memfd = backing == "unsealed_memfd"
    with Device.connect(srv.address, client_name="racer") as dev, dev.prepare_model_sync(add_model(shape)) as pm:
        for trial in range(TRIALS):
            with (
                SharedMemory.create(dev, 8 * n, memfd=memfd, seal=False) as inp,
                SharedMemory.create(dev, 4 * n, memfd=memfd, seal=False) as out,
            ):
                request = Request(
                    (
                        RequestArgument(location=DataLocation(0, 0, 4 * n)),
                        RequestArgument(location=DataLocation(0, 4 * n, 4 * n)),
                    ),
                    (RequestArgument(location=DataLocation(1, 0, 4 * n)),),
                    (inp.pool(), out.pool()),
                )
                victim = (inp, out)[trial % 2]
                shrink = threading.Timer(rng.uniform(0.0, 0.02), os.truncate, (victim.path, 4096))
                shrink.start()
                outcome = pm.execute_request(request, timeout=30)
                shrink.join(5)
                assert outcome.status in (ErrorStatus.NONE, *ERRORS), f"trial {trial}: {outcome.status.name}"
            assert srv.proc.poll() is None, f"trial {trial}: the server died\n{srv.log()}"
    with Device.connect(srv.address) as dev, dev.prepare_model_sync(add_model((1, N))) as pm2:
        _alive(srv, pm2)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("direction", ["copy_from", "copy_to"])
def test_ibuffer_copies_with_a_shrunk_region(shm_server: tuple[LocalServer, Path], direction: str) -> None:
    """IBuffer copyFrom / copyTo through a region shrunk before the call (an error
    status, every time) or during it (success or an error status); the server lives."""
    srv, _ = shm_server
    n = 1 << 20
    rng = random.Random(13)
    with Device.connect(srv.address, client_name="buffers") as dev, dev.prepare_model_sync(add_model((1, n))) as pm:
        buf = dev.allocate(BufferDesc((1, n)), [pm], [BufferRole(0, 0, 1.0)], [])
        buf.copy_from(np.ones((1, n), np.float32))
        for trial in range(TRIALS):
            racing = trial % 2 == 1
            with SharedMemory.create(dev, 4 * n, memfd=False) as region:
                region.view(np.float32, (n,))[:] = 1.0  # what a copyFrom that wins the race stores
                shrink = threading.Timer(rng.uniform(0.0, 0.01) if racing else 0.0, os.truncate, (region.path, 0))
                shrink.start()
                if not racing:
                    shrink.join(5)
                status = ErrorStatus.NONE
                try:
                    if direction == "copy_from":
                        buf.copy_from(region)
                    else:
                        buf.copy_to(region)
                except HalError as err:
                    status = err.error_status
                shrink.join(5)
                allowed = ERRORS if not racing else (ErrorStatus.NONE, *ERRORS)
                assert status in allowed, f"trial {trial}: {status.name}"
            assert srv.proc.poll() is None, f"trial {trial}: the server died\n{srv.log()}"
            if direction == "copy_from" and status != ErrorStatus.NONE:
                buf.copy_from(np.ones((1, n), np.float32))  # a failed copyFrom uninitializes it
        np.testing.assert_array_equal(buf.copy_to_array(np.float32, (1, n)), np.ones((1, n), np.float32))
        buf.release()


_VICTIM = """
import sys, time
import numpy as np
from nnhal.core.builder import ModelBuilder
from nnhal.client.device import Device
from nnhal.client.memory import SharedMemory
from nnhal.core.enums import OperandType as T, OperationType as O
from nnhal.core.types import DataLocation, Request, RequestArgument

dev = Device.connect(sys.argv[1], client_name="victim")
regions = [SharedMemory.create(dev, 64, memfd=False) for _ in range(3)]
if sys.argv[2] == "execute":
    b = ModelBuilder()
    x, y = b.input(T.TENSOR_FLOAT32, (2, 4)), b.input(T.TENSOR_FLOAT32, (2, 4))
    model = b.outputs(b.op(O.ADD, [x, y, b.int32(0)], T.TENSOR_FLOAT32, (2, 4))).finish()
    pm = dev.prepare_model_sync(model)
    request = Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (regions[0].pool(), regions[1].pool()),
    )
    pm.execute_request(request, timeout=30).raise_for_status()
print(" ".join(r.name for r in regions), flush=True)
time.sleep(300)
"""


@pytest.mark.timeout(300)
def test_killed_clients_leave_no_region_files(shm_server: tuple[LocalServer, Path]) -> None:
    """SIGKILL VICTIMS client processes holding 3 regions each (half executed with them):
    within 10 s none of their files is left; a live client's regions and a file made
    by other means stay."""
    srv, shm = shm_server
    with Device.connect(srv.address, client_name="bystander") as dev, SharedMemory.create(dev, 64, memfd=False) as mine:
        other = shm / f"{dev.shm_prefix}made-by-hand{HELD_SUFFIX[:-1]}"
        other.write_bytes(bytes(64))
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _VICTIM, srv.address, "execute" if k % 2 else "create"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for k in range(VICTIMS)
        ]
        try:
            names: list[str] = []
            for p in procs:
                assert p.stdout is not None
                line = p.stdout.readline()  # bounded by the test's timeout
                assert line, f"a victim failed: {p.stderr.read() if p.stderr else ''}"
                names += line.split()
            assert len(names) == 3 * VICTIMS and all((shm / name).exists() for name in names)
        finally:
            for p in procs:
                p.send_signal(signal.SIGKILL)
            for p in procs:
                p.wait(10)
                for stream in (p.stdout, p.stderr):
                    if stream is not None:
                        stream.close()
        end = time.monotonic() + 10
        left = names
        while left and time.monotonic() < end:
            time.sleep(0.1)
            left = [name for name in names if (shm / name).exists()]
        assert not left, f"{len(left)} region files of killed clients are left"
        assert mine.path.exists() and other.exists()  # held by a live process / not ours to remove
        assert srv.proc.poll() is None


def test_sealed_memfd_regions_are_used_in_place(shm_server: tuple[LocalServer, Path]) -> None:
    """The default region is a memfd sealed against size changes: the client cannot shrink
    it (EPERM), and the server maps it and writes the outputs straight into its pages."""
    srv, _ = shm_server
    with Device.connect(srv.address, client_name="sealed") as dev, dev.prepare_model_sync(add_model((1, N))) as pm:
        with SharedMemory.create(dev, 2 * BYTES) as inp, SharedMemory.create(dev, BYTES) as out:
            assert inp.name.startswith(f"{dev.shm_prefix}memfd.")
            with pytest.raises(PermissionError):
                os.ftruncate(inp.fileno(), 0)
            inp.view(np.float32, (2 * N,))[:] = np.arange(2 * N, dtype=np.float32)
            pm.execute_request(_request(inp, out), timeout=30).raise_for_status()
            x = np.arange(2 * N, dtype=np.float32)
            np.testing.assert_array_equal(out.view(np.float32, (N,)), x[:N] + x[N:])
        _alive(srv, pm)


def test_a_memfd_name_that_is_not_the_clients_memfd_is_refused(shm_server: tuple[LocalServer, Path]) -> None:
    """A pool naming a descriptor through /proc must name the client's memfd by its nonce:
    another descriptor of the same number (here the client's log file), a wrong nonce or
    a dead process is INVALID_ARGUMENT, and the server serves on."""
    srv, _ = shm_server
    with Device.connect(srv.address, client_name="liar") as dev, dev.prepare_model_sync(add_model((1, N))) as pm:
        with SharedMemory.create(dev, 2 * BYTES) as inp, SharedMemory.create(dev, BYTES) as out:
            real = inp.name
            _pid, fd, nonce = real[len(dev.shm_prefix) :].split(".")[1:]
            for name in (
                f"{dev.shm_prefix}memfd.{os.getpid()}.{fd}.{'0' * 24}",
                f"{dev.shm_prefix}memfd.{os.getpid()}.2.{nonce}",
                f"{dev.shm_prefix}memfd.999999999.{fd}.{nonce}",
            ):
                inp._name = name  # what a hostile client could send
                outcome = pm.execute_request(_request(inp, out), timeout=30)
                assert outcome.status == ErrorStatus.INVALID_ARGUMENT, (name, outcome.status.name)
            inp._name = real
        _alive(srv, pm)

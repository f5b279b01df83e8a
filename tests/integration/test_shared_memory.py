"""Shared-memory pools across the process boundary: constants, inputs and outputs in
regions the server maps, written in place; and the rules that keep it safe."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.memory import SharedMemory
from nnhal.core.enums import ErrorStatus
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument, SharedMemoryPool
from tests.conftest import add_model
from tests.validation_cases import BASE

pytestmark = pytest.mark.integration


def _shared_request(inp: SharedMemory, out: SharedMemory, n: int) -> Request:
    return Request(
        (RequestArgument(location=DataLocation(0, 0, n)), RequestArgument(location=DataLocation(0, n, n))),
        (RequestArgument(location=DataLocation(1, 0, n)),),
        (inp.pool(), out.pool()),
    )


@pytest.mark.parametrize("kind", ["ashmem", "mmap_fd", "hardware_buffer_blob"])
def test_inputs_and_outputs_in_shared_memory_written_in_place(device: Device, kind: str) -> None:
    assert device.shm_dir and device.shm_prefix
    with (
        device.prepare_model_sync(add_model()) as pm,
        SharedMemory.create(device, 64, kind) as inp,
        SharedMemory.create(device, 32, kind) as out,
    ):
        inp.view(np.float32, (16,))[:] = np.arange(16, dtype=np.float32)
        outcome = pm.execute_request(_shared_request(inp, out, 32))
        assert outcome.status == ErrorStatus.NONE, outcome.message
        assert outcome.output_pools == {}  # nothing came back through gRPC
        np.testing.assert_array_equal(out.view(np.float32, (2, 4)), (np.arange(8) + np.arange(8, 16)).reshape(2, 4))
        cb = pm.execute_request_async(_shared_request(inp, out, 32))
        assert cb.wait(10) and cb.status == ErrorStatus.NONE


@pytest.mark.parametrize("memfd", [False, True])
def test_constants_in_a_shared_pool(device: Device, memfd: bool) -> None:
    pool = BASE.pools[0]
    assert isinstance(pool, InlinePool)
    with SharedMemory.from_array(device, np.frombuffer(pool.data, np.uint8), memfd=memfd, seal=False) as region:
        model = replace(BASE, pools=(region.pool(),))
        with device.prepare_model_sync(model) as pm:
            out = pm.execute([np.ones((2, 40), np.float32)])
            np.testing.assert_array_equal(out.outputs[0], np.full((2, 40), 1.5, np.float32))
            # Constants were copied at preparation: shrinking the region cannot hurt the server.
            os.truncate(region.path, 0)
            again = pm.execute([np.ones((2, 40), np.float32)])
            np.testing.assert_array_equal(again.outputs[0], out.outputs[0])


def _bad(device: Device, pool: SharedMemoryPool) -> str:
    with device.prepare_model_sync(add_model()) as pm:
        req = Request(
            (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
            (RequestArgument(location=DataLocation(1, 0, 32)),),
            (pool, InlinePool(b"", 32)),
        )
        outcome = pm.execute_request(req)
        assert outcome.status == ErrorStatus.INVALID_ARGUMENT
        return outcome.message


def test_shared_memory_rules(device: Device, tmp_path: Path) -> None:
    prefix, shm = device.shm_prefix, Path(device.shm_dir)
    assert "plain file name" in _bad(device, SharedMemoryPool("ashmem", "../etc/passwd", 0, 64))
    assert "must start with" in _bad(device, SharedMemoryPool("ashmem", "other-name", 0, 64))
    assert "cannot open" in _bad(device, SharedMemoryPool("ashmem", prefix + "does-not-exist", 0, 64))
    assert "unknown shared memory kind" in _bad(device, SharedMemoryPool("pipe", prefix + "x", 0, 64))
    target = tmp_path / "secret"
    target.write_bytes(b"\0" * 64)
    link = shm / f"{prefix}link-{os.getpid()}"
    link.symlink_to(target)
    try:
        assert "cannot open" in _bad(device, SharedMemoryPool("ashmem", link.name, 0, 64))
    finally:
        link.unlink()
    with SharedMemory.create(device, 64) as region:
        assert "outside" in _bad(device, replace(region.pool(), size=128))
        assert "outside" in _bad(device, region.pool(offset=32, size=64))
        # A request location past the mapped part of a valid region is refused too.
        with device.prepare_model_sync(add_model()) as pm:
            req = Request(
                (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 48, 32))),
                (RequestArgument(location=DataLocation(1, 0, 32)),),
                (region.pool(), InlinePool(b"", 32)),
            )
            assert pm.execute_request(req).status == ErrorStatus.INVALID_ARGUMENT
    assert device.capabilities().operand_performance  # the server survived it all


@pytest.mark.parametrize("memfd", [False, True])
def test_region_shrunk_before_use_is_refused(device: Device, memfd: bool) -> None:
    """A file, or a memfd without seals (the copy path)."""
    with (
        device.prepare_model_sync(add_model()) as pm,
        SharedMemory.create(device, 64, memfd=memfd, seal=False) as inp,
        SharedMemory.create(device, 32, memfd=memfd, seal=False) as out,
    ):
        os.truncate(inp.path, 8)
        outcome = pm.execute_request(_shared_request(inp, out, 32))
        assert outcome.status == ErrorStatus.INVALID_ARGUMENT
    assert device.capabilities().operand_performance


@pytest.mark.parametrize("memfd", [False, True])
def test_region_shrunk_while_mapped_is_refused(device: Device, memfd: bool) -> None:
    """Shrinking a region the server used before (a file, or a memfd without seals) must
    give INVALID_ARGUMENT on the next use, not SIGBUS in the server."""
    with (
        device.prepare_model_sync(add_model()) as pm,
        SharedMemory.create(device, 64, memfd=memfd, seal=False) as inp,
        SharedMemory.create(device, 32, memfd=memfd, seal=False) as out,
    ):
        assert pm.execute_request(_shared_request(inp, out, 32)).status == ErrorStatus.NONE  # now mapped
        os.truncate(inp.path, 8)
        for _ in range(3):
            outcome = pm.execute_request(_shared_request(inp, out, 32))
            assert outcome.status == ErrorStatus.INVALID_ARGUMENT, outcome.message
    assert device.capabilities().operand_performance


def test_shared_pools_are_refused_from_remote_peers(tmp_path: Path) -> None:
    """Only same-host peers may name shared regions (unless --shm-allow-remote). No test
    may use a non-loopback address, so the peer check and the binding are tested directly."""
    from nnhal.core.errors import InvalidArgument
    from nnhal.server.memory import bind_pools
    from nnhal.server.session import is_local_address
    from nnhal.server.shared_regions import SharedMemoryPolicy

    def peer(address: str) -> bool:
        return is_local_address(address)

    assert peer("unix:/tmp/x.sock") and peer("ipv4:127.0.0.1:5000") and peer("ipv6:[::1]:5000")
    assert not peer("ipv4:10.1.2.3:5000") and not peer("ipv6:[fe80::1]:5000") and not peer("")
    (tmp_path / "nnhal-r").write_bytes(bytes(64))
    pool = SharedMemoryPool("ashmem", "nnhal-r", 0, 64)
    with pytest.raises(InvalidArgument):
        bind_pools((pool,), SharedMemoryPolicy(tmp_path), set(), None, is_local_peer=False)
    bind_pools((pool,), SharedMemoryPolicy(tmp_path, allow_remote=True), set(), None, is_local_peer=False).close()
    bind_pools((pool,), SharedMemoryPolicy(tmp_path), set(), None, is_local_peer=True).close()


class _Host:
    def __init__(self, directory: str, memfd: str) -> None:
        self.shm_dir, self.shm_prefix, self.shm_memfd = directory, "nnhal-", memfd


def test_regions_are_memfds_only_for_a_server_that_can_open_them(tmp_path: Path, device: Device) -> None:
    """By default a memfd when the server announced this process's PID namespace and user
    (as a local server does), a file in the directory otherwise (a server in another
    container sharing the directory, another user, or one that opens no client memfds)."""
    from nnhal.client.memory import memfd_available
    from nnhal.core.host import memfd_identity

    if not memfd_available():
        pytest.skip("no memfd on this system")
    assert device.shm_memfd == memfd_identity()
    with SharedMemory.create(device, 64) as region:
        assert region.name.startswith(f"{device.shm_prefix}memfd.")
    for announced in ("", "1:2", f"{memfd_identity()}0"):
        with SharedMemory.create(_Host(str(tmp_path), announced), 64) as region:
            assert region.path.parent == tmp_path and not region.name.startswith("nnhal-memfd.")

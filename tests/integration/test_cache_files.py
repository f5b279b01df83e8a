"""Cache files the client holds open, read by a server on the same host through the descriptor."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from nnhal.client.cache_files import CacheFile, server_reads_held
from nnhal.client.device import Device
from nnhal.client.remote.messages import prepare_from_cache_request
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import InvalidArgument
from nnhal.server.cache_files import HeldFile, read_held
from nnhal.server.shared_regions import SharedMemoryPolicy
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, ones

pytestmark = pytest.mark.integration
TOKEN = bytes(range(32))


def _held(f: CacheFile, **change: int) -> HeldFile:
    fields = {"pid": os.getpid(), "fd": f.fd, "dev": f.dev, "ino": f.ino, "size": f.size, **change}
    return HeldFile(**fields)


def test_request_names_the_descriptor_only_when_the_server_reads_it(tmp_path: Path) -> None:
    with CacheFile.save(tmp_path / "c", b"cache bytes") as f:
        held = prepare_from_cache_request("s", f, TOKEN, None, held=True).model_cache[0]
        assert held.HasField("held") and held.held.fd == f.fd and held.held.size == 11 and not held.data
        inline = prepare_from_cache_request("s", f, TOKEN, None, held=False).model_cache[0]
        assert not inline.HasField("held") and inline.data == b"cache bytes"
    assert not server_reads_held("") and not server_reads_held("1:2")


def test_read_held_checks_the_file_and_who_asks(tmp_path: Path) -> None:
    policy = SharedMemoryPolicy(tmp_path)
    with CacheFile.save(tmp_path / "c", b"x" * 5000) as f:
        assert read_held(_held(f), policy, True, "model cache file 0") == b"x" * 5000
        for bad in ({"ino": f.ino + 1}, {"size": 4999}, {"fd": 987654}):
            with pytest.raises(InvalidArgument, match="cache file"):
                read_held(_held(f, **bad), policy, True, "model cache file 0")
        with pytest.raises(InvalidArgument, match="no cache file by descriptor"):
            read_held(_held(f), policy, False, "model cache file 0")
        with pytest.raises(InvalidArgument, match="no cache file by descriptor"):
            read_held(_held(f), SharedMemoryPolicy(tmp_path, allow_memfd=False), True, "model cache file 0")
    os.mkdir(tmp_path / "dir")  # a directory is no cache file
    fd = os.open(tmp_path / "dir", os.O_RDONLY)
    try:
        st = os.fstat(fd)
        with pytest.raises(InvalidArgument, match="not the cache file"):
            read_held(HeldFile(os.getpid(), fd, st.st_dev, st.st_ino, st.st_size), policy, True, "f")
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", ["cpu", "litert"])
def test_prepare_from_a_held_cache_file_on_a_fresh_server(tmp_path: Path, kind: str) -> None:
    # litert: the cache is read in two pieces, the flatbuffer straight into LiteRT's bytes.
    if kind == "litert":
        pytest.importorskip("ai_edge_litert")
    secret = tmp_path / "secret"
    args = ("--cache-secret-file", str(secret), "--device", kind)
    with LocalServer(*args) as srv, Device.connect(srv.address) as dev:
        saved = CacheFile.save(
            tmp_path / "model.cache", dev.prepare_model_sync(add_model(), cache_token=TOKEN).model_cache
        )
    with saved, LocalServer(*args) as srv, Device.connect(srv.address) as dev:
        if not server_reads_held(dev.shm_memfd):
            pytest.skip("this server cannot open this process's descriptors")
        with dev.prepare_model_from_cache(saved, TOKEN, add_model()).get(30) as pm:
            np.testing.assert_array_equal(pm.execute([ones(), ones()]).outputs[0], 2 * ones())
        # Tampered in place (same file, same size): the server authenticates what it read.
        data = bytearray(saved.read())
        data[-1] ^= 1
        with open(saved.path, "r+b") as w:
            w.write(data)
        cb = dev.prepare_model_from_cache(saved, TOKEN)
        assert cb.wait(10) and cb.status == ErrorStatus.INVALID_ARGUMENT and "authentication" in cb.message
        # Grown after the client opened it: not the file the client named any more.
        with open(saved.path, "ab") as w:
            w.write(b"more")
        cb = dev.prepare_model_from_cache(saved, TOKEN)
        assert cb.wait(10) and cb.status == ErrorStatus.INVALID_ARGUMENT and "not the cache file" in cb.message

"""The server's event loop (``event_loop.new_event_loop``, ``ServerOptions.event_loop``): uvloop's
where installed, asyncio's on request, and a server on either answers alike."""

from __future__ import annotations

import asyncio
import importlib.util

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.server.defaults import EVENT_LOOPS
from nnhal.server.rpc.event_loop import new_event_loop
from nnhal.server.rpc.serve import Server
from nnhal.server.rpc.server_options import ServerOptions
from tests.conftest import add_model

pytestmark = pytest.mark.timeout(60)
HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None


def _kind(loop: asyncio.AbstractEventLoop) -> str:
    try:
        return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
    finally:
        loop.close()


def test_asyncio_is_the_standard_librarys_loop() -> None:
    assert _kind(new_event_loop("asyncio")) == "asyncio"


def test_auto_is_uvloop_where_installed() -> None:
    assert _kind(new_event_loop("auto")) == ("uvloop" if HAS_UVLOOP else "asyncio")


@pytest.mark.skipif(not HAS_UVLOOP, reason="uvloop is not installed here")
def test_uvloop_on_request() -> None:
    assert _kind(new_event_loop("uvloop")) == "uvloop"


def test_an_unknown_loop_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown event loop 'trio'"):
        new_event_loop("trio")
    assert "trio" not in EVENT_LOOPS


@pytest.mark.parametrize("kind", ["asyncio", "auto"])
def test_a_server_on_either_loop_executes(kind: str) -> None:
    server = Server(ServerOptions(listen=["127.0.0.1:0"], fast_path=False, max_threads=4, event_loop=kind))
    try:
        server.start()
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        with Device.connect(server.addresses[0]) as dev, dev.prepare_model_sync(add_model()) as pm:
            for _ in range(3):  # the first runs on a worker, later ones on the loop's thread
                assert np.array_equal(pm.execute([a, a]).outputs[0], a + a)
    finally:
        server.stop(grace=0)

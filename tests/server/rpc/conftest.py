"""An in-process server for the servicer tests: each servicer through a real channel.

One server per feature level and module (loopback, port 0, fault injection on), a client
device with an ADD model prepared on it, and the raw stubs of that client's channel.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.remote.transport import Stubs
from nnhal.core.enums import HalVersion
from nnhal.core.types import DataLocation, InlinePool, Request, RequestArgument
from nnhal.server.driver import DeviceConfig
from nnhal.server.executions import repeat
from nnhal.server.rpc.serve import Server
from nnhal.server.rpc.server_options import ServerOptions
from tests.conftest import add_model


@dataclass
class Served:
    server: Server
    dev: Device
    stubs: Stubs
    session: str
    handle: str


def add_request(value: float = 1.0) -> Request:
    """a + b of two 2x4 floats filled with ``value`` (inline pools: inputs, then the output)."""
    data = np.full(16, value, np.float32).tobytes()
    return Request(
        (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 32, 32))),
        (RequestArgument(location=DataLocation(1, 0, 32)),),
        (InlinePool(data, 64), InlinePool(b"", 32)),
    )


def serve(level: HalVersion) -> Generator[Served, None, None]:
    config = DeviceConfig(fault_injection=True, feature_level=level)
    server = Server(ServerOptions(listen=["127.0.0.1:0"], device=config, max_threads=32))
    try:
        server.start()
        with Device.connect(server.addresses[0]) as dev:
            pm = dev.prepare_model_sync(add_model())
            yield Served(server, dev, dev.remote.stubs, dev.remote.session_id, pm.handle)
            dev.clear_faults()
    finally:
        server.stop(grace=0)


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    """A device of the newest level."""
    yield from serve(HalVersion.AIDL_V4)


@pytest.fixture(scope="module")
def served12() -> Iterator[Served]:
    """A 1.2 device: the 1.3 and AIDL forms are newer than it."""
    yield from serve(HalVersion.V1_2)


def spy_repeats(monkeypatch: pytest.MonkeyPatch, method: str) -> list[bool]:
    """Per message of ``method`` a ``repeat.Repeat`` was asked about (a burst's, or a unary
    call's: ``repeats.Repeats``), whether it answered it (else: the full path)."""
    answered: list[bool] = []
    real = repeat.Repeat.answer

    def spy(self: repeat.Repeat, *args: Any) -> bytes | None:
        answer = real(self, *args)
        if self.method.name == method:
            answered.append(answer is not None)
        return answer

    monkeypatch.setattr(repeat.Repeat, "answer", spy)
    return answered

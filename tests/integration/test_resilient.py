"""Resilient wrappers against real servers: the four cases per method (AOSP utils
style) — ok, HAL error (passes through, no recovery), dead + failed recovery
(DEAD_OBJECT in bounded time), dead + successful recovery (a new server on the
same unix socket; the call succeeds transparently and prepared models are
re-created) — plus a recovered device that differs (InvalidDevice) and
concurrent callers sharing one recovery.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.interfaces import IDevice
from nnhal.client.invalid_device import InvalidDevice
from nnhal.client.prepared_model import PreparedModel
from nnhal.client.resilient import ResilientDevice, ResilientPreparedModel
from nnhal.core.enums import DeviceStatus, DeviceType, ErrorStatus
from nnhal.core.errors import DeadObject, GeneralFailure, InvalidArgument
from nnhal.core.types import (
    BufferDesc,
    BufferRole,
    Capabilities,
    DataLocation,
    InlinePool,
    Request,
    RequestArgument,
)
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, ones

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

#: Every failure in these tests must surface within this many seconds.
BOUND_S = 5.0


class Restartable:
    """A server on a fixed unix socket that can be killed and started again there."""

    def __init__(self, *args: str) -> None:
        self._dir = tempfile.mkdtemp(prefix="nnr-")  # short: unix socket paths are limited to ~107 bytes
        self.address = f"unix:{Path(self._dir) / 's.sock'}"
        self._args = args
        self.server: LocalServer | None = None
        self.start()

    def start(self, *args: str) -> None:
        self.server = LocalServer(*(args or self._args), listen=self.address)

    def kill(self) -> None:
        assert self.server is not None
        self.server.kill()
        self.server.stop()
        self.server = None

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


@pytest.fixture
def restartable() -> Iterator[Restartable]:
    srv = Restartable()
    try:
        yield srv
    finally:
        srv.close()


class CountingFactory:
    def __init__(self, address: str, timeout: float = 1.0) -> None:
        self.address = address
        self.timeout = timeout
        self.calls = 0

    def __call__(self) -> IDevice:
        self.calls += 1
        return Device.connect(self.address, client_name="pytest-resilient", timeout=self.timeout)


def _request_2x4(a: np.ndarray, b: np.ndarray) -> Request:
    data = a.tobytes() + b.tobytes()
    n = a.nbytes
    return Request(
        inputs=(RequestArgument(location=DataLocation(0, 0, n)), RequestArgument(location=DataLocation(0, n, n))),
        outputs=(RequestArgument(location=DataLocation(1, 0, n)),),
        pools=(InlinePool(data, len(data)), InlinePool(b"", n)),
    )


# ---------------------------------------------------------------- ok


def test_ok_calls_go_through_without_recovery(server: LocalServer) -> None:
    factory = CountingFactory(server.address)
    with ResilientDevice(factory) as rd:
        model = add_model()
        assert rd.supported_operations(model) == [True]
        assert rd.status() in (DeviceStatus.AVAILABLE, DeviceStatus.BUSY)
        assert rd.type() == DeviceType.CPU
        assert rd.name and rd.version_string() and isinstance(rd.capabilities(), Capabilities)
        pm = rd.prepare_model(model).get(BOUND_S)
        assert isinstance(pm, ResilientPreparedModel)
        out = pm.execute([ones(), 2 * ones()]).outputs[0]
        np.testing.assert_array_equal(out, 3 * ones())
        outcome = pm.execute_async([ones(), ones()]).get(BOUND_S)
        np.testing.assert_array_equal(outcome.outputs[0], 2 * ones())
        result = pm.execute_request(_request_2x4(ones(), ones()))
        assert result.status == ErrorStatus.NONE
        np.testing.assert_array_equal(np.frombuffer(result.output_pools[1], np.float32), np.full(8, 2.0))
        pm.release()
        assert factory.calls == 1 and rd.recoveries == 0 and pm.recoveries == 0


# ---------------------------------------------------------------- error


def test_hal_errors_pass_through_without_recovery(server: LocalServer) -> None:
    factory = CountingFactory(server.address)
    with ResilientDevice(factory) as rd:
        model = add_model()
        bad = dataclasses.replace(model, main=dataclasses.replace(model.main, input_indexes=(0, 99)))
        with pytest.raises(InvalidArgument):
            rd.supported_operations(bad)
        with pytest.raises(InvalidArgument):
            rd.prepare_model(bad).get(BOUND_S)
        pm = rd.prepare_model_sync(model)
        with pytest.raises(InvalidArgument):
            pm.execute([np.ones((3, 4), np.float32), ones()])  # wrong shape: the server says no
        bad_request = dataclasses.replace(_request_2x4(ones(), ones()), pools=())
        assert pm.execute_request(bad_request).status == ErrorStatus.INVALID_ARGUMENT
        assert factory.calls == 1 and rd.recoveries == 0 and pm.recoveries == 0


# ---------------------------------------------------------------- dead + failed recovery


def test_dead_and_failed_recovery_is_dead_object_in_bounded_time(restartable: Restartable) -> None:
    factory = CountingFactory(restartable.address, timeout=0.5)
    rd = ResilientDevice(factory)
    model = add_model()
    pm = rd.prepare_model_sync(model)
    restartable.kill()

    calls: list[tuple[str, Callable[[], Any]]] = [
        ("supported_operations", lambda: rd.supported_operations(model)),
        ("status", rd.status),
        ("prepare_model", lambda: rd.prepare_model(model).get(BOUND_S)),
        ("execute", lambda: pm.execute([ones(), ones()])),
        ("execute_async", lambda: pm.execute_async([ones(), ones()]).get(BOUND_S)),
    ]
    for what, call in calls:
        start = time.monotonic()
        with pytest.raises(DeadObject, match="failed to recover") as info:
            call()
        assert time.monotonic() - start < BOUND_S, what
        assert info.value.error_status == ErrorStatus.DEAD_OBJECT
    start = time.monotonic()
    outcome = pm.execute_request(_request_2x4(ones(), ones()))
    assert outcome.status == ErrorStatus.DEAD_OBJECT and "failed to recover" in outcome.message
    assert time.monotonic() - start < BOUND_S
    assert rd.recoveries == 0 and rd.is_valid

    # A later call recovers once a server is back.
    restartable.start()
    np.testing.assert_array_equal(pm.execute([ones(), ones()]).outputs[0], 2 * ones())
    assert rd.recoveries == 1 and pm.recoveries == 1
    rd.close()


# ---------------------------------------------------------------- dead + successful recovery


def test_dead_and_successful_recovery_is_transparent(restartable: Restartable) -> None:
    factory = CountingFactory(restartable.address)
    rd = ResilientDevice(factory)
    model = add_model()
    pm = rd.prepare_model_sync(model)
    a, b = np.arange(8, dtype=np.float32).reshape(2, 4), np.full((2, 4), 0.5, np.float32)
    before = pm.execute([a, b]).outputs[0]
    first_inner = pm.prepared_model

    restartable.kill()
    restartable.start()

    after = pm.execute([a, b]).outputs[0]
    np.testing.assert_array_equal(after, before)
    assert pm.prepared_model is not first_inner  # re-prepared on the new server
    assert pm.recoveries == 1 and rd.recoveries == 1 and factory.calls == 2
    assert rd.supported_operations(model) == [True]
    assert rd.is_valid

    # Second death: the async forms and the in-band form recover as well.
    restartable.kill()
    restartable.start()
    outcome = pm.execute_async([a, b]).get(BOUND_S)
    np.testing.assert_array_equal(outcome.outputs[0], before)
    restartable.kill()
    restartable.start()
    result = pm.execute_request(_request_2x4(a, b))
    assert result.status == ErrorStatus.NONE
    np.testing.assert_array_equal(np.frombuffer(result.output_pools[1], np.float32).reshape(2, 4), before)
    restartable.kill()
    restartable.start()
    pm2 = rd.prepare_model(model).get(BOUND_S)
    np.testing.assert_array_equal(pm2.execute([a, b]).outputs[0], before)
    assert rd.recoveries == 4
    rd.close()


def test_concurrent_callers_share_one_recovery(restartable: Restartable) -> None:
    factory = CountingFactory(restartable.address)
    rd = ResilientDevice(factory)
    model = add_model()
    pm = rd.prepare_model_sync(model)
    restartable.kill()
    restartable.start()

    results: list[object] = []
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait(BOUND_S)
        try:
            results.append(pm.execute([ones(), ones()]).outputs[0].sum())
        except Exception as err:  # collected and asserted below
            results.append(err)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND_S * 2)
    assert results == [16.0] * 8
    assert rd.recoveries == 1 and pm.recoveries == 1 and factory.calls == 2
    rd.close()


# ---------------------------------------------------------------- prepareModelFromCache and allocate

TOKEN = bytes(range(32))
ROLE = BufferRole(model_index=0, io_index=0, frequency=1.0)


def test_from_cache_and_allocate_in_the_four_cases(tmp_path: Path) -> None:
    """ok; a HAL error passes through without recovery; dead + failed recovery is DEAD_OBJECT in
    bounded time; dead + successful recovery: allocate re-creates the resilient prepared model
    it names (from the same cache and token, on a server with the same cache secret) and the
    buffer from before the death is DEAD_OBJECT (buffers are not re-created)."""
    srv = Restartable("--cache-secret-file", str(tmp_path / "secret"))
    try:
        rd = ResilientDevice(CountingFactory(srv.address, timeout=2.0))
        inner = rd.prepare_model_sync(add_model(), cache_token=TOKEN).prepared_model
        assert isinstance(inner, PreparedModel)  # the device's own, which keeps its cache
        blob = inner.model_cache
        cached = rd.prepare_model_from_cache(blob, TOKEN, add_model()).get(BOUND_S)
        assert isinstance(cached, ResilientPreparedModel)
        np.testing.assert_array_equal(cached.execute([ones(), ones()]).outputs[0], 2 * ones())
        buf = rd.allocate(BufferDesc(), [cached], [ROLE], [])
        buf.copy_from(ones())

        with pytest.raises(InvalidArgument):
            rd.prepare_model_from_cache(blob[:8], TOKEN).get(BOUND_S)
        with pytest.raises(InvalidArgument):
            rd.allocate(BufferDesc(), [cached], [BufferRole(0, 5, 1.0)], [])
        assert rd.recoveries == 0

        srv.kill()
        for call in (
            lambda: rd.prepare_model_from_cache(blob, TOKEN).get(BOUND_S),
            lambda: rd.allocate(BufferDesc(), [cached], [ROLE], []),
        ):
            with pytest.raises(DeadObject, match="failed to recover dead device"):
                call()
        assert rd.recoveries == 0 and cached.recoveries == 0

        srv.start()
        with pytest.raises(DeadObject):
            buf.copy_from(ones())
        again = rd.allocate(BufferDesc(), [cached], [ROLE], [])
        assert rd.recoveries == 1 and cached.recoveries == 1
        again.copy_from(3 * ones())
        np.testing.assert_array_equal(again.copy_to_array(np.float32, (2, 4)), 3 * ones())
        np.testing.assert_array_equal(cached.execute([ones(), 2 * ones()]).outputs[0], 3 * ones())
        fresh = rd.prepare_model_from_cache(blob, TOKEN, add_model()).get(BOUND_S)
        np.testing.assert_array_equal(fresh.execute([ones(), ones()]).outputs[0], 2 * ones())
        assert rd.recoveries == 1 and cached.recoveries == 1
        rd.close()
    finally:
        srv.close()


# ---------------------------------------------------------------- recovered device differs


def test_recovered_device_that_differs_becomes_invalid(restartable: Restartable) -> None:
    rd = ResilientDevice(CountingFactory(restartable.address))
    model = add_model()
    pm = rd.prepare_model_sync(model)
    original_version = rd.version_string()
    restartable.kill()
    restartable.start("--feature-level", "1.2")

    with pytest.raises(GeneralFailure, match="InvalidDevice"):
        rd.supported_operations(model)
    assert not rd.is_valid and isinstance(rd.device, InvalidDevice)
    assert rd.version_string() == original_version and rd.feature_level == 80
    with pytest.raises(GeneralFailure, match="InvalidDevice"):
        rd.prepare_model_sync(model)
    # The prepared model cannot be re-created on an invalid device: DEAD_OBJECT, with the reason.
    with pytest.raises(DeadObject, match="InvalidDevice"):
        pm.execute([ones(), ones()])
    rd.close()


# ---------------------------------------------------------------- protect() without servers


class _FakeDevice:
    """Just enough of IDevice for protect(): dead or alive, with fixed metadata."""

    def __init__(self, dead: bool = False) -> None:
        self.dead = dead
        self.name = "fake"
        self.feature_level = 13

    def version_string(self) -> str:
        return "fake 1"

    def type(self) -> DeviceType:
        return DeviceType.CPU

    def supported_extensions(self) -> tuple[()]:
        return ()

    def capabilities(self) -> Capabilities:
        return Capabilities()

    def number_of_cache_files_needed(self) -> tuple[int, int]:
        return (1, 0)

    def status(self) -> DeviceStatus:
        if self.dead:
            raise DeadObject("fake device died")
        return DeviceStatus.AVAILABLE

    def close(self) -> None:
        pass


def test_callers_queued_behind_a_failed_recovery_share_its_error() -> None:
    calls = 0

    def factory() -> Any:
        nonlocal calls
        calls += 1
        time.sleep(0.3)
        raise DeadObject("nobody home")

    rd = ResilientDevice(factory, _FakeDevice(dead=True))  # type: ignore[arg-type]
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            rd.status()
        except DeadObject as err:
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND_S)
    assert len(errors) == 6 and all("nobody home" in str(e) for e in errors)
    assert calls == 1 and time.monotonic() - start < 1.5
    with pytest.raises(DeadObject):  # a later call tries again
        rd.status()
    assert calls == 2


def test_invalid_device_answers_metadata_and_fails_the_rest() -> None:
    inv = InvalidDevice("d", "v", 12, DeviceType.GPU, (), Capabilities(), (2, 1))
    assert (inv.name, inv.version_string(), inv.feature_level, inv.type()) == ("d", "v", 12, DeviceType.GPU)
    assert inv.number_of_cache_files_needed() == (2, 1)
    for call in (inv.status, lambda: inv.supported_operations(add_model()), lambda: inv.prepare_model(add_model())):
        with pytest.raises(GeneralFailure, match="InvalidDevice") as info:
            call()
        assert info.value.error_status == ErrorStatus.GENERAL_FAILURE

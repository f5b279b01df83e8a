"""The serving thread's look for the next rung doorbell (``NNHAL_QUEUE_SPIN_US``: adaptive by
default, forced by a window in µs), across processes: with it forced, and the client's hybrid
wait forced, every execution is answered right and on the same-host queue, a SIGKILLed server
still releases a waiting call with DEAD_OBJECT, and a value outside auto, off and 0..1000 µs
is ignored (the queue serves with the default).
"""

from __future__ import annotations

import logging
import signal
import threading
import time

import numpy as np
import pytest

from nnhal.client.device import Device
from nnhal.client.remote.fastpath import FastBurstLink
from nnhal.core import lookout
from nnhal.core.errors import DeadObject
from nnhal.server import queue_server
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model

pytestmark = pytest.mark.integration


_DEFAULT = (queue_server.SPIN_DEFAULT_US / 1e6, False)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, _DEFAULT),
        ("", _DEFAULT),
        ("auto", _DEFAULT),
        ("0", (0.0, False)),
        ("off", (0.0, False)),
        ("200", (200e-6, True)),
        ("1000", (1e-3, True)),
    ],
)
def test_the_spin_is_read_in_microseconds(value: str | None, expected: tuple[float, bool]) -> None:
    seconds, forced = queue_server.spin_from_env(value)
    assert seconds == pytest.approx(expected[0]) and forced == expected[1]


@pytest.mark.parametrize("value", ["abc", "-1", "1001", "2.5"])
def test_a_spin_outside_its_range_is_ignored_with_a_warning(value: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=lookout.__name__):
        assert queue_server.spin_from_env(value) == _DEFAULT
    assert "NNHAL_QUEUE_SPIN_US" in caplog.text


@pytest.fixture
def spinning_server(monkeypatch: pytest.MonkeyPatch) -> LocalServer:
    monkeypatch.setenv("NNHAL_QUEUE_SPIN_US", "300")
    monkeypatch.setattr(FastBurstLink, "HYBRID_WAIT", True)
    monkeypatch.setattr(FastBurstLink, "HYBRID_FORCED", True)
    return LocalServer("--enable-fault-injection")


def test_executions_with_both_sides_looking_are_right_and_on_the_queue(spinning_server: LocalServer) -> None:
    with spinning_server, Device.connect(spinning_server.address) as dev, dev.prepare_model_sync(add_model()) as pm:
        rng = np.random.default_rng(7)
        for i in range(300):
            a = rng.random((2, 4), dtype=np.float32)
            b = rng.random((2, 4), dtype=np.float32)
            np.testing.assert_array_equal(pm.execute([a, b]).outputs[0], a + b, err_msg=f"call {i}")
            if i % 50 == 0:
                time.sleep(0.002)  # past the server's look: the next call rings a sleeping thread
        assert dev.stats()["executions_same_host"] >= 300


def test_a_killed_spinning_server_releases_a_waiting_call_with_dead_object(spinning_server: LocalServer) -> None:
    dev = Device.connect(spinning_server.address)
    try:
        pm = dev.prepare_model_sync(add_model())
        a = np.ones((2, 4), np.float32)
        for _ in range(20):
            pm.execute([a, a])
        dev.set_faults(execute_delay_ms=10_000)
        failure: list[BaseException] = []

        def run() -> None:
            try:
                pm.execute([a, a])
            except BaseException as err:  # reported below
                failure.append(err)

        waiter = threading.Thread(target=run)
        waiter.start()
        time.sleep(0.3)
        spinning_server.signal(signal.SIGKILL)
        waiter.join(10.0)
        assert not waiter.is_alive(), "the waiting call was not released"
        assert failure and isinstance(failure[0], DeadObject), failure
    finally:
        dev.close()
        spinning_server.stop()

"""Wake-up avoidance as shipped (``NNHAL_QUEUE_SPIN_US`` and ``NNHAL_HYBRID_WAIT`` unset: the
server's look and the sync client's watch adaptive), across processes: a server killed during a
same-host call releases it with DEAD_OBJECT at once and a frozen one within the keepalive bound,
for the sync and the asyncio client. The client's load gauge is told the machine is quiet, so
that its watch runs whatever the load of the machine the tests run on (the server's look
follows that machine's load, as shipped)."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from nnhal.client import aio
from nnhal.client.device import Device
from nnhal.client.remote import pace as pacing
from nnhal.client.remote.fastpath import FastBurstLink
from nnhal.client.remote.transport import DEATH_DETECTION_BOUND_S
from nnhal.core import lookout
from nnhal.core.errors import DeadObject
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model

pytestmark = pytest.mark.integration

_A = np.ones((2, 4), np.float32)
#: Calls before the one that is cut short: enough for the watch's estimate and the look's record.
_WARM = 50


@pytest.fixture
def shipped(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The defaults on both sides; the client's machine quiet. Yields how often sync links watched."""
    monkeypatch.delenv("NNHAL_QUEUE_SPIN_US", raising=False)
    monkeypatch.delenv("NNHAL_HYBRID_WAIT", raising=False)
    monkeypatch.setattr(FastBurstLink, "HYBRID_WAIT", pacing.hybrid_from_env(None)[0])
    monkeypatch.setattr(FastBurstLink, "HYBRID_FORCED", pacing.hybrid_from_env(None)[1])
    monkeypatch.setattr(lookout, "LOAD", lookout.Load(runnable=lambda: 1, cpus=lambda: 2))
    # Calls qualify for the watch whatever they take: on a loaded machine every small call can
    # take longer than the watch's ceiling (0.5 ms), and then the default never watches at all
    # (seen once at load average 5), which is the policy, not what this test is about.
    monkeypatch.setattr(pacing, "POLL_MAX_S", 10.0)
    watches = [0]
    real = FastBurstLink._watch

    def counted(link: FastBurstLink, *args: float | None) -> bool:
        watches[0] += 1
        return real(link, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(FastBurstLink, "_watch", counted)
    yield watches


def _sync_cut_short(srv: LocalServer, sig: signal.Signals, watches: list[int]) -> float:
    """Seconds from ``sig`` to the waiting sync call's DEAD_OBJECT."""
    with Device.connect(srv.address) as dev:
        pm = dev.prepare_model_sync(add_model())
        for _ in range(_WARM):
            pm.execute([_A, _A])
        assert dev.stats()["executions_same_host"] >= _WARM
        assert watches[0] > 0, "the sync client never watched by default"
        dev.set_faults(execute_delay_ms=30_000)
        failure: list[BaseException] = []

        def run() -> None:
            try:
                pm.execute([_A, _A])
            except BaseException as err:  # reported below
                failure.append(err)

        waiter = threading.Thread(target=run)
        waiter.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        srv.signal(sig)
        waiter.join(DEATH_DETECTION_BOUND_S + 5)
        assert not waiter.is_alive(), "the waiting call was not released"
        assert failure and isinstance(failure[0], DeadObject), failure
        return time.monotonic() - t0


def _aio_cut_short(srv: LocalServer, sig: signal.Signals) -> float:
    async def main() -> float:
        dev = await aio.Device.connect(srv.address)
        try:
            pm = await dev.prepare_model(add_model())
            for _ in range(_WARM):
                await pm.execute([_A, _A])
            await dev.set_faults(execute_delay_ms=30_000)
            task = asyncio.ensure_future(pm.execute([_A, _A]))
            await asyncio.sleep(0.3)
            assert not task.done()
            t0 = time.monotonic()
            srv.signal(sig)
            with pytest.raises(DeadObject):
                await asyncio.wait_for(task, DEATH_DETECTION_BOUND_S + 5)
            return time.monotonic() - t0
        finally:
            await dev.close()

    return asyncio.run(asyncio.wait_for(main(), 60))


@pytest.mark.parametrize("client", ["sync", "aio"])
def test_a_killed_server_releases_a_same_host_call_at_once(
    own_server: LocalServer, client: str, shipped: list[int]
) -> None:
    took = (
        _sync_cut_short(own_server, signal.SIGKILL, shipped)
        if client == "sync"
        else _aio_cut_short(own_server, signal.SIGKILL)
    )
    assert took < 1.0, f"released {took:.2f} s after the kill: later than the gRPC path's bound"


@pytest.mark.parametrize("client", ["sync", "aio"])
def test_a_frozen_server_releases_a_same_host_call_within_the_keepalive_bound(
    own_server: LocalServer, client: str, shipped: list[int]
) -> None:
    try:
        took = (
            _sync_cut_short(own_server, signal.SIGSTOP, shipped)
            if client == "sync"
            else _aio_cut_short(own_server, signal.SIGSTOP)
        )
    finally:
        own_server.signal(signal.SIGCONT)
    assert took <= DEATH_DETECTION_BOUND_S, f"a frozen server detected after {took:.1f} s"

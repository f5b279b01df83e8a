"""A session whose same-host queue is refused runs every execution over gRPC, silently.

The queue is an optimisation: when the server refuses to open it — past its cap of
queues per session (RESOURCE_EXHAUSTED_TRANSIENT) or because the client's memory cannot
hold its rings (RESOURCE_EXHAUSTED_*) — every execution form of both clients still
answers correctly, over gRPC, and the server counts none under ``same_host``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from nnhal.client import aio
from nnhal.client.device import Device
from nnhal.client.remote import FastBurstLink
from nnhal.client.remote.aio_queue_link import AioQueueLink
from nnhal.core.enums import ErrorStatus
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

#: A cap of one queue per session, taken by a queue the test opens by hand; or a client
#: memory too small for the rings (2 x 256 KiB) of the session's queue.
CAPS = {"queue cap": ("--max-bursts-per-session", "1"), "memory": ("--memory-per-client", "256KiB")}


@pytest.fixture(params=sorted(CAPS), scope="module")
def capped(request: pytest.FixtureRequest) -> Iterator[tuple[str, LocalServer]]:
    with LocalServer(*CAPS[request.param]) as srv:
        yield request.param, srv


def _counts(stats: dict[str, int]) -> tuple[int, int]:
    return stats["executions_same_host"], stats["executions_grpc"]


def test_the_sync_client_falls_back_to_grpc(capped: tuple[str, LocalServer]) -> None:
    cap, srv = capped
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    with Device.connect(srv.address) as dev:
        before = _counts(dev.stats())
        held = FastBurstLink.open(dev.remote, "", executions=True) if cap == "queue cap" else None
        try:
            with dev.prepare_model_sync(add_model()) as pm:
                for k in range(3):
                    out = pm.execute([a, np.full_like(a, k)])
                    assert out.status == ErrorStatus.NONE
                    np.testing.assert_array_equal(out.outputs[0], a + k)
                cb = pm.execute_async([a, a])
                assert cb.wait(10) and cb.status == ErrorStatus.NONE
                assert cb.value is not None
                np.testing.assert_array_equal(cb.value.outputs[0], a + a)
            queue = dev.remote.same_host
            assert queue is not None and not queue.open  # refused: every call took gRPC
            after = _counts(dev.stats())
        finally:
            if held is not None:
                held.close()
    assert after[0] == before[0]
    assert after[1] - before[1] >= 4


def test_the_asyncio_client_falls_back_to_grpc(capped: tuple[str, LocalServer]) -> None:
    cap, srv = capped
    a = np.arange(8, dtype=np.float32).reshape(2, 4)

    async def main() -> None:
        async with aio.Device.connect(srv.address) as dev:
            before = _counts(await dev.stats())
            held = await AioQueueLink.open(dev.remote) if cap == "queue cap" else None
            try:
                async with await dev.prepare_model(add_model()) as pm:
                    for k in range(3):
                        out = await pm.execute([a, np.full_like(a, k)])
                        assert out.status == ErrorStatus.NONE
                        np.testing.assert_array_equal(out.outputs[0], a + k)
                queue = dev.remote.same_host
                assert queue is not None and not queue.open
                after = _counts(await dev.stats())
            finally:
                if held is not None:
                    held.close()
        assert after[0] == before[0]
        assert after[1] - before[1] >= 3

    asyncio.run(asyncio.wait_for(main(), 60))

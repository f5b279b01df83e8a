"""The asyncio resilient wrappers across processes: a killed and restarted server is recovered
transparently (the prepared model re-prepared), a failed recovery is DEAD_OBJECT in bounded
time, and the protect / recover-once rules are the sync wrappers' (``nnhal.client.recovery``)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Iterator

import numpy as np
import pytest

from nnhal.client.aio.resilient import ResilientDevice
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject
from tests.conftest import add_model, one_io_request, ones, relu_chain
from tests.integration.test_resilient import Restartable

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


@pytest.fixture
def restartable() -> Iterator[Restartable]:
    srv = Restartable()
    try:
        yield srv
    finally:
        srv.close()


def _run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 200))
    # The dead sessions' DEAD_OBJECT errors (recovered, or chained into the failed recovery's)
    # hold their frames in reference cycles; grpc.aio stops its poller thread once the last
    # channel is collected.
    gc.collect()


def test_dead_and_successful_recovery_is_transparent(restartable: Restartable) -> None:
    async def main() -> None:
        rd = await ResilientDevice.connect(restartable.address, timeout=60, recover_timeout=60)
        async with rd:
            pm = await rd.prepare_model(add_model())
            a = np.arange(8, dtype=np.float32).reshape(2, 4)
            before = (await pm.execute([a, a])).outputs[0]
            first = pm.prepared_model
            await asyncio.to_thread(restartable.kill)
            await asyncio.to_thread(restartable.start)
            np.testing.assert_array_equal((await pm.execute([a, a])).outputs[0], before)
            assert pm.prepared_model is not first and pm.recoveries == 1 and rd.recoveries == 1
            assert await rd.supported_operations(add_model()) == [True] and rd.is_valid
            await asyncio.to_thread(restartable.kill)
            await asyncio.to_thread(restartable.start)
            relu = await rd.prepare_model(relu_chain(1, (2, 4)))  # the device recovers first
            outcome = await relu.execute_request(one_io_request(-ones()))
            assert outcome.status == ErrorStatus.NONE and rd.recoveries == 2
            await asyncio.to_thread(restartable.kill)
            await asyncio.to_thread(restartable.start)
            again = await relu.execute_request(one_io_request(-ones()))  # in-band DEAD_OBJECT recovered
            assert again.status == ErrorStatus.NONE and relu.recoveries == 1

    _run(main)


def test_dead_and_failed_recovery_is_dead_object(restartable: Restartable) -> None:
    async def main() -> None:
        rd = await ResilientDevice.connect(restartable.address, timeout=60, recover_timeout=1.0)
        pm = await rd.prepare_model(add_model())
        await asyncio.to_thread(restartable.kill)
        with pytest.raises(DeadObject, match="failed to recover dead prepared model"):
            await pm.execute([ones(), ones()])
        dead = await pm.execute_request(one_io_request(ones()))
        assert dead.status == ErrorStatus.DEAD_OBJECT and "failed to recover" in dead.message
        await rd.close()

    _run(main)

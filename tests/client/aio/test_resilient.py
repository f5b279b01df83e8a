"""The asyncio resilient wrappers across processes: a killed and restarted server is recovered
transparently (the prepared model re-prepared), a failed recovery is DEAD_OBJECT in bounded
time, and the protect / recover-once rules are the sync wrappers' (``nnhal.client.recovery``)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from nnhal.client.aio.resilient import ResilientDevice
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject, InvalidArgument
from nnhal.core.types import BufferDesc, BufferRole
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


TOKEN = bytes(range(32))
ROLE = BufferRole(model_index=0, io_index=0, frequency=1.0)


def test_from_cache_and_allocate_in_the_four_cases(tmp_path: Path) -> None:
    """As the sync wrapper's (tests/integration/test_resilient.py): ok; a HAL error passes
    through without recovery; dead + failed recovery is DEAD_OBJECT; dead + successful
    recovery: allocate re-creates the resilient prepared model it names (from the same cache
    and token, the restarted server having the same cache secret), the buffer from before the
    death is DEAD_OBJECT (buffers are not re-created)."""
    srv = Restartable("--cache-secret-file", str(tmp_path / "secret"))

    async def main() -> None:
        rd = await ResilientDevice.connect(srv.address, timeout=60, recover_timeout=2.0)
        async with rd:
            blob = (await rd.prepare_model(add_model(), cache_token=TOKEN)).prepared_model.model_cache
            cached = await rd.prepare_model_from_cache(blob, TOKEN, add_model())
            np.testing.assert_array_equal((await cached.execute([ones(), ones()])).outputs[0], 2 * ones())
            buf = await rd.allocate(BufferDesc(), [cached], [ROLE], [])
            await buf.copy_from(ones())

            with pytest.raises(InvalidArgument):
                await rd.prepare_model_from_cache(blob[:8], TOKEN)
            with pytest.raises(InvalidArgument):
                await rd.allocate(BufferDesc(), [cached], [BufferRole(0, 5, 1.0)], [])
            assert rd.recoveries == 0

            await asyncio.to_thread(srv.kill)
            with pytest.raises(DeadObject, match="failed to recover dead device"):
                await rd.prepare_model_from_cache(blob, TOKEN)
            with pytest.raises(DeadObject, match="failed to recover dead device"):
                await rd.allocate(BufferDesc(), [cached], [ROLE], [])
            assert rd.recoveries == 0 and cached.recoveries == 0

            await asyncio.to_thread(srv.start)
            with pytest.raises(DeadObject):
                await buf.copy_from(ones())
            async with await rd.allocate(BufferDesc(), [cached], [ROLE], []) as again:
                assert rd.recoveries == 1 and cached.recoveries == 1
                await again.copy_from(3 * ones())
                np.testing.assert_array_equal(await again.copy_to_array(np.float32, (2, 4)), 3 * ones())
            np.testing.assert_array_equal((await cached.execute([ones(), 2 * ones()])).outputs[0], 3 * ones())
            fresh = await rd.prepare_model_from_cache(blob, TOKEN, add_model())
            np.testing.assert_array_equal((await fresh.execute([ones(), ones()])).outputs[0], 2 * ones())
            assert rd.recoveries == 1 and cached.recoveries == 1

    try:
        _run(main)
    finally:
        srv.close()

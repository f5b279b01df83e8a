"""The asyncio client speaks each HIDL level's own method forms across processes, as the sync
client does (``tests/integration/test_method_forms.py``): the form is chosen by
:mod:`nnhal.client.forms` for both clients, and the calls are the same generators."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import numpy as np
import pytest

from nnhal.client import aio
from nnhal.core.enums import DeviceType, ErrorStatus, ExecutionPreference, HalVersion
from nnhal.core.errors import GeneralFailure
from nnhal.core.types import NO_TIMING
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, one_io_request, ones, relu_chain

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOKEN = bytes(range(32))


def _run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 90))


@pytest.fixture(scope="module")
def server10() -> Iterator[LocalServer]:
    with LocalServer("--feature-level", "1.0") as srv:
        yield srv


def test_the_1_0_methods_work_across_processes(server10: LocalServer) -> None:
    async def main() -> None:
        async with aio.Device.connect(server10.address) as dev:
            assert dev.feature_level == HalVersion.V1_0
            assert (await dev.capabilities()).operand_performance  # getCapabilities
            assert await dev.version_string() == "UNKNOWN" and await dev.type() == DeviceType.OTHER
            assert await dev.supported_extensions() == () and await dev.number_of_cache_files_needed() == (0, 0)
            assert await dev.supported_operations(add_model()) == [True]  # getSupportedOperations
            assert await dev.status() is not None  # getStatus
            async with await dev.prepare_model(add_model()) as pm:  # prepareModel
                out = await pm.execute([ones(), 2 * ones()])  # execute (1.0 has no synchronous form)
                np.testing.assert_array_equal(out.outputs[0], 3 * ones())
                assert out.timing.time_on_device == NO_TIMING
                late = await pm.execute_async([ones(), ones()])  # execute
                np.testing.assert_array_equal(late.outputs[0], 2 * ones())

    _run(main)


def test_a_1_0_device_refuses_1_3_features_before_sending(server10: LocalServer) -> None:
    async def main() -> None:
        async with aio.Device.connect(server10.address) as dev:
            with pytest.raises(Exception, match=r"priority needs NN HAL 1\.3"):
                await dev.prepare_model(add_model(), priority=2)
            with pytest.raises(Exception, match=r"cache token needs NN HAL 1\.2"):
                await dev.prepare_model(add_model(), cache_token=TOKEN)
            async with await dev.prepare_model(add_model()) as pm:
                outcome = await pm.execute_request(one_io_request(ones()), timeout=5)
                assert outcome.status == ErrorStatus.INVALID_ARGUMENT and "deadline needs NN HAL 1.3" in outcome.message
                measured = await pm.execute_request_async(one_io_request(ones()), measure=True)
                assert measured.status == ErrorStatus.INVALID_ARGUMENT and "timing measurement" in measured.message
                with pytest.raises(GeneralFailure, match=r"executeFenced needs NN HAL 1\.3"):
                    await pm.execute_fenced(one_io_request(ones()))

    _run(main)


def test_a_1_1_device_speaks_its_own_forms() -> None:
    async def main(address: str) -> None:
        async with aio.Device.connect(address) as dev:
            assert dev.feature_level == HalVersion.V1_1
            assert (await dev.capabilities()).operand_performance  # getCapabilities_1_1
            assert await dev.supported_operations(add_model()) == [True]  # getSupportedOperations_1_1
            pm = await dev.prepare_model(add_model(), preference=ExecutionPreference.LOW_POWER)  # prepareModel_1_1
            async with pm:
                np.testing.assert_array_equal((await pm.execute([ones(), ones()])).outputs[0], 2 * ones())

    with LocalServer("--feature-level", "1.1") as srv:
        _run(lambda: main(srv.address))


def test_a_1_2_device_speaks_its_own_forms() -> None:
    async def main(address: str) -> None:
        async with aio.Device.connect(address) as dev:
            assert (await dev.capabilities()).operand_performance  # getCapabilities_1_2
            assert await dev.supported_operations(add_model()) == [True]  # getSupportedOperations_1_2
            assert await dev.type() is not None and await dev.supported_extensions() == ()
            assert (await dev.number_of_cache_files_needed())[0] >= 0
            assert (await dev.version_string()).startswith("nnhal")
            pm = await dev.prepare_model(add_model(), cache_token=TOKEN)  # prepareModel_1_2 with a cache
            assert pm.model_cache
            out = await pm.execute([ones(), ones()], measure=True)  # executeSynchronously with timing
            assert out.timing.time_on_device != NO_TIMING
            late = await pm.execute_async([ones(), ones()], measure=True)  # execute_1_2
            np.testing.assert_array_equal(late.outputs[0], 2 * ones())
            again = await dev.prepare_model_from_cache(pm.model_cache, TOKEN, add_model())  # prepareModelFromCache
            np.testing.assert_array_equal((await again.execute([ones(), ones()])).outputs[0], 2 * ones())
            async with await dev.prepare_model(relu_chain(1, (2, 4))) as relu, relu.burst() as burst:
                assert (await burst.execute(one_io_request(ones()))).status == ErrorStatus.NONE  # the 1.2 burst

    with LocalServer("--feature-level", "1.2") as srv:
        _run(lambda: main(srv.address))


def test_fenced_executions_chain(server: LocalServer) -> None:
    """executeFenced and IFencedExecutionCallback.getExecutionInfo (1.3)."""

    async def main() -> None:
        async with aio.Device.connect(server.address) as dev, await dev.prepare_model(relu_chain(1, (2, 4))) as pm:
            first = await pm.execute_fenced(one_io_request(ones()), measure=True)
            second = await pm.execute_fenced(one_io_request(-ones()), wait_for=[first])
            info = await second.get_execution_info(wait=True, timeout=30)
            assert info.status == ErrorStatus.NONE and info.signalled
            np.testing.assert_array_equal(np.frombuffer(info.output_pools[1], np.float32), np.zeros(8, np.float32))
            assert (await first.get_execution_info()).timing.time_on_device != NO_TIMING

    _run(main)

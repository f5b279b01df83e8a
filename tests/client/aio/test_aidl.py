"""The asyncio client's AIDL surface across processes (a level-8 server): the AIDL execution
forms, fenced executions with their AIDL callback, reusable executions, the IBurst with its
memory tokens, prepareModelWithConfig and the AIDL allocate — the calls of
:mod:`nnhal.client.remote.aidl` that the sync client drives too."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import numpy as np
import pytest

from nnhal.client import aio
from nnhal.core.aidl_types import ExecutionConfig, PrepareModelConfig, TokenValuePair
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import BufferDesc, BufferRole, ExtensionNameAndPrefix
from nnhal.testing.local_server import LocalServer
from tests.conftest import add_model, one_io_request, ones, relu_chain

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOKEN = bytes(range(32))
EXT = (ExtensionNameAndPrefix("vendor.example.hints", 3),)
HINT = TokenValuePair((3 << 16) | 1, b"x")


@pytest.fixture(scope="module")
def server8() -> Iterator[LocalServer]:
    with LocalServer("--feature-level", "8") as srv:
        yield srv


def _run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 90))


def test_the_aidl_execution_forms(server8: LocalServer) -> None:
    """AIDL executeSynchronously, executeSynchronouslyWithConfig, executeFenced (+ its
    getExecutionInfo) and executeFencedWithConfig."""

    async def main() -> None:
        async with aio.Device.connect(server8.address) as dev, await dev.prepare_model(relu_chain(1, (2, 4))) as pm:
            request = one_io_request(-ones())
            plain = await pm.execute_request_aidl(request, measure=True)
            assert plain.status == ErrorStatus.NONE and plain.timing_ns is not None
            hinted = await pm.execute_with_config(request, ExecutionConfig(True, None, (HINT,), EXT))
            assert hinted.status == ErrorStatus.NONE and hinted.timing_ns is not None
            twice = await pm.execute_with_config(request, ExecutionConfig(execution_hints=(HINT, HINT)))
            assert twice.status == ErrorStatus.INVALID_ARGUMENT and "given twice" in twice.message
            first = await pm.execute_fenced_aidl(request, measure=True)
            second = await pm.execute_fenced_with_config(request, ExecutionConfig(True), wait_for=[first])
            info = await second.get_execution_info(True, 30)
            assert (
                info.status == ErrorStatus.NONE and info.timing_ns is not None and info.timing_launched_ns is not None
            )
            assert (await first.get_execution_info()).status == ErrorStatus.NONE

    _run(main)


def test_a_reusable_execution_runs_many_times(server8: LocalServer) -> None:
    """createReusableExecution, IExecution.executeSynchronously and IExecution.executeFenced."""

    async def main() -> None:
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        async with aio.Device.connect(server8.address) as dev, await dev.prepare_model(add_model()) as pm:
            async with await pm.create_reusable_execution([a, a]) as execution:
                for _ in range(3):
                    outcome = await execution.compute()
                    assert outcome.status == ErrorStatus.NONE, outcome.message
                    np.testing.assert_array_equal(outcome.outputs[0], a + a)
                fenced = await (await execution.execute_fenced()).get_execution_info()
                assert fenced.status == ErrorStatus.NONE and fenced.signalled
            assert (await execution.compute()).status == ErrorStatus.INVALID_ARGUMENT  # released
            with pytest.raises(InvalidArgument):  # two inputs for a two-input model, three given
                await pm.create_reusable_execution([a, a, a])

    _run(main)


def test_an_aidl_burst_sends_a_tokens_memory_once(server8: LocalServer) -> None:
    """AIDL configureExecutionBurst, IBurst.executeSynchronously(WithConfig), releaseMemoryResource."""

    async def main() -> None:
        x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
        request = one_io_request(x)
        async with (
            aio.Device.connect(server8.address) as dev,
            await dev.prepare_model(relu_chain(1, (2, 4))) as pm,
            await pm.aidl_burst() as burst,
        ):
            assert (await burst.execute(request, [7, 8])).status == ErrorStatus.NONE
            cached = await burst.execute(request, [7, 8], send=(False, False))  # only the tokens travel
            got = np.frombuffer(cached.output_pools[1], np.float32).reshape(2, 4)
            np.testing.assert_array_equal(got, np.maximum(x, 0))
            hinted = await burst.execute(request, [7, 8], config=ExecutionConfig(False, None, (HINT,), EXT))
            assert hinted.status == ErrorStatus.NONE, hinted.message
            await burst.release_memory(7)
            gone = await burst.execute(request, [7, 8], send=(False, False))
            assert gone.status == ErrorStatus.INVALID_ARGUMENT and "token 7 holds no memory" in gone.message
            assert (await burst.execute(request, [7, 8])).status == ErrorStatus.NONE  # sent again

    _run(main)


def test_prepare_with_config_and_the_aidl_allocate(server8: LocalServer) -> None:
    async def main() -> None:
        async with aio.Device.connect(server8.address) as dev:
            config = PrepareModelConfig(cache_token=TOKEN, compilation_hints=(HINT,), extension_name_to_prefix=EXT)
            async with await dev.prepare_model_with_config(add_model(), config) as pm:
                assert pm.model_cache
                np.testing.assert_array_equal((await pm.execute([ones(), ones()])).outputs[0], 2 * ones())
            with pytest.raises(InvalidArgument):
                await dev.prepare_model_with_config(
                    add_model(), PrepareModelConfig(compilation_hints=(TokenValuePair(1),) * 2)
                )
            async with await dev.prepare_model(relu_chain(1, (2, 4))) as relu:
                role = BufferRole(model_index=0, io_index=0, frequency=1.0)  # AIDL's probability
                async with await dev.allocate_aidl(BufferDesc(), [relu], [role], [role]) as buffer:
                    assert buffer.token > 0
                with pytest.raises(InvalidArgument, match=r"\(0, 1\]"):
                    await dev.allocate_aidl(BufferDesc(), [relu], [BufferRole(0, 0, 0.0)], [])

    _run(main)

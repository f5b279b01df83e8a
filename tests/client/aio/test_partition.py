"""The asyncio partitioner across processes: the plan, the steps and the driver buffer of the
sync partitioner's tests (``tests/integration/test_partition.py``), driven from an event loop
through the same calls (:mod:`nnhal.client.partition`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import numpy as np
import pytest

from nnhal.client import aio
from nnhal.client.aio.partition import Partitioner
from nnhal.testing.local_server import LocalServer
from tests.integration.test_partition import SHAPE, _reference, sandwich, shared_temporary

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def two_devices() -> Iterator[LocalServer]:
    with LocalServer("--device", "cpu", "--device", "ort:strict", "--cache-secret-file", "none") as srv:
        yield srv


def _run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 90))


def test_a_middle_operation_the_ort_device_lacks_runs_as_three_steps(two_devices: LocalServer) -> None:
    model, x = sandwich(), np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    expected = _reference(two_devices.address, model, x)

    async def main() -> None:
        async with (
            aio.Device.connect(two_devices.address, device="ort") as ort,
            aio.Device.connect(two_devices.address) as cpu,
        ):
            async with await Partitioner([ort, cpu], fallback=cpu).prepare(model) as pm:
                rows = pm.plan.rows()
                assert [(device, step) for _, _, device, step, _ in rows] == [("ort", 0), ("cpu", 1), ("ort", 2)]
                out = (await pm.execute([x]))[0]
                again = (await pm.execute_async([x]))[0]
            np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(again, expected, rtol=1e-5, atol=1e-5)

    _run(main)


def test_a_temporary_between_steps_on_one_device_stays_in_a_driver_buffer(two_devices: LocalServer) -> None:
    model, x = shared_temporary(), np.random.default_rng(4).standard_normal(SHAPE).astype(np.float32)
    expected = _reference(two_devices.address, model, x)

    async def main() -> None:
        async with (
            aio.Device.connect(two_devices.address, device="ort") as ort,
            aio.Device.connect(two_devices.address) as cpu,
        ):
            before = (await ort.stats())["buffers"]
            pm = await Partitioner([ort, cpu], fallback=cpu).prepare(model)
            kinds = {(t.producer, t.consumers): t.kind for t in pm.plan.temporaries}
            assert kinds == {(0, (1,)): "inline", (1, (2,)): "inline", (0, (2,)): "driver buffer"}
            assert (await ort.stats())["buffers"] == before + 1
            for _ in range(2):  # the buffer is written and read again by the next execution
                np.testing.assert_allclose((await pm.execute([x]))[0], expected, rtol=1e-5, atol=1e-5)
            await pm.release()
            assert (await ort.stats())["buffers"] == before

    _run(main)

"""The asyncio client's executions written as bytes (``nnhal.client.remote.encoded``) across
the process boundary, against a server offering no same-host queue (``--no-fast-path``): a
numpy layout run again takes the encoded ``executeSynchronously_1_3`` — the sync client's
lane — and gets the results, statuses, deadlines and messages of the message
built field by field. Each test runs its own event loop (``asyncio.run``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import numpy as np
import pytest

from nnhal.client import aio
from nnhal.client.faults import Fault
from nnhal.client.remote import encoded as encoded_module
from nnhal.client.remote.aio_session import AioSession
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError, InvalidArgument
from nnhal.core.types import DataLocation, InlinePool, RequestArgument
from nnhal.testing import LocalServer
from tests.conftest import add_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MISSED = (ErrorStatus.MISSED_DEADLINE_PERSISTENT, ErrorStatus.MISSED_DEADLINE_TRANSIENT)


@pytest.fixture(scope="module")
def remote_server() -> Iterator[LocalServer]:
    with LocalServer("--no-fast-path", "--enable-fault-injection") as srv:
        yield srv


def _run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 60))


class _Encoded:
    """Counts the executions the encoded lane took (a result, or a raised failure)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.taken = 0
        real = AioSession.execute_encoded

        async def spy(session: AioSession, *args: Any) -> Any:
            try:
                result = await real(session, *args)
            except HalError:
                self.taken += 1
                raise
            self.taken += result is not None
            return result

        monkeypatch.setattr(AioSession, "execute_encoded", spy)


def test_a_layout_run_again_is_written_as_bytes(remote_server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> None:
    encoded = _Encoded(monkeypatch)

    async def main() -> None:
        async with aio.Device.connect(remote_server.address) as dev, await dev.prepare_model(add_model()) as pm:
            assert dev.remote.same_host is None
            a = np.arange(8, dtype=np.float32).reshape(2, 4)
            first = (await pm.execute([a, a])).outputs[0]  # a new layout: the message built field by field
            assert encoded.taken == 0
            for k in range(1, 4):
                outcome = await pm.execute([a, a * k], measure=True, timeout=30.0)
                np.testing.assert_array_equal(outcome.outputs[0], a + a * k)
                assert outcome.status == ErrorStatus.NONE and outcome.timing.time_on_device > 0
            assert encoded.taken == 3
            np.testing.assert_array_equal(first, a + a)
            # Several calls in flight from one loop: each its own answer.
            outs = await asyncio.gather(*(pm.execute([a, a * k]) for k in range(8)))
            for k, out in enumerate(outs):
                np.testing.assert_array_equal(out.outputs[0], a + a * k)
            assert encoded.taken == 11
            # Another shape is planned afresh, then written as bytes.
            b = np.ones((2, 4), np.float64)  # converted to the model's float32
            np.testing.assert_array_equal((await pm.execute([b, b])).outputs[0], np.full((2, 4), 2, np.float32))
            assert encoded.taken == 12

    _run(main)


def test_refusals_deadlines_and_failures_are_the_messages(
    remote_server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded = _Encoded(monkeypatch)

    async def main() -> None:
        async with aio.Device.connect(remote_server.address) as dev:
            async with await dev.prepare_model(add_model()) as pm:
                a = np.ones((2, 4), np.float32)
                # A deadline already passed: the first call (a new layout) builds its message
                # field by field, the second is written as bytes; both raise the server's status.
                raised = []
                for _ in range(2):
                    with pytest.raises(HalError) as passed:
                        await pm.execute([a, a], timeout=0.0)
                    raised.append((type(passed.value), passed.value.error_status, passed.value.message))
                assert encoded.taken == 1 and raised[0] == raised[1] and raised[0][1] in MISSED
                # A delay past the deadline: the server's missed deadline, not the transport's.
                await dev.set_faults(execute_delay_ms=300)
                try:
                    with pytest.raises(HalError) as missed:
                        await pm.execute([a, a], timeout=0.05)
                    assert missed.value.error_status in MISSED
                finally:
                    await dev.set_faults()
                assert encoded.taken == 2
                # A failed execution: its status and message, as the server sent them.
                await dev.inject_faults(
                    Fault.error("executeSynchronously_1_3", ErrorStatus.GENERAL_FAILURE, message="as in my test")
                )
                with pytest.raises(HalError) as failed:
                    await pm.execute([a, a])
                assert failed.value.error_status == ErrorStatus.GENERAL_FAILURE
                assert "as in my test" in failed.value.message
                assert encoded.taken == 3
                with pytest.raises(InvalidArgument, match="NaN"):  # refused by the encoding, as by the message
                    await pm.execute([a, a], timeout=float("nan"))
                assert encoded.taken == 4
                with pytest.raises(InvalidArgument):  # the wrong number of inputs never reaches the wire
                    await pm.execute([a])
                assert encoded.taken == 4
                np.testing.assert_array_equal((await pm.execute([a, a])).outputs[0], a + a)
                handle = pm.handle
            # A released model: INVALID_ARGUMENT from the server, as for the message built field by field.
            result = await dev.remote.execute_encoded(
                handle,
                (RequestArgument(location=DataLocation(0, 0, 32)), RequestArgument(location=DataLocation(0, 0, 32))),
                (RequestArgument(location=DataLocation(1, 0, 32)),),
                (InlinePool(bytes(32), 32), InlinePool(b"", 32)),
                ExecutionOptions(),
            )
            assert result is not None and result.status == ErrorStatus.INVALID_ARGUMENT
            assert "unknown prepared model" in result.message

    _run(main)


def test_the_frame_is_made_once_per_plan_and_outputs_are_not_aliased(remote_server: LocalServer) -> None:
    """The asyncio client keeps a plan's message frame (``encoded.Framed``) as the sync one does:
    made on its first call over gRPC, reused; concurrent calls' outputs each their own."""

    async def main() -> None:
        async with aio.Device.connect(remote_server.address) as dev, await dev.prepare_model(add_model()) as pm:
            a = np.arange(8, dtype=np.float32).reshape(2, 4)
            await pm.execute([a, a])  # a new layout: planned
            outs = await asyncio.gather(*(pm.execute([a, a * k]) for k in range(4)))
            numpy_io = pm._numpy
            assert numpy_io is not None
            planned = numpy_io.planned([a, a])
            assert planned is not None and isinstance(planned[0].wire, encoded_module.Framed)
            framed = planned[0].wire
            for k, out in enumerate(outs):
                np.testing.assert_array_equal(out.outputs[0], a + a * k)
            arrays = [out.outputs[0] for out in outs]
            assert not any(np.shares_memory(x, y) for x in arrays for y in arrays if x is not y)
            await pm.execute([a, a], measure=True, timeout=30.0)
            assert planned[0].wire is framed

    _run(main)

"""The asyncio Burst's rules over its stream, without a server: every failure is in the
outcome, a server that ended the stream or a cancelled execution ends the burst, close once."""

from __future__ import annotations

import asyncio
from typing import Any

from nnhal.client.aio.burst import CANCELLED, ENDED, Burst
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import DeadObject
from nnhal.core.types import ExecutionResult, Request
from tests.conftest import one_io_request, ones


class _Stream:
    """An AioBurstStream double answering from a script (a result, None for the stream's end,
    an exception to raise, or an Event to wait for)."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.session_over = False
        self.finished = 0
        self.cancelled = 0

    async def execute(self, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult | None:
        item = self.script.pop(0)
        if isinstance(item, asyncio.Event):
            await item.wait()
        if isinstance(item, BaseException):
            raise item
        return item  # type: ignore[no-any-return]

    async def finish(self) -> None:
        self.finished += 1

    def cancel(self) -> None:
        self.cancelled += 1


REQUEST = one_io_request(ones())


class _Session:
    """An AioSession double offering no fast path: the burst opens its stream at once."""

    fast_path = False

    def __init__(self, stream: _Stream) -> None:
        self._stream = stream

    def check(self, what: str = "call") -> None:
        pass

    def open_burst(self) -> _Stream:
        return self._stream


def _burst(stream: _Stream) -> Burst:
    return Burst(_Session(stream), "pm1")  # type: ignore[arg-type]


def test_results_failures_and_the_streams_end_are_outcomes() -> None:
    async def main() -> None:
        stream = _Stream(ExecutionResult(ErrorStatus.NONE), DeadObject("gone"), None)
        burst = _burst(stream)
        assert (await burst.execute(REQUEST)).status == ErrorStatus.NONE
        dead = await burst.execute(REQUEST)
        assert dead.status == ErrorStatus.DEAD_OBJECT and "gone" in dead.message
        ended = await burst.execute(REQUEST)
        assert ended.status == ErrorStatus.GENERAL_FAILURE and ended.message == ENDED
        again = await burst.execute(REQUEST)  # nothing more is sent on an ended stream
        assert again.message == ENDED and not stream.script
        await burst.close()
        await burst.close()
        assert (stream.cancelled, stream.finished) == (1, 0)
        assert (await burst.execute(REQUEST)).message == "burst: the burst is closed"

    asyncio.run(main())


def test_a_cancelled_execution_ends_the_burst_and_close_finishes_a_live_one() -> None:
    async def main() -> None:
        gate = asyncio.Event()
        stream = _Stream(gate)
        burst = _burst(stream)
        task = asyncio.ensure_future(burst.execute(REQUEST))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        assert (await burst.execute(REQUEST)).message == CANCELLED
        live = _Stream()
        async with _burst(live):
            pass
        assert (live.finished, live.cancelled) == (1, 0)

    asyncio.run(asyncio.wait_for(main(), 10))

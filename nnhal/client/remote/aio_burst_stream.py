"""AioBurstStream: one ``configureExecutionBurst`` stream of an asyncio session
(:class:`nnhal.client.remote.aio_session.AioSession`), the transport half of
:class:`nnhal.client.aio.Burst`. Its requests are written as serialized ``BurstRequest``s
(``messages.burst_request``) and its answers read as ``ExecutionResult``s
(``encoded.burst_answered``, made whole), through the session's one call path, so a transport failure
is the HalError the session maps it to and a dead session fails its calls at once.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from nnhal.client.remote import encoded
from nnhal.client.remote.encoded import Answer
from nnhal.client.remote.messages import ExecutionOptions, burst_request
from nnhal.client.remote.transport import Metadata
from nnhal.core import fastanswer
from nnhal.core.types import ExecutionResult, Request

if TYPE_CHECKING:  # the session makes its streams: imported for its type only
    from nnhal.client.remote.aio_session import AioSession


class AioBurstStream:
    """One ``configureExecutionBurst`` stream of an :class:`AioSession` (the transport half of
    :class:`nnhal.client.aio.Burst`, which runs one execution at a time on it)."""

    def __init__(self, session: AioSession, call: Any, md: Metadata) -> None:
        self._session = session
        self._call = call
        #: Every execution on the stream shares its request id.
        self._md = md
        #: How its requests are written (``encoded.Requests``), from its first execution on.
        self._written: encoded.Requests | None = None

    async def execute(self, handle: str, request: Request, options: ExecutionOptions) -> ExecutionResult | None:
        """One execution through the session's call path: its result, None once the server
        ended the stream; raises the HalError of a transport failure."""
        written = self._written = encoded.Requests.of(self._written, self._session.session_id, handle)
        data = burst_request(written, request, options)
        answer: Answer | None = await self._session.call("burst", False, lambda _md: self._exchange(data), self._md)
        return None if answer is None else fastanswer.whole(answer)

    async def _exchange(self, data: bytes) -> Any:
        """Send one serialized request and read its result (None: the server ended the stream)."""
        try:
            await self._call.write(data)
        except asyncio.InvalidStateError:  # the call finished with OK: the server ended it
            return None
        response = await self._call.read()
        return None if response is grpc.aio.EOF else response

    async def finish(self) -> None:
        """End the stream: the server forgets the burst (raises the HalError of a broken stream)."""
        await self._session.call("burst", False, lambda _md: self._finish(), self._md)

    async def _finish(self) -> None:
        try:
            await self._call.done_writing()
            while await self._call.read() is not grpc.aio.EOF:
                pass
        except asyncio.InvalidStateError:
            pass  # already finished

    @property
    def session_over(self) -> bool:
        """True once the session died or was closed (the stream went with it)."""
        return self._session.dead or self._session.closed

    def cancel(self) -> None:
        self._call.cancel()

"""The asyncio prepared-model proxy: executions of a model prepared on a remote device.

- ``await execute(inputs)`` — executeSynchronously_1_3 on numpy arrays: the outcome with
  ``outputs`` decoded, or the HalError it ended with raised (outputs of unknown shape are
  retried once with the sizes the driver reported, as the sync client does).
- ``execute_async(inputs)`` — execute_1_3 (a launch, then exactly one notify): returns an
  ``asyncio.Task`` at once whose result is the outcome, delivered exactly once; every
  failure (DEAD_OBJECT when the server dies meanwhile, a missed deadline, a transport
  error) is in the outcome's status, never raised. DEAD_OBJECT is raised at the call
  itself for a server known dead.
- ``execute_request`` / ``execute_request_async`` — the same on a canonical Request (any
  pools): the raw outcome.
- ``burst()`` — an execution burst on one gRPC stream (:mod:`nnhal.client.aio.burst`).

The numpy planning and decoding are :mod:`nnhal.client.numpy_io`'s, the request building
:mod:`nnhal.client.remote.messages`', shared with the sync client. Deadlines: ``timeout``
(seconds) and ``deadline_at`` (``time.monotonic()``) give the HAL deadline, which travels
on the wire; the gRPC deadline adds a margin so the server's own answer comes first.

Release with ``await release()`` or ``async with``; the server releases it anyway when the
session ends (there is no release on garbage collection: it would need an event loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from nnhal.client import steps
from nnhal.client.aio.burst import Burst
from nnhal.client.numpy_io import NumpyIO, decoder, numpy_execution
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.remote import calls
from nnhal.client.remote.aio_session import AioSession
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.core.errors import DeadObject, HalError, InvalidArgument
from nnhal.core.types import ExecutionResult, Model, Request


class PreparedModel:
    """A remote IPreparedModel for asyncio code."""

    def __init__(self, session: AioSession, handle: str, model: Model | None, model_cache: bytes = b"") -> None:
        self._session = session
        self.handle = handle
        self.model = model
        #: The model cache the server returned when asked for one (``cache_token``).
        self.model_cache = model_cache
        self._numpy = NumpyIO(model) if model is not None else None
        self._released = False

    # -- release -------------------------------------------------------------------------------
    async def release(self) -> None:
        """Release the server's object now (idempotent). Later executions: INVALID_ARGUMENT.

        Raises DEAD_OBJECT for a dead server (whose session released it anyway)."""
        if self._released:
            return
        self._released = True
        await self._session.run(calls.release_prepared_model(self._session.session_id, self.handle))

    async def __aenter__(self) -> PreparedModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.release()
        except DeadObject:
            pass

    # -- the two calls ---------------------------------------------------------------------------
    async def _execute(self, request: Request, options: ExecutionOptions) -> ExecutionResult:
        """executeSynchronously_1_3. Transport failures raise; HAL errors are in the result."""
        return await self._session.run(calls.execute(self._session.session_id, self.handle, request, options))

    async def _execute_stream(self, request: Request, options: ExecutionOptions) -> ExecutionResult:
        """execute_1_3; every failure comes back as a result carrying its status."""
        return await self._session.execute_stream(self.handle, request, options)

    # -- canonical requests ------------------------------------------------------------------------
    async def execute_request(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> ExecutionOutcome:
        """executeSynchronously_1_3 of a canonical Request; every status is in the outcome."""
        options = ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns)
        try:
            result = await self._execute(request, options)
        except HalError as err:
            return ExecutionOutcome(err.error_status, err.message)
        return ExecutionOutcome.of(result)

    def execute_request_async(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> asyncio.Task[ExecutionOutcome]:
        """execute_1_3 of a canonical Request, started at once: the task's result is the outcome
        (every status in it). Raises DEAD_OBJECT at once for a server known dead."""
        self._session.check("execute_1_3")
        options = ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns)

        async def run() -> ExecutionOutcome:
            return ExecutionOutcome.of(await self._execute_stream(request, options))

        return asyncio.get_running_loop().create_task(run(), name="nnhal-execute")

    def burst(self) -> Burst:
        """configureExecutionBurst: many executions on one gRPC stream (``async with``)."""
        return Burst(self._session.open_burst(), self.handle)

    # -- numpy ---------------------------------------------------------------------------------------
    def _io(self) -> NumpyIO:
        if self._numpy is None:
            raise InvalidArgument("this prepared model was made without its Model; use execute_request")
        return self._numpy

    async def execute(
        self,
        inputs: Sequence[np.ndarray | None],
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
        profile: bool = False,
    ) -> ExecutionOutcome:
        """Synchronous execution on numpy arrays; raises the HalError it ends with.
        ``profile`` asks the driver for time per operation type (``outcome.profile``)."""
        options = ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns, profile)
        return await steps.drive_async(
            numpy_execution(self._io(), inputs), lambda request: self._execute(request, options)
        )

    def execute_async(
        self,
        inputs: Sequence[np.ndarray | None],
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> asyncio.Task[ExecutionOutcome]:
        """execute_1_3 on numpy arrays, started at once: the task's result is the outcome (with
        ``outputs``), exactly once. Call from a running event loop. Raises DEAD_OBJECT at once
        for a server known dead, INVALID_ARGUMENT for inputs that do not fit the model."""
        self._session.check("execute_1_3")
        request, layout = self._io().request(inputs, None)
        options = ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns)
        decode = decoder(layout)

        async def run() -> ExecutionOutcome:
            return decode(await self._execute_stream(request, options))

        return asyncio.get_running_loop().create_task(run(), name="nnhal-execute")

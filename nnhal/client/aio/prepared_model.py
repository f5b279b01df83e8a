"""The asyncio prepared-model proxy: executions of a model prepared on a remote device.

The sync :class:`nnhal.client.prepared_model.PreparedModel`'s surface, awaited, driven
through the same calls (:mod:`nnhal.client.forms` picks the form of the device's level,
:mod:`nnhal.client.remote.calls` / :mod:`~nnhal.client.remote.aidl` /
:mod:`~nnhal.client.remote.hidl` build and read the messages):

- ``await execute(inputs)`` — a synchronous execution on numpy arrays: the outcome with
  ``outputs`` decoded, or the HalError it ended with raised (outputs of unknown shape are
  retried once with the sizes the driver reported, as the sync client does).
- ``execute_async(inputs)`` — an asynchronous execution (execute_1_3, or the level's
  form): returns an ``asyncio.Task`` at once whose result is the outcome, delivered
  exactly once; every failure (DEAD_OBJECT when the server dies meanwhile, a missed
  deadline, a transport error, what the level's form cannot carry) is in the outcome's
  status, never raised. DEAD_OBJECT is raised at the call itself for a server known dead.
- ``execute_request`` / ``execute_request_async`` — the same on a canonical Request (any
  pools): the raw outcome.
- ``execute_fenced`` (executeFenced), ``burst()`` (an execution burst on one gRPC stream,
  :mod:`nnhal.client.aio.burst`), and the AIDL forms: ``execute_request_aidl``,
  ``execute_with_config``, ``execute_fenced_aidl``, ``execute_fenced_with_config``,
  ``create_reusable_execution``, ``aidl_burst``.

Deadlines: ``timeout`` (seconds) and ``deadline_at`` (``time.monotonic()``) give the HAL
deadline, which travels on the wire; the gRPC deadline adds a margin so the server's own
answer comes first. Release with ``await release()`` or ``async with``; the server releases
it anyway when the session ends (there is no release on garbage collection: it would need
an event loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from nnhal.client import forms, steps
from nnhal.client.aio.aidl_burst import AidlBurst
from nnhal.client.aio.burst import Burst
from nnhal.client.aio.fenced import FencedExecution
from nnhal.client.aio.reusable_execution import ReusableExecution
from nnhal.client.numpy_io import NumpyIO, decoder, numpy_execution, settle
from nnhal.client.outcome import ExecutionOutcome, failed_result, outcome_of
from nnhal.client.release import AsyncReleasable
from nnhal.client.remote import aidl, calls, encoded
from nnhal.client.remote.aio_session import AioSession
from nnhal.client.remote.messages import ExecutionOptions
from nnhal.core.aidl_types import DEFAULT_EXECUTION_CONFIG, ExecutionConfig
from nnhal.core.enums import HalVersion
from nnhal.core.errors import HalError, InvalidArgument
from nnhal.core.types import ExecutionResult, Model, Request


class PreparedModel(AsyncReleasable):
    """A remote IPreparedModel for asyncio code."""

    def __init__(self, session: AioSession, handle: str, model: Model | None, model_cache: bytes = b"") -> None:
        self._session = session
        self.handle = handle
        self.model = model
        #: The model cache the server returned when asked for one (``cache_token``).
        self.model_cache = model_cache
        self._numpy = NumpyIO(model) if model is not None else None
        self._released = False

    @property
    def session_id(self) -> str:
        """The session this prepared model belongs to (it lives as long as that session)."""
        return self._session.session_id

    # -- release -------------------------------------------------------------------------------
    async def release(self) -> None:
        """Release the server's object now (idempotent). Later executions: INVALID_ARGUMENT.

        Raises DEAD_OBJECT for a dead server (whose session released it anyway)."""
        if self._released:
            return
        self._released = True
        await self._session.run(calls.release_prepared_model(self._session.session_id, self.handle))

    # -- the two calls, in the form of the device's level ------------------------------------------
    @property
    def _level(self) -> int:
        return forms.level_of(self._session)

    def _execute(self, request: Request, options: ExecutionOptions) -> calls.Call[ExecutionResult]:
        """The synchronous execution. Transport failures raise; HAL errors are in the result."""
        return forms.execute_call(self._level, self._session.session_id, self.handle, request, options)

    def _execute_task(
        self, request: Request, options: ExecutionOptions, convert: Callable[[ExecutionResult], ExecutionOutcome]
    ) -> asyncio.Task[ExecutionOutcome]:
        """The asynchronous execution started at once as a task; every status in its outcome."""
        self._session.check(forms.execute_async_method(self._level))
        try:
            step = forms.execute_launch(self._level, self._session.session_id, self.handle, request, options)
        except HalError as err:
            refusal = failed_result(err)

            async def refused() -> ExecutionOutcome:
                return convert(refusal)

            return asyncio.get_running_loop().create_task(refused(), name="nnhal-execute")

        async def run() -> ExecutionOutcome:
            return convert(await self._session.execute_launched(step))

        return asyncio.get_running_loop().create_task(run(), name="nnhal-execute")

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
        """A synchronous execution of a canonical Request; every status is in the outcome."""
        options = ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns)
        return await self._session.run(outcome_of(self._execute(request, options)))

    def execute_request_async(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> asyncio.Task[ExecutionOutcome]:
        """An asynchronous execution of a canonical Request, started at once: the task's result
        is the outcome (every status in it). Raises DEAD_OBJECT at once for a server known dead."""
        options = ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns)
        return self._execute_task(request, options, ExecutionOutcome.of)

    def burst(self, *, fast: bool | None = None, ring_bytes: int = 0) -> Burst:
        """configureExecutionBurst: many executions on one channel (``async with``) — the
        same-host fast path when the server offers it (``fast``: None), required (True) or not
        (False), else a gRPC stream (see :class:`Burst`). DEAD_OBJECT at once for a server
        known dead."""
        return Burst(self._session, self.handle, fast=fast, ring_bytes=ring_bytes, numpy_io=self._io)

    async def execute_fenced(
        self,
        request: Request,
        *,
        wait_for: Sequence[FencedExecution] = (),
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
        timeout_after_fence_ns: int = 0,
    ) -> FencedExecution:
        """executeFenced: starts once the ``wait_for`` executions have signalled. Raises the
        launch error (e.g. INVALID_ARGUMENT for unspecified output shapes)."""
        options = ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns)
        fences = [f.sync_fence for f in wait_for]
        call = calls.execute_fenced(
            self._session.session_id, self.handle, request, fences, options, timeout_after_fence_ns
        )
        sync_fence, callback = await self._session.run(call)
        return FencedExecution(self._session, sync_fence, callback)

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
        numpy_io = self._io()
        sizes = None
        session = self._session
        queue = getattr(session, "same_host", None)  # None: a session without one (a test double)
        # A test double may have neither.
        written = queue is None and getattr(session, "execute_encoded", None) is not None
        if (queue is not None or written) and not profile and self._modern():
            # A layout seen before: on the same-host queue that granted it an id, from the
            # arrays straight to a compact call; over gRPC, to a message written from the
            # plan's arguments (``remote.encoded``). From the answer straight to the outputs.
            planned = numpy_io.planned(inputs)
            if planned is not None:
                plan, parts = planned
                # The answer read apart (``settle``'s arguments after the plan): a queue's
                # ``fastanswer.Apart``, gRPC's ``encoded.Answer``, or a result alone.
                answer: tuple[Any, ...] | None = None
                if queue is not None:
                    answer = await queue.execute_planned(
                        self.handle, plan.compact, parts, measure, timeout, deadline_at, loop_timeout_ns
                    )
                else:
                    # As the sync client's: the plan's message bytes around its inputs, written
                    # once, the answer read apart; a plan whose pools are worth streaming is sent
                    # from its pools, as before.
                    options = ExecutionOptions.of(measure, timeout, deadline_at, loop_timeout_ns)
                    framed = plan.wire
                    if framed is None:
                        framed = plan.wire = encoded.framed_of(plan, session.session_id, self.handle)
                    if framed is not None:
                        answer = await session.execute_encoded(
                            self.handle, plan.inputs, plan.outputs, parts, options, framed
                        )
                    else:
                        result = await session.execute_encoded(
                            self.handle, plan.inputs, plan.outputs, plan.pools(parts), options
                        )
                        if result is not None:
                            answer = (result,)
                if answer is not None:
                    settled = settle(plan, *answer)
                    if isinstance(settled, ExecutionOutcome):
                        return settled
                    sizes = settled  # OUTPUT_INSUFFICIENT_SIZE: the retry takes the general path
        options = ExecutionOptions.of(measure, timeout, deadline_at, loop_timeout_ns, profile)
        return await steps.drive_async(
            numpy_execution(numpy_io, inputs, sizes),
            lambda request: self._session.run(self._execute(request, options)),
        )

    _level_seen: int = 0

    def _modern(self) -> bool:
        """Whether the device speaks the 1.3 forms (its session's level never changes)."""
        if not self._level_seen:
            self._level_seen = forms.level_of(self._session)
        return self._level_seen >= HalVersion.V1_3

    def execute_async(
        self,
        inputs: Sequence[np.ndarray | None],
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> asyncio.Task[ExecutionOutcome]:
        """An asynchronous execution on numpy arrays, started at once: the task's result is the
        outcome (with ``outputs``), exactly once. Call from a running event loop. Raises
        DEAD_OBJECT at once for a server known dead, INVALID_ARGUMENT for inputs that do not
        fit the model."""
        request, layout = self._io().request(inputs, None)
        options = ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns)
        return self._execute_task(request, options, decoder(layout))

    # -- AIDL forms (nnhal.client.remote.aidl) ---------------------------------------------------------
    async def execute_request_aidl(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int | None = None,
    ) -> ExecutionOutcome:
        """AIDL IPreparedModel::executeSynchronously; the outcome has ``timing_ns``."""
        sid = self._session.session_id
        call = aidl.execute(sid, self.handle, request, measure, timeout, deadline_at, loop_timeout_ns)
        return await self._session.run(outcome_of(call, ExecutionOutcome.of_timed))

    async def execute_with_config(
        self, request: Request, config: ExecutionConfig = DEFAULT_EXECUTION_CONFIG, *, timeout: float | None = None
    ) -> ExecutionOutcome:
        """AIDL V4 executeSynchronouslyWithConfig; the outcome has ``timing_ns`` (AIDL Timing)."""
        call = aidl.execute_with_config(self._session.session_id, self.handle, request, config, timeout, None)
        return await self._session.run(outcome_of(call, ExecutionOutcome.of_timed))

    async def execute_fenced_aidl(
        self,
        request: Request,
        *,
        wait_for: Sequence[FencedExecution] = (),
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int | None = None,
        duration_ns: int | None = None,
    ) -> FencedExecution:
        """AIDL IPreparedModel::executeFenced; its ``get_execution_info`` answers with AIDL timings."""
        fences = [f.sync_fence for f in wait_for]
        sid = self._session.session_id
        call = aidl.execute_fenced(
            sid, self.handle, request, fences, measure, timeout, deadline_at, loop_timeout_ns, duration_ns
        )
        sync_fence, callback = await self._session.run(call)
        return FencedExecution(self._session, sync_fence, callback, aidl=True)

    async def execute_fenced_with_config(
        self,
        request: Request,
        config: ExecutionConfig = DEFAULT_EXECUTION_CONFIG,
        *,
        wait_for: Sequence[FencedExecution] = (),
        timeout: float | None = None,
        deadline_at: float | None = None,
        duration_ns: int | None = None,
    ) -> FencedExecution:
        """AIDL V4 executeFencedWithConfig (as ``execute_fenced_aidl``, with an ExecutionConfig)."""
        fences = [f.sync_fence for f in wait_for]
        sid = self._session.session_id
        call = aidl.execute_fenced_with_config(
            sid, self.handle, request, fences, config, timeout, deadline_at, duration_ns
        )
        sync_fence, callback = await self._session.run(call)
        return FencedExecution(self._session, sync_fence, callback, aidl=True)

    async def create_reusable_execution(
        self, request: Request | Sequence[np.ndarray | None], config: ExecutionConfig = DEFAULT_EXECUTION_CONFIG
    ) -> ReusableExecution:
        """AIDL V4 createReusableExecution (a canonical Request, or numpy inputs whose outputs
        each run decodes). Raises its HalError."""
        if isinstance(request, Request):
            return await ReusableExecution.create(self._session, self.handle, request, config, None)
        canonical, layout = self._io().request(request, None)
        return await ReusableExecution.create(self._session, self.handle, canonical, config, decoder(layout))

    async def aidl_burst(self) -> AidlBurst:
        """AIDL configureExecutionBurst: an IBurst caching memories by identifier token."""
        return await AidlBurst.configure(self._session, self.handle)

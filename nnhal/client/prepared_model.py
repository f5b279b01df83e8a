"""The prepared-model proxy: executions of a model prepared on a remote device.

Two levels:
- ``execute`` / ``execute_async`` take numpy arrays and return numpy arrays;
  inputs travel in one inline pool, outputs come back in another. They build a
  canonical Request and take the same path as ``execute_request``.
- ``execute_request`` takes a canonical Request (any pools) and returns the raw
  outcome (status, output shapes, timing, returned inline pools).

Thread-safe. Released explicitly (``release``, ``with``) or on garbage collection;
the server releases it anyway when the session ends.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np

from nnhal.client import forms, steps
from nnhal.client.aidl_burst import AidlBurst
from nnhal.client.burst import Burst
from nnhal.client.fenced import FencedExecution
from nnhal.client.numpy_io import Layout, NumpyIO, _Plan, decode_outputs, decoder, numpy_execution, settled
from nnhal.client.outcome import ExecutionCallback, ExecutionOutcome, outcome_of
from nnhal.client.release import Releasable
from nnhal.client.remote import ExecutionOptions, RemoteSession, aidl, encoded
from nnhal.client.reusable_execution import ReusableExecution
from nnhal.core.aidl_types import DEFAULT_EXECUTION_CONFIG, ExecutionConfig
from nnhal.core.enums import HalVersion
from nnhal.core.errors import InvalidArgument
from nnhal.core.types import Model, Request

__all__ = ["Burst", "ExecutionCallback", "ExecutionOutcome", "FencedExecution", "PreparedModel"]


class PreparedModel(Releasable):
    """A remote IPreparedModel. Thread-safe. Release explicitly, with ``with``, or on GC."""

    def __init__(self, remote: RemoteSession, handle: str, model: Model | None, model_cache: bytes = b"") -> None:
        self._remote = remote
        self.handle = handle
        self.model = model
        #: The model cache the server returned when asked for one (``cache_token``).
        self.model_cache = model_cache
        self._released = False
        self._lock = threading.Lock()
        self._numpy = NumpyIO(model) if model is not None else None
        self._finalizer = weakref.finalize(self, PreparedModel._release_remote, weakref.ref(remote), handle)

    # -- release ---------------------------------------------------------------
    @staticmethod
    def _release_remote(remote_ref: weakref.ref[RemoteSession], handle: str) -> None:
        remote = remote_ref()
        if remote is not None:
            remote.discard_prepared_model(handle)

    def release(self) -> None:
        """Release the server's object now (idempotent). Later executions: INVALID_ARGUMENT.

        Raises DEAD_OBJECT for a dead server (whose session released it anyway)."""
        with self._lock:
            if self._released:
                return
            self._released = True
        self._finalizer.detach()
        self._remote.release_prepared_model(self.handle)

    # -- canonical requests ------------------------------------------------------
    def execute_request(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> ExecutionOutcome:
        """executeSynchronously_1_3 of a canonical Request; the status (transport failures
        included) is in the outcome."""
        options = ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns)
        return self._remote.run(outcome_of(forms.execute_steps(self._remote, self.handle, request, options)))

    def execute_request_async(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> ExecutionCallback:
        """execute_1_3: returns at once; the callback delivers the outcome exactly once,
        DEAD_OBJECT included if the server dies meanwhile. Raises DEAD_OBJECT at launch
        for a server known dead."""
        options = ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns)
        return forms.execute_async(self._remote, self.handle, request, options).then(ExecutionOutcome.of)

    # -- numpy convenience (planning and decoding: nnhal.client.numpy_io) --------
    def _numpy_io(self) -> NumpyIO:
        if self._numpy is None:
            raise InvalidArgument("this prepared model was made from a cache without its Model; use execute_request")
        return self._numpy

    def _numpy_request(
        self, inputs: Sequence[np.ndarray | None], output_sizes: Sequence[int] | None
    ) -> tuple[Request, Layout]:
        """A Request with every input in one inline pool and room for every output in another
        (:meth:`NumpyIO.request`)."""
        return self._numpy_io().request(inputs, output_sizes)

    _level: int = 0

    def _modern(self) -> bool:
        """Whether the device speaks the 1.3 forms (its session's level never changes)."""
        if not self._level:
            self._level = forms.level_of(self._remote)
        return self._level >= HalVersion.V1_3

    _decode = staticmethod(decode_outputs)
    _decoder = staticmethod(decoder)

    #: The planned call of the last numpy layout (:meth:`_sender`): its plan and how a call of it
    #: is sent, made once per plan; None until a call of a layout seen before took one.
    _planned: tuple[_Plan, Callable[..., Any]] | None = None

    def execute(
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

        Outputs of unknown shape are retried once with the sizes the driver reported.
        ``profile`` asks the driver for time per operation type (``outcome.profile``)."""
        planned = self._planned  # never set for a session recording (its recorder is set at connect)
        if planned is not None and not profile:
            # Arrays of the last planned call's layout: its parts filled in and sent as that
            # call's were (no plan looked up, no way chosen); from the answer to the outputs.
            plan, send = planned
            parts = plan.parts_of(inputs)
            if parts is not None:
                answer = send(parts, measure, timeout, deadline_at, loop_timeout_ns)
                if answer is not None:
                    outcome = settled(plan, answer)
                    if isinstance(outcome, ExecutionOutcome):
                        return outcome
                    # OUTPUT_INSUFFICIENT_SIZE: the retry takes the general path
                    return self._execute(inputs, measure, timeout, deadline_at, loop_timeout_ns, profile, outcome)
        return self._execute(inputs, measure, timeout, deadline_at, loop_timeout_ns, profile, None)

    def _execute(
        self,
        inputs: Sequence[np.ndarray | None],
        measure: bool,
        timeout: float | None,
        deadline_at: float | None,
        loop_timeout_ns: int,
        profile: bool,
        sizes: list[int] | None,
    ) -> ExecutionOutcome:
        """:meth:`execute`'s general path: a call its planned call did not take (``sizes`` None),
        or the retry of one it made that answered OUTPUT_INSUFFICIENT_SIZE (``sizes``: the
        output sizes to retry with)."""
        numpy_io = self._numpy or self._numpy_io()  # None: raises why
        remote = self._remote
        if sizes is None and not profile and remote.recorder is None:
            # A layout seen before: on the same-host queue that granted it an id, from the
            # arrays straight to a compact call; over gRPC, to a message written from the
            # plan's arguments (``remote.encoded``). From the answer straight to the outputs.
            planned = numpy_io.planned(inputs)
            if planned is not None:
                plan, parts = planned
                send = plan.wire
                if send is None:
                    send = plan.wire = self._sender(plan)
                if send:
                    if plan is numpy_io.last:  # its facts known: later calls of it take the planned call
                        self._planned = (plan, send)
                    # The answer read apart (``settle``'s arguments after the plan): a queue's
                    # ``fastanswer.Apart``, gRPC's ``encoded.Answer``, or the outcome the layout's
                    # reader made (``settled``); None: nothing sent.
                    answer = send(parts, measure, timeout, deadline_at, loop_timeout_ns)
                    if answer is not None:
                        outcome = settled(plan, answer)
                        if isinstance(outcome, ExecutionOutcome):
                            return outcome
                        sizes = outcome  # OUTPUT_INSUFFICIENT_SIZE: the retry takes the general path
        options = ExecutionOptions.of(measure, timeout, deadline_at, loop_timeout_ns, profile)
        return steps.drive(
            numpy_execution(numpy_io, inputs, sizes),
            lambda request: forms.execute(self._remote, self.handle, request, options),
        )

    def _sender(self, plan: _Plan) -> Callable[..., Any] | bool:
        """How the calls of ``plan`` (a layout seen before) are sent, decided once per plan —
        called with its parts and the options of an unprofiled call, answering read apart or
        None (nothing sent): on the session's same-host queue (a compact call), else over gRPC
        as a message written around its inputs (``RemoteSession.execute_framed``, its frame
        made here); False for neither (a device below the 1.3 forms, a plan whose pools are
        worth streaming, a test double with neither way). The queue is set up with the
        session, before its prepared models, and the session's level never changes."""
        if not self._modern():
            return False
        remote = self._remote
        queue = getattr(remote, "same_host", None)  # None: a session without one (a test double)
        if queue is not None:
            return partial(queue.execute_planned, self.handle, plan.compact)
        execute_framed = getattr(remote, "execute_framed", None)
        framed = encoded.framed_of(plan, remote.session_id, self.handle, plan.made)
        if execute_framed is None or framed is None:
            return False
        return partial(execute_framed, framed)

    def execute_async(
        self,
        inputs: Sequence[np.ndarray | None],
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> ExecutionCallback:
        """execute_1_3 on numpy arrays: the callback's value has ``outputs``."""
        request, layout = self._numpy_request(inputs, None)
        options = ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns)
        return forms.execute_async(self._remote, self.handle, request, options).then(self._decoder(layout))

    # -- fenced execution and bursts ---------------------------------------------
    def execute_fenced(
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
        """executeFenced: starts once the ``wait_for`` executions have signalled.

        Raises the launch error (e.g. INVALID_ARGUMENT for unspecified output shapes)."""
        options = ExecutionOptions(measure, timeout, deadline_at, loop_timeout_ns)
        fences = [f.sync_fence for f in wait_for]
        sync_fence, callback = self._remote.execute_fenced(
            self.handle, request, fences, options, timeout_after_fence_ns
        )
        return FencedExecution(self._remote, sync_fence, callback)

    def burst(self, *, fast: bool | None = None, ring_bytes: int = 0) -> Burst:
        """configureExecutionBurst: many executions on one channel — the same-host fast path
        when the server offers it (``fast``: None), required (True) or not (False), else a
        gRPC stream (see :class:`Burst`)."""
        return Burst(self._remote, self.handle, fast=fast, ring_bytes=ring_bytes, numpy_io=self._numpy_io)

    @property
    def session_id(self) -> str:
        """The session this prepared model belongs to (it lives as long as that session)."""
        return self._remote.session_id

    # -- AIDL forms (nnhal.client.remote.aidl) ---------------------------------------
    def _sid(self) -> str:
        return self._remote.session_id

    def execute_with_config(
        self, request: Request, config: ExecutionConfig = DEFAULT_EXECUTION_CONFIG, *, timeout: float | None = None
    ) -> ExecutionOutcome:
        """AIDL V4 executeSynchronouslyWithConfig; the outcome has ``timing_ns`` (AIDL Timing)."""
        call = aidl.execute_with_config(self._sid(), self.handle, request, config, timeout, None)
        return self._remote.run(outcome_of(call, ExecutionOutcome.of_timed))

    def execute_request_aidl(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int | None = None,
    ) -> ExecutionOutcome:
        """AIDL IPreparedModel::executeSynchronously (AIDL V1+); the outcome has ``timing_ns``.
        ``loop_timeout_ns`` None: the default."""
        call = aidl.execute(self._sid(), self.handle, request, measure, timeout, deadline_at, loop_timeout_ns)
        return self._remote.run(outcome_of(call, ExecutionOutcome.of_timed))

    def execute_fenced_aidl(
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
        """AIDL IPreparedModel::executeFenced (AIDL V1+): starts once the ``wait_for`` executions
        signalled and has ``duration_ns`` from then (MISSED_DEADLINE_* past it; None: no limit).
        Its ``get_execution_info`` answers with AIDL timings. Raises the launch error."""
        fences = [f.sync_fence for f in wait_for]
        sync_fence, callback = self._remote.run(
            aidl.execute_fenced(
                self._sid(), self.handle, request, fences, measure, timeout, deadline_at, loop_timeout_ns, duration_ns
            )
        )
        return FencedExecution(self._remote, sync_fence, callback, aidl=True)

    def execute_fenced_with_config(
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
        sync_fence, callback = self._remote.run(
            aidl.execute_fenced_with_config(
                self._sid(), self.handle, request, fences, config, timeout, deadline_at, duration_ns
            )
        )
        return FencedExecution(self._remote, sync_fence, callback, aidl=True)

    def create_reusable_execution(
        self, request: Request | Sequence[np.ndarray | None], config: ExecutionConfig = DEFAULT_EXECUTION_CONFIG
    ) -> ReusableExecution:
        """AIDL V4 createReusableExecution: one request (a canonical Request, or numpy inputs
        whose outputs each run decodes) validated once, run many times. Raises its HalError."""
        if isinstance(request, Request):
            return ReusableExecution.create(self._remote, self.handle, request, config, None)
        canonical, layout = self._numpy_request(request, None)
        return ReusableExecution.create(self._remote, self.handle, canonical, config, self._decoder(layout))

    def aidl_burst(self) -> AidlBurst:
        """AIDL configureExecutionBurst: an IBurst caching memories by identifier token."""
        return AidlBurst.configure(self._remote, self.handle)

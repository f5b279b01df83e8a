"""ResilientPreparedModel: an IPreparedModel re-created on demand after its server died.

Every call goes through ``protect`` (see :mod:`nnhal.client.recovery`): on
DEAD_OBJECT — raised, or in-band in an outcome — the prepared model is
re-created once (``ResilientDevice`` prepares the same Model again) and the call
retried once. Asynchronous executions run the protected form on a helper
thread, so a death during the execution is recovered too. ``execute_fenced``
and ``burst`` are protected at launch only: a fence or burst belongs to the
prepared model that existed when it was made.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from nnhal.client import steps
from nnhal.client.burst import Burst
from nnhal.client.callbacks import Callback
from nnhal.client.fenced import FencedExecution
from nnhal.client.interfaces import IPreparedModel, IResult
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.recovery import Attempt, Recover, Recoverer, protected
from nnhal.client.release import Releasable
from nnhal.client.remote import wait_bound
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import Model, Request

R = TypeVar("R")
PreparedModelFactory = Callable[[], IPreparedModel]


class ResilientPreparedModel(Releasable):
    """An IPreparedModel re-created on demand after its server died. Thread-safe.

    ``factory`` makes a fresh prepared model (``ResilientDevice`` passes one that
    prepares the same Model again through the resilient device)."""

    def __init__(self, factory: PreparedModelFactory, prepared: IPreparedModel | None = None) -> None:
        self._factory = factory
        self._recoverer = Recoverer(prepared if prepared is not None else factory(), self._make)

    def _make(self, failing: IPreparedModel) -> IPreparedModel:
        replacement = self._factory()
        try:
            failing.release()
        except HalError:  # dead: its session is gone with its server
            pass
        return replacement

    @property
    def prepared_model(self) -> IPreparedModel:
        """The prepared model calls currently go to."""
        return self._recoverer.current

    @property
    def recoveries(self) -> int:
        return self._recoverer.recoveries

    def current_in(self, session_id: str) -> IPreparedModel:
        """The current prepared model, re-created first (by the recover-once rule) when it
        belongs to a session other than ``session_id``: one made before the device's death.
        A prepared model that names no session (not a remote proxy) is returned as it is."""
        pm, attempts = self._recoverer.snapshot()
        if getattr(pm, "session_id", session_id) == session_id:
            return pm
        return self._recoverer.recover(pm, attempts)

    @property
    def model(self) -> Model | None:
        return self.prepared_model.model

    def protect(self, fn: Callable[[IPreparedModel], R], dead: Callable[[R], bool] | None = None) -> R:
        """Run ``fn``; on DEAD_OBJECT (raised, or in-band when ``dead(result)``) re-create and retry once.

        In-band results whose recovery fails come back as they were, with the
        recovery error appended to their message."""
        pm, attempts = self._recoverer.snapshot()

        def perform(step: Attempt | Recover) -> Any:
            if isinstance(step, Recover):
                return self._recoverer.recover(step.failing, step.attempts)
            return fn(step.target)

        return steps.drive(protected(pm, attempts, "prepared model", dead), perform)  # type: ignore[no-any-return]

    # -- executions ----------------------------------------------------------------------
    def execute(
        self,
        inputs: Sequence[np.ndarray | None],
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> ExecutionOutcome:
        return self.protect(
            lambda pm: pm.execute(
                inputs, measure=measure, timeout=timeout, deadline_at=deadline_at, loop_timeout_ns=loop_timeout_ns
            )
        )

    def execute_request(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> ExecutionOutcome:
        """executeSynchronously_1_3; the status is in the outcome (DEAD_OBJECT only if recovery failed)."""
        return self.protect(
            lambda pm: pm.execute_request(
                request, measure=measure, timeout=timeout, deadline_at=deadline_at, loop_timeout_ns=loop_timeout_ns
            ),
            _outcome_dead,
        )

    def _async(
        self, launch: Callable[[IPreparedModel], IResult[ExecutionOutcome]], timeout: float | None
    ) -> Callback[ExecutionOutcome]:
        def run(pm: IPreparedModel) -> IResult[ExecutionOutcome]:
            cb = launch(pm)
            cb.wait(wait_bound(timeout))
            return cb

        def background() -> IResult[ExecutionOutcome]:
            return self.protect(run, lambda cb: cb.status == ErrorStatus.DEAD_OBJECT)

        outer: Callback[ExecutionOutcome] = Callback()

        def deliver() -> None:
            try:
                cb = background()
            except HalError as err:
                outer.notify(err.error_status, ExecutionOutcome.failed(err), err.message)
                return
            if not cb.done():
                outer.notify(ErrorStatus.GENERAL_FAILURE, None, f"no result within {wait_bound(timeout)} s")
                return
            value = getattr(cb, "value", None)
            outer.notify(cb.status, value, cb.message)

        threading.Thread(target=deliver, name="nnhal-resilient-execute", daemon=True).start()
        return outer

    def execute_async(
        self,
        inputs: Sequence[np.ndarray | None],
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> Callback[ExecutionOutcome]:
        """execute_1_3 on numpy arrays; a death during the execution is recovered and retried once."""
        return self._async(
            lambda pm: pm.execute_async(
                inputs, measure=measure, timeout=timeout, deadline_at=deadline_at, loop_timeout_ns=loop_timeout_ns
            ),
            timeout,
        )

    def execute_request_async(
        self,
        request: Request,
        *,
        measure: bool = False,
        timeout: float | None = None,
        deadline_at: float | None = None,
        loop_timeout_ns: int = 0,
    ) -> Callback[ExecutionOutcome]:
        """execute_1_3 of a canonical Request; recovered and retried once on DEAD_OBJECT."""
        return self._async(
            lambda pm: pm.execute_request_async(
                request, measure=measure, timeout=timeout, deadline_at=deadline_at, loop_timeout_ns=loop_timeout_ns
            ),
            timeout,
        )

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
        """executeFenced, protected at launch (the fence belongs to the prepared model of the time)."""
        return self.protect(
            lambda pm: pm.execute_fenced(
                request,
                wait_for=wait_for,
                measure=measure,
                timeout=timeout,
                deadline_at=deadline_at,
                loop_timeout_ns=loop_timeout_ns,
                timeout_after_fence_ns=timeout_after_fence_ns,
            )
        )

    def burst(self) -> Burst:
        """configureExecutionBurst, protected at launch."""
        return self.protect(lambda pm: pm.burst())

    # -- lifetime ---------------------------------------------------------------------------
    def release(self) -> None:
        """Release the current prepared model; a dead one needs no release."""
        with contextlib.suppress(*Releasable.SWALLOWED):
            self.prepared_model.release()


def _outcome_dead(outcome: ExecutionOutcome) -> bool:
    return outcome.status == ErrorStatus.DEAD_OBJECT

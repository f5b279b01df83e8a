"""ExecutionOutcome: what an execution returns to the user, built from the canonical results.

Every execution path (``execute``, ``execute_request``, their async forms, bursts
and fenced executions) reports an ``ExecutionOutcome``: the status travels in the
outcome (``raise_for_status`` turns it into the HalError), outputs of inline
pools come back in ``output_pools``, and the numpy paths add decoded ``outputs``.
Outcomes are plain mutable values, owned by the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from nnhal.client import steps
from nnhal.client.callbacks import Callback
from nnhal.core import fastanswer
from nnhal.core.aidl_types import TimingNs
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import ExecutionResult, FencedExecutionInfo, OperationTiming, OutputShape, PoolData, Timing

#: The timing of an execution that was not measured: one shared value (Timing is frozen).
_NOT_MEASURED = Timing()


@dataclass
class ExecutionOutcome:
    status: ErrorStatus
    message: str = ""
    output_shapes: tuple[OutputShape, ...] = ()
    timing: Timing = _NOT_MEASURED
    #: Returned contents of inline pools that hold outputs, by pool index.
    output_pools: dict[int, PoolData] = field(default_factory=dict)
    #: Decoded outputs (``execute`` / ``execute_async`` only).
    outputs: list[np.ndarray] = field(default_factory=list)
    #: (operation type, count, total microseconds), slowest first, when profiled.
    profile: list[tuple[str, int, int]] = field(default_factory=list)
    #: Every operation run, in order, when profiled (``nnhal.client.timeline`` draws it).
    timeline: tuple[OperationTiming, ...] = ()
    #: Fenced executions only: the timing up to launch (``timing`` is up to the fence's signal).
    timing_launched: Timing = _NOT_MEASURED
    #: Fenced executions only: whether the fence has signalled.
    signalled: bool = False
    #: AIDL forms only: the Timing as the device sent it (nanoseconds, -1 when not available);
    #: for a fenced execution the timing up to the fence's signal.
    timing_ns: TimingNs | None = None
    #: AIDL fenced executions only: the timing up to launch, as the device sent it.
    timing_launched_ns: TimingNs | None = None

    def raise_for_status(self) -> None:
        if self.status != ErrorStatus.NONE:
            err = HalError.of(self.status, self.message)
            err.output_shapes = self.output_shapes  # type: ignore[attr-defined]
            raise err

    @classmethod
    def of_answer(cls, answer: fastanswer.Apart) -> ExecutionOutcome:
        """:meth:`of` an answer read apart (``fastanswer.Apart``): a same-host compact answer's
        outcome made without its result (an answer with a profile or a timeline, which no
        compact answer carries, through its whole result)."""
        r, pools, timing = answer
        if r.profile or r.timeline:
            return cls.of(fastanswer.whole(answer))
        return cls.answered(r.status, r.message, r.output_shapes, timing, pools, [])

    @classmethod
    def of(cls, result: ExecutionResult, timing_ns: TimingNs | None = None) -> ExecutionOutcome:
        # Through ``answered`` (the defaults' dict, not ``__init__``'s step per field): made on
        # every execution's path.
        outcome = cls.answered(
            result.status, result.message, result.output_shapes, result.timing, result.output_pools, []
        )
        if result.profile:
            outcome.profile = [(p.operation, p.count, p.total_us) for p in result.profile]
        outcome.timeline = result.timeline
        outcome.timing_ns = timing_ns
        return outcome

    @classmethod
    def answered(
        cls,
        status: ErrorStatus,
        message: str,
        output_shapes: tuple[OutputShape, ...],
        timing: Timing,
        output_pools: dict[int, PoolData],
        outputs: list[np.ndarray],
    ) -> ExecutionOutcome:
        """``cls(status, message, output_shapes, timing, output_pools, outputs)`` — the same
        instance, every other field at its default — made at a fraction of ``__init__``'s cost
        (one step per field there; made on every numpy execution's path): the defaults' dict
        copied with these fields, the mutable ones (``_FRESH``) new."""
        outcome: ExecutionOutcome = _new(cls)
        outcome.__dict__ = {
            **_DEFAULTS,
            "status": status,
            "message": message,
            "output_shapes": output_shapes,
            "timing": timing,
            "output_pools": output_pools,
            "outputs": outputs,
            "profile": [],
        }
        return outcome

    @classmethod
    def of_kept(cls, kept: KeptAnswer, pools: dict[int, PoolData], outputs: list[np.ndarray]) -> ExecutionOutcome:
        """:meth:`answered` of an answer alike the one ``kept`` was made of (:func:`kept_answer`:
        its result, shared by such answers, is ``kept[0]``) with this answer's own ``pools``:
        its fields but those copied from the kept ones, none read again."""
        fields = kept[1].copy()  # a copy and three sets: faster than a merge into a new dict
        fields["output_pools"] = pools
        fields["outputs"] = outputs
        fields["profile"] = []
        outcome: ExecutionOutcome = _new(cls)
        outcome.__dict__ = fields
        return outcome

    @classmethod
    def failed(cls, err: HalError) -> ExecutionOutcome:
        """The outcome of an execution that ended with ``err`` (its status and message)."""
        return cls(err.error_status, err.message)

    @classmethod
    def of_timed(cls, result: tuple[ExecutionResult, TimingNs]) -> ExecutionOutcome:
        """The outcome of an AIDL form's (result, Timing)."""
        return cls.of(*result)

    @classmethod
    def of_fenced(
        cls, info: FencedExecutionInfo, launched_ns: TimingNs | None = None, fenced_ns: TimingNs | None = None
    ) -> ExecutionOutcome:
        """``launched_ns`` / ``fenced_ns``: the AIDL timings, when asked through the AIDL form."""
        return cls(
            status=info.status,
            message=info.message,
            timing=info.timing_fenced,
            output_pools=info.output_pools,
            timing_launched=info.timing_launched,
            signalled=info.signalled,
            timing_ns=fenced_ns,
            timing_launched_ns=launched_ns,
        )


_new = object.__new__
#: The fields of an outcome at their defaults, in order (:meth:`ExecutionOutcome.answered`).
_DEFAULTS: dict[str, Any] = vars(ExecutionOutcome(ErrorStatus.NONE))
#: The fields whose default is made anew for each outcome: ``answered`` sets each one.
_FRESH = ("output_pools", "outputs", "profile")

#: An answer's outcome kept for the answers alike (:func:`kept_answer`): the result they share
#: (None: none kept yet), and the outcome's fields made of it, their pools and outputs left to
#: each answer (:meth:`ExecutionOutcome.of_kept`).
KeptAnswer = tuple[ExecutionResult | None, dict[str, Any]]
#: No answer kept yet: no result is ``None``.
NO_KEPT_ANSWER: KeptAnswer = (None, {})


def kept_answer(answer: fastanswer.Apart) -> KeptAnswer | None:
    """What the outcomes of the answers alike ``answer`` are made of, kept by a caller that runs
    one layout again and again — for an answer read apart whose result is one shared by every
    answer alike (``encoded``'s reading of an answer like one read before: its pools are not
    the result's) with no profile or timeline; None for any other (its outcome is made through
    :meth:`ExecutionOutcome.of_answer`). The answers alike are then known by their result alone
    (``answer[0] is kept[0]``): they differ from it in their output pools only."""
    r, pools, timing = answer
    if pools is r.output_pools or timing is not r.timing or r.profile or r.timeline:
        return None
    fields = {**_DEFAULTS, "status": r.status, "message": r.message, "output_shapes": r.output_shapes, "timing": timing}
    return r, fields


ExecutionCallback = Callback[ExecutionOutcome]

S = TypeVar("S")
R = TypeVar("R")


def failed_result(err: HalError) -> ExecutionResult:
    """The result of an execution that ended with ``err`` before the device answered."""
    return ExecutionResult(err.error_status, err.message)


def outcome_of(
    call: Generator[S, Any, R],
    convert: Callable[[R], ExecutionOutcome] = ExecutionOutcome.of,  # type: ignore[assignment]
) -> Generator[S, Any, ExecutionOutcome]:
    """An execution call (:mod:`nnhal.client.steps`) whose every status, a transport failure's
    included, is in the returned outcome."""
    return steps.catching(call, convert, ExecutionOutcome.failed)


def result_of(call: Generator[S, Any, ExecutionResult]) -> Generator[S, Any, ExecutionResult]:
    """An execution call whose every status is in the returned result."""
    return steps.catching(call, lambda result: result, failed_result)

"""Conformance mode ``validation``: the VTS ValidateModel / ValidateRequest suite against a
server, from each valid case (``mutations``).

Every model mutation must get INVALID_ARGUMENT from getSupportedOperations and from
prepareModel (its launch status or its callback); every request mutation, on the prepared
valid model, INVALID_ARGUMENT from execute, executeSynchronously, a burst and executeFenced
(timing requested for half of them, by the VTS's parity of the mutation's name). A case
passes when all its mutations do; a failure names the family, the mutation, the step and
the status. ``MutationCounts`` totals the mutations per family over a run (thread-safe).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from nnhal.client.burst import Burst
from nnhal.client.device import Device
from nnhal.client.prepared_model import ExecutionOutcome, PreparedModel
from nnhal.conformance.mutations import model_mutations, request_mutations
from nnhal.conformance.variants import build_request
from nnhal.conformance.vectors import TestCase
from nnhal.core.enums import ErrorStatus
from nnhal.core.errors import HalError
from nnhal.core.types import Model, Request

_WAIT = 120.0
#: Failures named in a case's detail (the count says how many there were).
_SHOWN = 3


class MutationCounts:
    """Mutations generated per family over a run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, counts: Counter[str]) -> None:
        with self._lock:
            self._counts.update(counts)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


COUNTS = MutationCounts()


def _status(call: Callable[[], object]) -> ErrorStatus:
    """The HAL status a call ends with (a raised HalError's, else NONE)."""
    try:
        call()
    except HalError as err:
        return err.error_status
    return ErrorStatus.NONE


def _prepare_status(dev: Device, model: Model) -> ErrorStatus:
    try:
        cb = dev.prepare_model(model)
    except HalError as err:
        return err.error_status
    if not cb.wait(_WAIT):
        return ErrorStatus.GENERAL_FAILURE
    if cb.status == ErrorStatus.NONE:
        cb.get(0).release()
    return cb.status


def _model_failures(dev: Device, model: Model) -> list[str]:
    failures = []
    status = _status(lambda: dev.supported_operations_with_reasons(model))
    if status != ErrorStatus.INVALID_ARGUMENT:
        failures.append(f"getSupportedOperations returned {status.name}")
    status = _prepare_status(dev, model)
    if status != ErrorStatus.INVALID_ARGUMENT:
        failures.append(f"prepareModel returned {status.name}")
    return failures


def _measure(message: str) -> bool:
    """The VTS requests timing for half the mutations: by the parity of the message's bytes."""
    parity = 0
    for c in message.encode():
        parity ^= c
    return bool(parity & 1)


def _request_failures(prepared: PreparedModel, burst: Burst, request: Request, message: str) -> list[str]:
    """ValidateRequest's four paths: execute, executeSynchronously, the burst, executeFenced."""
    measure = _measure(message)
    statuses: dict[str, ErrorStatus | None] = {}
    acb = prepared.execute_request_async(request, measure=measure)
    outcome = (acb.value or ExecutionOutcome(acb.status, acb.message)) if acb.wait(_WAIT) else None
    statuses["execute"] = None if outcome is None else outcome.status
    statuses["executeSynchronously"] = prepared.execute_request(request, measure=measure).status
    statuses["burst"] = burst.execute(request, measure=measure).status
    try:
        prepared.execute_fenced(request)
    except HalError as err:
        statuses["executeFenced"] = err.error_status
    else:
        statuses["executeFenced"] = ErrorStatus.NONE
    return [
        f"{step} returned {'no callback' if status is None else status.name}"
        for step, status in statuses.items()
        if status != ErrorStatus.INVALID_ARGUMENT
    ]


def run_validation(dev: Device, case: TestCase) -> tuple[bool, str]:
    """(passed, detail) of every mutation of ``case``; counts go to ``COUNTS``."""
    counts: Counter[str] = Counter()
    failures: list[str] = []
    for family, message, model in model_mutations(case.model):
        counts[family] += 1
        failures += [f"{family}: {message}: {why}" for why in _model_failures(dev, model)]
    try:
        cb = dev.prepare_model(case.model)
        prepared = cb.get(_WAIT)
    except HalError:
        prepared = None  # the device cannot run the case: no request to mutate, as in the VTS
    if prepared is not None:
        with prepared, prepared.burst() as burst:
            for family, message, request in request_mutations(build_request(case)):
                counts[family] += 1
                failures += [
                    f"{family}: {message}: {why}" for why in _request_failures(prepared, burst, request, message)
                ]
    COUNTS.add(counts)
    total = sum(counts.values())
    if failures:
        shown = "; ".join(failures[:_SHOWN])
        return False, f"{len(failures)} of {total} mutations not refused with INVALID_ARGUMENT: {shown}"
    return True, f"{total} mutations refused with INVALID_ARGUMENT"

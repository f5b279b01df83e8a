"""What every conformance mode checks of one execution (the VTS harness's checks).

- ``check_outcome``: status NONE and, when reported (always for dynamic outputs), one
  fully specified, sufficient shape per output equal to the expected one;
- ``check_values``: the returned output pool compared as ``compare.compare_case``;
- ``check_timing`` / ``check_timing_ns``: without MeasureTiming YES no timing may be
  reported (UINT64_MAX / -1); with it each value is "not available" or a duration
  (>= 0), and time on device is at most time in driver when both are there.
A failed check raises ``CaseFailure`` naming what differs; a mode that cannot run
against this server (e.g. no same-host fast path) raises ``CaseSkipped`` with the reason.
"""

from __future__ import annotations

from nnhal.client.device import Device
from nnhal.client.prepared_model import ExecutionOutcome, PreparedModel
from nnhal.conformance.compare import compare_case
from nnhal.conformance.variants import output_bytes
from nnhal.conformance.vectors import TestCase
from nnhal.core.aidl_types import UNAVAILABLE, TimingNs
from nnhal.core.enums import ErrorStatus, HalVersion
from nnhal.core.types import NO_TIMING, Request, Timing

#: Seconds any one step of a mode may take (a callback, a fence) on a loaded machine.
WAIT = 120.0


class CaseFailure(Exception):
    """The case failed in this mode; the message says at which step and why."""


class CaseSkipped(Exception):
    """The mode cannot run against this server; the message says why."""


def check_outcome(case: TestCase, outcome: ExecutionOutcome, dynamic: bool = False) -> None:
    if outcome.status != ErrorStatus.NONE:
        raise CaseFailure(f"execution returned {outcome.status.name}: {outcome.message}")
    shapes = outcome.output_shapes
    if dynamic or shapes:
        if len(shapes) != len(case.outputs):
            raise CaseFailure(f"{len(shapes)} output shapes reported, expected {len(case.outputs)}")
        for k, (shape, exp) in enumerate(zip(shapes, case.outputs)):
            if not shape.is_sufficient or tuple(shape.dimensions) != exp.dimensions:
                raise CaseFailure(
                    f"output {k} shape {list(shape.dimensions)} (sufficient={shape.is_sufficient}), "
                    f"expected {list(exp.dimensions)}"
                )


def check_values(case: TestCase, outcome: ExecutionOutcome, request: Request) -> None:
    pool = outcome.output_pools.get(1, b"")
    actual = [output_bytes(request, pool, k) for k in range(len(case.outputs))]
    mismatch = compare_case(case, list(case.inputs), actual)
    if mismatch:
        raise CaseFailure(mismatch)


def check_result(case: TestCase, outcome: ExecutionOutcome, request: Request, step: str) -> None:
    """``check_outcome`` and ``check_values``, the failure prefixed with ``step``."""
    try:
        check_outcome(case, outcome)
        check_values(case, outcome, request)
    except CaseFailure as err:
        raise CaseFailure(f"{step}: {err}") from None


def check_timing(timing: Timing, measured: bool, step: str) -> None:
    """A 1.2/1.3 Timing (microseconds, UINT64_MAX when not available)."""
    values = (timing.time_on_device, timing.time_in_driver)
    if not measured:
        if values != (NO_TIMING, NO_TIMING):
            raise CaseFailure(f"{step}: timing {values} reported without MeasureTiming YES (expected UINT64_MAX)")
        return
    if any(v != NO_TIMING and not 0 <= v < NO_TIMING for v in values):
        raise CaseFailure(f"{step}: timing {values} is neither UINT64_MAX nor a duration")
    if NO_TIMING not in values and values[0] > values[1]:
        raise CaseFailure(f"{step}: time on device {values[0]} us exceeds time in driver {values[1]} us")


def check_timing_ns(timing: TimingNs | None, measured: bool, step: str) -> None:
    """An AIDL Timing (nanoseconds, -1 when not available)."""
    if timing is None:
        raise CaseFailure(f"{step}: no AIDL Timing in the answer")
    values = (timing.time_on_device_ns, timing.time_in_driver_ns)
    if not measured:
        if values != (UNAVAILABLE, UNAVAILABLE):
            raise CaseFailure(f"{step}: timing {values} ns reported without measureTiming (expected -1)")
        return
    if any(v < UNAVAILABLE for v in values):
        raise CaseFailure(f"{step}: timing {values} ns: negative values other than -1")
    if UNAVAILABLE not in values and values[0] > values[1]:
        raise CaseFailure(f"{step}: time on device {values[0]} ns exceeds time in driver {values[1]} ns")


def prepare(dev: Device, case: TestCase) -> PreparedModel:
    cb = dev.prepare_model(case.model)
    if not cb.wait(WAIT):
        raise CaseFailure("prepareModel did not call back")
    if cb.status != ErrorStatus.NONE:
        raise CaseFailure(f"prepareModel failed: {cb.status.name}: {cb.message}")
    return cb.get(0)


def device_level(dev: Device) -> HalVersion:
    """The level ``dev`` serves (the newest nnhal knows when it reports one it does not)."""
    try:
        return HalVersion(dev.feature_level)
    except ValueError:
        return max(HalVersion)

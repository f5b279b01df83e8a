"""The rest of the VTS harness's executors as conformance modes (``nnhal conformance --mode``).

Each mode runs a valid case through one more way of executing and checks what the
VTS GeneratedTestHarness checks (``checks``): status, output shapes, values and timing.

- ``burst``: the 1.2 burst over its gRPC stream (``pm.burst(fast=False)``), MeasureTiming
  YES, then twice NO on the same stream (a server's burst repeat answers the third); on
  AIDL devices also an IBurst, run twice with memory identifier tokens (the second run
  sends no pool: the device uses the ones it cached), then ``releaseMemoryResource`` for
  each token. Needs 1.2.
- ``burst_fast``: the 1.2 burst on the same-host fast path (``pm.burst(fast=True)``),
  twice: a full request, then the same layout as a compact call; skipped, saying so,
  when the server offers this client none (no shared-memory directory, or a server
  started with ``--no-fast-path``). Needs 1.2.
- ``fenced``: executeFenced with MeasureTiming YES, then a second one waiting for the
  first's sync fence (on AIDL devices through the AIDL form, measureTiming off), each
  checked through getExecutionInfo. A case with a zero-sized output must be refused at
  launch with INVALID_ARGUMENT (fenced executions need sized outputs; the VTS rule) — an
  expected rejection whose detail names the step and the status. Needs 1.3.
- ``timing``: executeSynchronously with MeasureTiming NO (no timing may be reported) and
  YES (each value UINT64_MAX or a duration, device <= driver), the asynchronous execute
  with YES, and on AIDL devices the AIDL executeSynchronously both ways (-1 or >= 0 ns).
  Needs 1.2.
- ``reusable``: createReusableExecution (measureTiming on), two executeSynchronously runs
  and one executeFenced run of the one IExecution, each correct. Needs the AIDL level
  of createReusableExecution.
- ``config``: prepareModelWithConfig with priority HIGH and a compilation hint, then
  executeSynchronouslyWithConfig, executeFencedWithConfig and the IBurst's
  executeSynchronouslyWithConfig, each with an execution hint and measureTiming on. Needs
  the AIDL level of prepareModelWithConfig.

Runners return a detail for the report and raise ``CaseFailure`` naming the
step, or ``CaseSkipped`` with the reason. Each is an entry of the one mode table
(:data:`nnhal.conformance.runner.MODE_TABLE`), which says its level and how it runs.
"""

from __future__ import annotations

from collections.abc import Callable

from nnhal.client.device import Device
from nnhal.client.prepared_model import ExecutionOutcome, FencedExecution, PreparedModel
from nnhal.conformance.checks import (
    WAIT,
    CaseFailure,
    CaseSkipped,
    check_result,
    check_timing,
    check_timing_ns,
    device_level,
)
from nnhal.conformance.variants import build_request
from nnhal.conformance.vectors import TestCase
from nnhal.core.aidl_types import ExecutionConfig, PrepareModelConfig, TokenValuePair
from nnhal.core.enums import ErrorStatus, Priority
from nnhal.core.errors import HalError
from nnhal.core.operand_types import INFO
from nnhal.core.types import Request

#: A hint with no extension prefix: the device may ignore it, it must not refuse it.
_HINT = (TokenValuePair(1, b"\x01"),)
_MEASURED = ExecutionConfig(measure_timing=True)
_HINTED = ExecutionConfig(measure_timing=True, execution_hints=_HINT)
#: Memory identifier tokens of the two pools ``build_request`` makes (inputs, outputs).
_TOKENS = (0, 1)


def _fenced_result(case: TestCase, fence: FencedExecution, request: Request, step: str, measured: bool) -> None:
    """getExecutionInfo (waiting for the fence): signalled, correct, timings sane."""
    info = fence.get_execution_info(wait=True, timeout=WAIT)
    if not info.signalled:
        raise CaseFailure(f"{step}: the sync fence did not signal within {WAIT:g} s")
    check_result(case, info, request, f"{step}, getExecutionInfo")
    if fence.aidl:
        check_timing_ns(info.timing_launched_ns, measured, f"{step}: timingLaunched")
        check_timing_ns(info.timing_ns, measured, f"{step}: timingFenced")
    else:
        check_timing(info.timing_launched, measured, f"{step}: timingLaunched")
        check_timing(info.timing, measured, f"{step}: timingFenced")


def _aidl_burst_runs(case: TestCase, pm: PreparedModel, request: Request, config: ExecutionConfig) -> None:
    """Two IBurst executions naming ``_TOKENS`` (the second sends no pool), then their release."""
    with pm.aidl_burst() as burst:
        for run in (1, 2):
            step = f"IBurst execution {run}"
            outcome = burst.execute(request, _TOKENS, config=config)
            check_result(case, outcome, request, step)
            check_timing_ns(outcome.timing_ns, config.measure_timing, step)
        for token in _TOKENS:
            burst.release_memory(token)


def run_burst(dev: Device, pm: PreparedModel, case: TestCase) -> str:
    request = build_request(case)
    with pm.burst(fast=False) as burst:
        outcome = burst.execute(request, measure=True)
        check_result(case, outcome, request, "burst (gRPC stream)")
        check_timing(outcome.timing, True, "burst (gRPC stream)")
        # Unmeasured, twice: a server may answer a stream's repeated layout from what it kept
        # of the first (a burst repeat), which the second is answered by.
        for step in ("burst (gRPC stream, unmeasured)", "burst (gRPC stream, repeated)"):
            outcome = burst.execute(request)
            check_result(case, outcome, request, step)
            check_timing(outcome.timing, False, step)
    done = "1.2 burst over gRPC, measured then twice unmeasured"
    if not device_level(dev).is_aidl:
        return done
    _aidl_burst_runs(case, pm, request, _MEASURED)
    return f"{done}; IBurst twice with cached memories, released"


#: What a server started with ``--no-fast-path`` answers an ``openFastBurst`` with (its shared
#: memory directory may still be offered, for shared pools over gRPC).
NOT_OFFERED = "does not offer the fast path"


def run_burst_fast(dev: Device, pm: PreparedModel, case: TestCase) -> str:
    if not dev.shm_dir:
        raise CaseSkipped("the server offers this client no same-host fast path (no shared-memory directory)")
    request = build_request(case)
    try:
        burst = pm.burst(fast=True)
    except HalError as err:
        why = f"{err.error_status.name}: {err.message}"
        if NOT_OFFERED in err.message:  # a server started with --no-fast-path: its choice, not a failure
            raise CaseSkipped(f"the server offers no same-host fast path ({why})") from None
        raise CaseFailure(f"configureExecutionBurst (fast path) refused: {why}") from None
    with burst:
        # The second execution of the layout travels as a compact call (nnhal.core.fastpacket).
        for step in ("burst (fast path)", "burst (fast path, compact call)"):
            outcome = burst.execute(request, measure=True)
            check_result(case, outcome, request, step)
            check_timing(outcome.timing, True, step)
    return "1.2 burst on the same-host fast path, twice (a full request, then a compact call)"


def _zero_sized_output(case: TestCase) -> bool:
    main = case.model.main
    outputs = (main.operands[i] for i in main.output_indexes)
    return any(INFO[op.type].is_tensor and 0 in op.dimensions for op in outputs)


def _refused_fenced(launch: Callable[[], FencedExecution], step: str) -> str:
    """A fenced launch for a case with a zero-sized output: INVALID_ARGUMENT, as the VTS requires."""
    try:
        launch()
    except HalError as err:
        if err.error_status != ErrorStatus.INVALID_ARGUMENT:
            raise CaseFailure(
                f"zero-sized output: {step} returned {err.error_status.name}, expected INVALID_ARGUMENT"
            ) from None
        return f"expected rejection (zero-sized output): {step} INVALID_ARGUMENT: {err.message}"
    raise CaseFailure(f"zero-sized output: {step} accepted it; the VTS requires INVALID_ARGUMENT")


def _fenced_run(
    case: TestCase, launch: Callable[[], FencedExecution], request: Request, step: str, measured: bool
) -> str:
    """One fenced run checked through getExecutionInfo, or its refusal for a zero-sized output."""
    if _zero_sized_output(case):
        return _refused_fenced(launch, step)
    _fenced_result(case, launch(), request, step, measured)
    return f"{step} correct"


def run_fenced(dev: Device, pm: PreparedModel, case: TestCase) -> str:
    request = build_request(case)
    if _zero_sized_output(case):
        return _refused_fenced(lambda: pm.execute_fenced(request, measure=True), "executeFenced")
    first = pm.execute_fenced(request, measure=True)
    aidl = device_level(dev).is_aidl
    if aidl:
        second = pm.execute_fenced_aidl(request, wait_for=[first], measure=False)
    else:
        second = pm.execute_fenced(request, wait_for=[first], measure=False)
    _fenced_result(case, first, request, "executeFenced", True)
    step = f"{'AIDL ' if aidl else ''}executeFenced after the fence"
    _fenced_result(case, second, request, step, False)
    return "executeFenced, then one waiting for its fence" + (" (AIDL form)" if aidl else "")


def run_timing(dev: Device, pm: PreparedModel, case: TestCase) -> str:
    request = build_request(case)
    for measure in (False, True):
        step = f"executeSynchronously MeasureTiming {'YES' if measure else 'NO'}"
        outcome = pm.execute_request(request, measure=measure)
        check_result(case, outcome, request, step)
        check_timing(outcome.timing, measure, step)
    cb = pm.execute_request_async(request, measure=True)
    if not cb.wait(WAIT):
        raise CaseFailure("execute MeasureTiming YES: no callback")
    outcome = cb.value or ExecutionOutcome(cb.status, cb.message)
    check_result(case, outcome, request, "execute MeasureTiming YES")
    check_timing(outcome.timing, True, "execute MeasureTiming YES")
    if not device_level(dev).is_aidl:
        return "sync off/on, async on"
    for measure in (False, True):
        step = f"AIDL executeSynchronously measureTiming {str(measure).lower()}"
        outcome = pm.execute_request_aidl(request, measure=measure)
        check_result(case, outcome, request, step)
        check_timing_ns(outcome.timing_ns, measure, step)
    return "sync off/on, async on, AIDL sync off/on"


def run_reusable(dev: Device, pm: PreparedModel, case: TestCase) -> str:
    request = build_request(case)
    with pm.create_reusable_execution(request, _MEASURED) as execution:
        for run in (1, 2):
            step = f"IExecution.executeSynchronously run {run}"
            outcome = execution.compute(timeout=WAIT)
            check_result(case, outcome, request, step)
            check_timing_ns(outcome.timing_ns, True, step)
        fenced = _fenced_run(case, execution.execute_fenced, request, "IExecution.executeFenced", True)
    return f"one IExecution: two synchronous runs correct; {fenced}"


def run_config(dev: Device, case: TestCase) -> str:
    cb = dev.prepare_model_with_config(case.model, PrepareModelConfig(priority=Priority.HIGH, compilation_hints=_HINT))
    if not cb.wait(WAIT):
        raise CaseFailure("prepareModelWithConfig did not call back")
    if cb.status != ErrorStatus.NONE:
        raise CaseFailure(f"prepareModelWithConfig failed: {cb.status.name}: {cb.message}")
    request = build_request(case)
    with cb.get(0) as pm:
        outcome = pm.execute_with_config(request, _HINTED, timeout=WAIT)
        check_result(case, outcome, request, "executeSynchronouslyWithConfig")
        check_timing_ns(outcome.timing_ns, True, "executeSynchronouslyWithConfig")
        fenced = _fenced_run(
            case, lambda: pm.execute_fenced_with_config(request, _HINTED), request, "executeFencedWithConfig", True
        )
        _aidl_burst_runs(case, pm, request, _HINTED)
    return f"prepareModelWithConfig, hints given; executeSynchronouslyWithConfig and IBurst correct; {fenced}"

"""Run NNAPI test vectors against a server, in the VTS modes (``run_case``).

Modes per case (conformance/README.md):
- ``sync``: executeSynchronously_1_3, shapes and values checked;
- ``async``: execute_1_3 with its callback;
- ``dynamic``: outputs declared with all-zero dims, resolved by the driver; plus the
  insufficient-size check (output 0 one byte short -> OUTPUT_INSUFFICIENT_SIZE);
- ``quant_signed``: the quantization-coupling twin (quant8 asymm -> asymm signed);
- ``shared``: constants in a shared-memory CONSTANT_REFERENCE pool, inputs and
  outputs in shared-memory regions written in place (same-host servers only);
- ``domain``: the VTS memory-domain variant: every input and output in its own
  driver-managed buffer (IDevice::allocate with that one role), inputs filled by
  IBuffer::copyFrom, results read back by IBuffer::copyTo;
- ``burst``, ``burst_fast``, ``fenced``, ``timing``, ``reusable``, ``config``: the rest of
  the VTS harness's executors (``nnhal.conformance.executors``);
- ``validation`` (only when asked for): the VTS mutation suite (``nnhal.conformance.validation``);
- ``expect_failure`` cases run once (``sync``) and pass when anything fails, the detail
  naming the step and the status that rejected the case; the infinite-loop case must
  end in MISSED_DEADLINE_* under a 1 ms loop timeout.
A case using an operation the device does not support is skipped with the reason.

Feature levels: a case needing a newer level than the device serves (its operations,
operand types and uses, measured by the reference validator) must be refused, with
INVALID_ARGUMENT from getSupportedOperations and from prepareModel; it runs once, as
mode ``level``, which passes on exactly that (an expected rejection, not a failure).
Modes whose machinery the device's level lacks are skipped saying so.

Each mode is one entry of :data:`MODE_TABLE` (:class:`Mode`): its name, the level that
introduced its machinery, the cases (and devices) it applies to, whether it runs on the
case's prepared model (one preparation shared by all such modes) or prepares its own, and
its runner. ``MODES`` (run by default) and ``ALL_MODES`` are views of the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from nnhal.client.buffer import Buffer
from nnhal.client.device import Device
from nnhal.client.memory import SharedMemory
from nnhal.client.prepared_model import ExecutionOutcome, PreparedModel
from nnhal.conformance import executors
from nnhal.conformance.checks import (
    WAIT,
    CaseFailure,
    CaseSkipped,
    check_outcome,
    check_values,
    device_level,
    prepare,
)
from nnhal.conformance.validation import run_validation
from nnhal.conformance.variants import (
    build_request,
    coupling_applies,
    is_loop_timeout_case,
    signed_twin,
)
from nnhal.conformance.vectors import TestCase, with_unspecified_outputs
from nnhal.core.enums import ErrorStatus, HalVersion
from nnhal.core.errors import HalError
from nnhal.core.methods import method_level
from nnhal.core.types import BufferDesc, BufferRole, DataLocation, InlinePool, MemoryPool, Request, RequestArgument
from nnhal.server.executor.validate import validate_full

#: The mode a case newer than the device's level runs in: it must be refused.
LEVEL_MODE = "level"
_LOOP_TIMEOUT_NS = 1_000_000


@dataclass
class Result:
    status: str  # passed | failed | skipped
    detail: str = ""


def _prepare_variant(dev: Device, model_case: TestCase) -> PreparedModel:
    """``prepare`` of a variant model; when it fails and the device does not support the
    variant (a device that builds static graphs and unknown output shapes), CaseSkipped
    with the device's reason, as for a base case (asked only then: no cost otherwise)."""
    try:
        return prepare(dev, model_case)
    except CaseFailure:
        reasons = sorted({why for ok, why in dev.supported_operations_with_reasons(model_case.model) if not ok})
        if reasons:
            raise CaseSkipped("; ".join(reasons)) from None
        raise


def _run_sync(dev: Device, pm: PreparedModel, case: TestCase) -> None:
    request = build_request(case)
    outcome = pm.execute_request(request, timeout=None)
    check_outcome(case, outcome)
    check_values(case, outcome, request)


def _run_async(dev: Device, pm: PreparedModel, case: TestCase) -> None:
    request = build_request(case)
    cb = pm.execute_request_async(request)
    if not cb.wait(WAIT):
        raise CaseFailure("execute_1_3 did not call back")
    outcome = cb.value or ExecutionOutcome(cb.status, cb.message)
    check_outcome(case, outcome)
    check_values(case, outcome, request)


def _run_dynamic(dev: Device, case: TestCase) -> None:
    dyn = with_unspecified_outputs(case)
    with _prepare_variant(dev, dyn) as pm:
        request = build_request(dyn)
        outcome = pm.execute_request(request)
        check_outcome(dyn, outcome, True)
        check_values(dyn, outcome, request)
        sizes = dyn.output_sizes()
        if len(dyn.outputs[0].data) > 1:
            sizes[0] = len(dyn.outputs[0].data) - 1
            short = pm.execute_request(build_request(dyn, sizes))
            if short.status != ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                raise CaseFailure(
                    f"output 0 one byte short: got {short.status.name}, expected OUTPUT_INSUFFICIENT_SIZE"
                )
            if not short.output_shapes or short.output_shapes[0].is_sufficient:
                raise CaseFailure("output 0 one byte short: outputShapes[0].isSufficient is not false")


def _run_quant_signed(dev: Device, case: TestCase) -> None:
    """The quantization-coupling twin (quant8 asymm -> asymm signed), prepared and run sync."""
    twin = signed_twin(case)
    with _prepare_variant(dev, twin) as pm:
        _run_sync(dev, pm, twin)


def _run_validation(dev: Device, case: TestCase) -> str:
    passed, detail = run_validation(dev, case)
    if not passed:
        raise CaseFailure(detail)
    return detail


def _run_shared(dev: Device, case: TestCase) -> None:
    """Constants, inputs and outputs in shared memory (nothing tensor-sized through gRPC)."""
    regions: list[SharedMemory] = []
    try:
        model = case.model
        if model.pools:
            pool = model.pools[0]
            assert isinstance(pool, InlinePool)
            const = SharedMemory.from_array(dev, np.frombuffer(pool.data, np.uint8))
            regions.append(const)
            model = replace(model, pools=(const.pool(),))
        inline = build_request(case)
        in_pool, out_pool = inline.pools
        assert isinstance(in_pool, InlinePool) and isinstance(out_pool, InlinePool)
        inp = SharedMemory.from_array(dev, np.frombuffer(in_pool.data, np.uint8))
        out = SharedMemory.create(dev, out_pool.size)
        regions += [inp, out]
        request = replace(inline, pools=(inp.pool(), out.pool()))
        with prepare(dev, replace(case, model=model)) as pm:
            outcome = pm.execute_request(request)
        check_outcome(case, outcome)
        outcome.output_pools = {1: out.view(np.uint8, (out.size,)).tobytes()}
        check_values(case, outcome, inline)
    finally:
        for r in regions:
            r.release()


def _run_domain(dev: Device, pm: PreparedModel, case: TestCase) -> None:
    """Inputs and outputs in driver-managed buffers; only copyFrom / copyTo move tensors."""
    inline = build_request(case)
    main = case.model.main
    pools: list[MemoryPool] = list(inline.pools)
    buffers: list[Buffer] = []
    out_buffers: list[Buffer] = []
    try:
        inputs = list(inline.inputs)
        for k, value in enumerate(case.inputs):
            if not value:  # omitted, or an empty tensor (the VTS keeps those out of buffers)
                continue
            buf = dev.allocate(BufferDesc(), [pm], [BufferRole(0, k, 1.0)], [])
            buffers.append(buf)
            buf.copy_from(np.frombuffer(value, np.uint8), main.operands[main.input_indexes[k]].dimensions)
            inputs[k] = RequestArgument(location=DataLocation(len(pools), 0, 0))
            pools.append(buf.pool())
        outputs = []
        for k in range(len(case.outputs)):
            buf = dev.allocate(BufferDesc(), [pm], [], [BufferRole(0, k, 1.0)])
            buffers.append(buf)
            out_buffers.append(buf)
            outputs.append(RequestArgument(location=DataLocation(len(pools), 0, 0)))
            pools.append(buf.pool())
        outcome = pm.execute_request(Request(tuple(inputs), tuple(outputs), tuple(pools)))
        check_outcome(case, outcome)
        out_pool = inline.pools[1]
        assert isinstance(out_pool, InlinePool)
        results = bytearray(out_pool.size)
        for k, expected in enumerate(case.outputs):
            loc = inline.outputs[k].location
            data = out_buffers[k].copy_to_array(np.uint8, (len(expected.data),))
            results[loc.offset : loc.offset + len(data)] = data.tobytes()
        outcome.output_pools = {1: bytes(results)}
        check_values(case, outcome, inline)
    finally:
        for buf in buffers:
            buf.release()


def _rejected(step: str, status: ErrorStatus, message: str) -> Result:
    """An expected failure, naming the step and the status that rejected the case."""
    return Result("passed", f"expected failure: {step} returned {status.name}: {message}")


def _expect_failure(dev: Device, case: TestCase) -> Result:
    try:
        cb = dev.prepare_model(case.model)
    except HalError as err:
        return _rejected("prepareModel (launch)", err.error_status, err.message)
    if not cb.wait(WAIT):
        return Result("failed", "prepareModel did not call back")
    if cb.status != ErrorStatus.NONE:
        return _rejected("prepareModel (callback)", cb.status, cb.message)
    with cb.get(0) as pm:
        loop = is_loop_timeout_case(case)
        outcome = pm.execute_request(build_request(case), loop_timeout_ns=_LOOP_TIMEOUT_NS if loop else 0)
    if loop:
        if outcome.status in (ErrorStatus.MISSED_DEADLINE_TRANSIENT, ErrorStatus.MISSED_DEADLINE_PERSISTENT):
            return _rejected("executeSynchronously (1 ms loop timeout)", outcome.status, outcome.message)
        return Result("failed", f"loop timeout case returned {outcome.status.name}, expected MISSED_DEADLINE_*")
    if outcome.status != ErrorStatus.NONE:
        return _rejected("executeSynchronously", outcome.status, outcome.message)
    return Result("failed", "expected a failure; preparation and execution succeeded")


def _attempt(fn: object, *args: object) -> Result:
    try:
        detail = fn(*args)  # type: ignore[operator]
    except CaseFailure as err:
        return Result("failed", str(err))
    except CaseSkipped as err:
        return Result("skipped", str(err))
    except HalError as err:
        return Result("failed", str(err))
    return Result("passed", detail if isinstance(detail, str) else "")


def _always(_dev: Device, _case: TestCase) -> bool:
    return True


#: A mode's runner: the device, the case's prepared model (None for a mode that prepares its
#: own) and the case; a detail for the report, or None. Raises CaseFailure / CaseSkipped.
Runner = Callable[[Device, PreparedModel | None, TestCase], object]


@dataclass(frozen=True)
class Mode:
    """One conformance mode (module docstring). Build with :meth:`on_prepared` / :meth:`own`."""

    name: str
    run: Runner
    #: True: runs on the case's prepared model; False: prepares what it needs itself.
    prepared: bool
    #: The level whose machinery the mode exercises (None: every level).
    since: HalVersion | None = None
    #: Whether the mode runs for this case on this device at all (as the harness builds its
    #: variants); a mode that does not apply leaves no result.
    applies: Callable[[Device, TestCase], bool] = _always
    #: Run when no ``--mode`` is given; False for a long mode run only when asked for.
    default: bool = True

    @classmethod
    def on_prepared(
        cls, name: str, fn: Callable[[Device, PreparedModel, TestCase], object], since: HalVersion | None = None
    ) -> Mode:
        def run(dev: Device, pm: PreparedModel | None, case: TestCase) -> object:
            assert pm is not None
            return fn(dev, pm, case)

        return cls(name, run, True, since)

    @classmethod
    def own(
        cls,
        name: str,
        fn: Callable[[Device, TestCase], object],
        since: HalVersion | None = None,
        applies: Callable[[Device, TestCase], bool] = _always,
        default: bool = True,
    ) -> Mode:
        return cls(name, lambda dev, _pm, case: fn(dev, case), False, since, applies, default)


#: Every conformance mode, in the order results are reported.
MODE_TABLE: tuple[Mode, ...] = (
    Mode.on_prepared("sync", _run_sync),
    Mode.on_prepared("async", _run_async),
    # Like the harness, the dynamic variant exists only for cases without RANK/IF/WHILE.
    Mode.own("dynamic", _run_dynamic, HalVersion.V1_2, lambda _d, case: not case.has_control_flow_or_rank),
    Mode.own("quant_signed", _run_quant_signed, HalVersion.V1_3, lambda _d, case: coupling_applies(case)),
    Mode.own("shared", _run_shared, applies=lambda dev, _c: bool(dev.shm_dir)),  # same-host servers only
    Mode.on_prepared("domain", _run_domain, HalVersion.V1_3),
    Mode.on_prepared("burst", executors.run_burst, method_level("configureExecutionBurst")),
    Mode.on_prepared("burst_fast", executors.run_burst_fast, method_level("configureExecutionBurst")),
    Mode.on_prepared("fenced", executors.run_fenced, method_level("executeFenced")),
    Mode.on_prepared("timing", executors.run_timing, method_level("executeSynchronously")),
    Mode.on_prepared("reusable", executors.run_reusable, method_level("createReusableExecution")),
    Mode.own("config", executors.run_config, method_level("prepareModelWithConfig")),
    Mode.own("validation", _run_validation, default=False),  # the VTS mutation suite is long
)
MODE_BY_NAME = {m.name: m for m in MODE_TABLE}
#: The modes run when none is named; every mode there is.
MODES = tuple(m.name for m in MODE_TABLE if m.default)
ALL_MODES = tuple(MODE_BY_NAME)


def _expect_level_rejection(dev: Device, case: TestCase, needed: HalVersion, level: HalVersion) -> Result:
    """A case newer than the device: INVALID_ARGUMENT from getSupportedOperations and prepareModel."""
    why = f"needs NN HAL {needed.label}, the device serves {level.label}"
    steps: list[str] = []
    try:
        dev.supported_operations_with_reasons(case.model)
    except HalError as err:
        if err.error_status != ErrorStatus.INVALID_ARGUMENT:
            return Result("failed", f"{why}: getSupportedOperations returned {err.error_status.name}: {err.message}")
        steps.append("getSupportedOperations INVALID_ARGUMENT")
    else:
        return Result("failed", f"{why}: getSupportedOperations accepted the model")
    status: ErrorStatus
    try:
        cb = dev.prepare_model(case.model)
    except HalError as err:
        status = err.error_status
    else:
        if not cb.wait(WAIT):
            return Result("failed", f"{why}: prepareModel did not call back")
        status = cb.status
        if status == ErrorStatus.NONE:
            cb.get(0).release()
    if status != ErrorStatus.INVALID_ARGUMENT:
        return Result("failed", f"{why}: prepareModel returned {status.name}, expected INVALID_ARGUMENT")
    steps.append("prepareModel INVALID_ARGUMENT")
    return Result("passed", f"expected rejection ({why}): {', '.join(steps)}")


def case_level(case: TestCase) -> HalVersion | None:
    """The level ``case`` needs, by the reference validator (None for an invalid model)."""
    if case.expect_failure:
        return None
    pools = [p.data for p in case.model.pools if isinstance(p, InlinePool)]
    try:
        return validate_full(case.model, pools)
    except HalError:
        return None


def run_case(dev: Device, case: TestCase, modes: tuple[str, ...]) -> dict[str, Result]:
    """Every applicable mode of ``case`` (``modes``: names in MODE_TABLE), or the ``level``
    check when the case is newer than the device."""
    level = device_level(dev)
    needed = case_level(case)
    if needed is not None and needed > level:
        return {LEVEL_MODE: _expect_level_rejection(dev, case, needed, level)}
    chosen = [MODE_BY_NAME[name] for name in modes]
    lacking = [m for m in chosen if m.since is not None and m.since > level]
    skipped = {
        m.name: Result("skipped", f"{m.name} needs NN HAL {m.since.label}; the device serves {level.label}")
        for m in lacking
        if m.since is not None and not case.expect_failure and m.applies(dev, case)
    }
    results = _run_modes(dev, case, [m for m in chosen if m not in lacking])
    if results and all(r.status == "skipped" for r in results.values()):
        return results  # the device does not support the case: every mode says why
    return {**results, **skipped}


def _run_modes(dev: Device, case: TestCase, chosen: list[Mode]) -> dict[str, Result]:
    modes = [m.name for m in chosen]
    try:
        support = dev.supported_operations_with_reasons(case.model)
    except HalError as err:
        if case.expect_failure:
            return {"sync": _rejected("getSupportedOperations", err.error_status, err.message)}
        return {m: Result("failed", f"getSupportedOperations: {err}") for m in modes}
    reasons = sorted({why for ok, why in support if not ok})
    if reasons and case.expect_failure:
        # The invalid model is rejected by the driver itself: what the case asks for.
        return {"sync": Result("passed", f"rejected by getSupportedOperations: {'; '.join(reasons)}")}
    if reasons:
        return {m: Result("skipped", "; ".join(reasons)) for m in modes}
    if case.expect_failure:
        return {"sync": _expect_failure(dev, case)}
    results: dict[str, Result] = {}
    applicable = [m for m in chosen if m.applies(dev, case)]
    on_prepared = [m for m in applicable if m.prepared]
    if on_prepared:
        try:
            pm = prepare(dev, case)
        except (CaseFailure, HalError) as err:
            for m in on_prepared:
                results[m.name] = Result("failed", str(err))
        else:
            with pm:
                for m in on_prepared:
                    results[m.name] = _attempt(m.run, dev, pm, case)
    for m in applicable:
        if not m.prepared:
            results[m.name] = _attempt(m.run, dev, None, case)
    return {m.name: results[m.name] for m in applicable}

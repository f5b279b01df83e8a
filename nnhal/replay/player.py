"""Replaying a recording (``nnhal.core.recording``) against a device, call by call.

Calls are replayed in their recorded order through the public client (``Device``), each in
the form it was made — a synchronous, asynchronous or burst execution — with its recorded
deadline, priority and loop timeout; the recorded names of prepared models are mapped to
the replay's own (a call on a model the replay could not prepare is a difference). Each
answer is compared with the recorded one: the status, the output shapes, and the outputs
with the conformance harness's tolerance for their operand type (``conformance.compare``);
a model with RANDOM_MULTINOMIAL is compared by status and shapes only (its samples are
random by definition). What cannot be replayed is skipped with the reason: a driver-managed
buffer (its allocation is not a recorded call), a shared pool recorded without contents.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nnhal.client.burst import Burst
from nnhal.client.device import Device
from nnhal.client.outcome import ExecutionOutcome
from nnhal.client.prepared_model import PreparedModel
from nnhal.conformance.compare import compare_values
from nnhal.core.enums import ErrorStatus, OperandType, OperationType
from nnhal.core.errors import HalError
from nnhal.core.recorded import (
    model_from,
    output_pools_from,
    output_shapes_from,
    preference_from,
    priority_from,
    request_from,
    status_from,
)
from nnhal.core.recording import Entry, Recording, RecordingError
from nnhal.core.types import BufferTokenPool, Model, Request

#: Seconds one replayed call may take at the most (beyond its own deadline, when it has one).
CALL_TIMEOUT_S = 120.0
#: Method names replayed as an asynchronous execution (launch, then notify).
ASYNC_METHODS = frozenset({"execute", "execute_1_2", "execute_1_3"})


@dataclass(frozen=True)
class Difference:
    """One way a replayed call's answer differs from the recorded one."""

    call: int
    method: str
    what: str
    recorded: str
    replayed: str


@dataclass(frozen=True)
class Latency:
    """A call's recorded and replayed duration (microseconds)."""

    call: int
    method: str
    recorded_us: int
    replayed_us: int


@dataclass
class Report:
    """What a replay found: counts, differences, skipped calls with why, latencies."""

    calls: int = 0
    replayed: int = 0
    differences: list[Difference] = field(default_factory=list)
    skipped: list[tuple[int, str, str]] = field(default_factory=list)
    latencies: list[Latency] = field(default_factory=list)


@dataclass
class _Model:
    pm: PreparedModel
    model: Model | None


class Player:
    """Replays ``rec`` on ``device``; :meth:`run` once. ``progress`` is told after each call."""

    def __init__(self, rec: Recording, device: Device, progress: Callable[[int], None] | None = None) -> None:
        self.rec = rec
        self.device = device
        self.progress = progress
        self.report = Report(calls=len(rec.calls))
        self._models: dict[str, _Model] = {}
        #: The one burst kept open (for the model that used it last): a client's bursts are capped.
        self._burst: tuple[PreparedModel, Burst] | None = None

    def run(self) -> Report:
        try:
            for seq, entry in enumerate(self.rec.calls, 1):
                self._call(seq, entry)
                if self.progress is not None:
                    self.progress(seq)
        finally:
            self._release()
        return self.report

    # -- one call -----------------------------------------------------------------------
    def _call(self, seq: int, entry: Entry) -> None:
        where = f"{self.rec.path}: call {seq}"
        method = str(entry.get("method", "?"))
        kind = entry.get("kind")
        recorded = status_from(entry, where)
        args = entry.get("args")
        if not isinstance(args, dict):
            raise RecordingError(f"{where}: missing or malformed 'args'")
        t0 = time.perf_counter()
        if kind == "prepare":
            status, message = self._prepare(args, entry, where)
            outcome, model, request = None, None, None
        elif kind == "execute":
            found = self._execute(seq, method, args, where)
            if found is None:
                return
            outcome, model, request = found
            status, message = outcome.status, outcome.message
        elif kind == "prepare_from_cache":
            self.report.skipped.append((seq, method, "a preparation from cache files (not replayed)"))
            return
        else:
            raise RecordingError(f"{where}: unknown call kind {kind!r}")
        elapsed_us = round((time.perf_counter() - t0) * 1e6)
        self.report.replayed += 1
        if isinstance(entry.get("duration_us"), int):
            self.report.latencies.append(Latency(seq, method, int(entry["duration_us"]), elapsed_us))
        if status != recorded:
            self.report.differences.append(
                Difference(seq, method, "status", recorded.name, f"{status.name}: {message}"[:200])
            )
            return
        if outcome is not None and request is not None and "answer" in entry:
            self._compare(seq, method, entry["answer"], outcome, model, request, where)

    def _prepare(self, args: dict[str, Any], entry: Entry, where: str) -> tuple[ErrorStatus, str]:
        model = model_from(self.rec, args.get("model"), where)
        deadline = _seconds(args.get("deadline_us"))
        token = bytes.fromhex(args["token"]) if isinstance(args.get("token"), str) and args["token"] else None
        try:
            cb = self.device.prepare_model(
                model,
                preference=preference_from(args, where),
                priority=priority_from(args, where),
                timeout=deadline,
                cache_token=token,
            )
            pm = cb.get(CALL_TIMEOUT_S + (deadline or 0.0))
        except HalError as err:
            return err.error_status, err.message
        answer = entry.get("answer")
        name = answer.get("handle") if isinstance(answer, dict) else None
        if isinstance(name, str):
            self._models[name] = _Model(pm, model)
        else:
            pm.release()
        return ErrorStatus.NONE, ""

    def _execute(
        self, seq: int, method: str, args: dict[str, Any], where: str
    ) -> tuple[ExecutionOutcome, Model | None, Request] | None:
        request = request_from(args.get("request"), self.rec, where)
        if any(isinstance(p, BufferTokenPool) for p in request.pools):
            self.report.skipped.append((seq, method, "uses a driver-managed buffer (allocations are not recorded)"))
            return None
        name = args.get("prepared_model")
        target = self._models.get(name) if isinstance(name, str) else None
        if target is None:
            # The replay never prepared that model (its preparation differed, reported there).
            missing = ExecutionOutcome(ErrorStatus.INVALID_ARGUMENT, f"the replay has no prepared model {name}")
            return missing, None, request
        deadline = _seconds(args.get("deadline_us"))
        measure = bool(args.get("measure", False))
        loop = args.get("loop_timeout_ns", 0)
        loop_ns = loop if isinstance(loop, int) and not isinstance(loop, bool) and loop >= 0 else 0
        return self._run(target, method, request, measure, deadline, loop_ns), target.model, request

    def _run(
        self, target: _Model, method: str, request: Request, measure: bool, deadline: float | None, loop_ns: int
    ) -> ExecutionOutcome:
        pm = target.pm
        if "burst" in method.lower():
            if self._burst is None or self._burst[0] is not pm:
                self._close_burst()
                self._burst = (pm, pm.burst())
            return self._burst[1].execute(request, measure=measure, timeout=deadline)
        if method in ASYNC_METHODS:
            cb = pm.execute_request_async(request, measure=measure, timeout=deadline, loop_timeout_ns=loop_ns)
            try:
                return cb.get(CALL_TIMEOUT_S + (deadline or 0.0))
            except HalError as err:
                return ExecutionOutcome(err.error_status, err.message)
        return pm.execute_request(request, measure=measure, timeout=deadline, loop_timeout_ns=loop_ns)

    # -- comparing -------------------------------------------------------------------------
    def _compare(
        self,
        seq: int,
        method: str,
        answer: Any,
        outcome: ExecutionOutcome,
        model: Model | None,
        request: Request,
        where: str,
    ) -> None:
        def differ(what: str, recorded: str, replayed: str) -> None:
            self.report.differences.append(Difference(seq, method, what, recorded, replayed))

        shapes = output_shapes_from(answer, where)
        got = tuple((tuple(s.dimensions), s.is_sufficient) for s in outcome.output_shapes)
        want = tuple((tuple(s.dimensions), s.is_sufficient) for s in shapes)
        if want and got != want:
            differ("output shapes", str([list(d) for d, _ in want]), str([list(d) for d, _ in got]))
            return
        if outcome.status != ErrorStatus.NONE or model is None:
            return
        if any(op.type == OperationType.RANDOM_MULTINOMIAL for op in model.main.operations):
            return
        recorded = output_pools_from(answer, self.rec, where)
        main = model.main
        relaxed = model.relax_computation_float32_to_float16 or any(
            o.type in (OperandType.TENSOR_FLOAT16, OperandType.FLOAT16) for o in main.operands
        )
        for k, arg in enumerate(request.outputs):
            pool = arg.location.pool_index
            if arg.has_no_value or pool not in recorded or k >= len(main.output_indexes):
                continue
            mine = outcome.output_pools.get(pool)
            if mine is None:
                differ(f"output {k}", "returned", "not returned")
                continue
            start, length = arg.location.offset, arg.location.length
            exp = recorded[pool][start : start + length] if length else recorded[pool][start:]
            act = bytes(mine)[start : start + length] if length else bytes(mine)[start:]
            operand = main.operands[main.output_indexes[k]]
            dims = shapes[k].dimensions if k < len(shapes) else arg.dimensions or operand.dimensions
            n = math.prod(dims)
            msg = compare_values(k, operand.type, n, exp, act, relaxed, None) if n else None
            if msg is not None:
                differ(f"output {k}", "recorded values", msg)

    def _close_burst(self) -> None:
        if self._burst is not None:
            burst, self._burst = self._burst[1], None
            try:
                burst.close()
            except HalError:
                pass

    def _release(self) -> None:
        self._close_burst()
        for m in self._models.values():
            try:
                m.pm.release()
            except HalError:
                pass
        self._models.clear()


def _seconds(us: Any) -> float | None:
    """A recorded deadline (microseconds left at arrival) as a client timeout; at least 1 ms."""
    if not isinstance(us, int) or isinstance(us, bool):
        return None
    return max(us, 1000) / 1e6
